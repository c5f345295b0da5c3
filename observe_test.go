package hedge_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

type tenantKey struct{}

// The Observer gets the caller's context and, in the Report, when each
// attempt started, how long the primary ran (or a lower bound) and which
// attempt won.
func TestObserverSeesTheCall(t *testing.T) {
	tests := []struct {
		name    string
		primary time.Duration // when the primary answers
		want    hedge.Report
	}{{
		name:    "the primary answers first",
		primary: 15 * ms,
		want: hedge.Report{
			Attempts: 2, Started: [hedge.MaxAttemptsLimit]time.Duration{0, 10 * ms},
			Winner: 0, Primary: 15 * ms, PrimaryAnswered: true, Elapsed: 15 * ms,
		},
	}, {
		name:    "the second hedge wins; the primary ran at least until then",
		primary: time.Hour,
		want: hedge.Report{
			Attempts: 3, Started: [hedge.MaxAttemptsLimit]time.Duration{0, 10 * ms, 20 * ms},
			Winner: 2, Primary: 25 * ms, Elapsed: 25 * ms,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got hedge.Report
				var tenant any
				p := hedge.Policy[int]{
					Delay: hedge.Fixed(10 * ms), MaxAttempts: 3,
					Observer: hedge.ObserverFunc(func(ctx context.Context, r hedge.Report) {
						got, tenant = r, ctx.Value(tenantKey{})
					}),
				}
				ctx := context.WithValue(t.Context(), tenantKey{}, "t1")
				hedge.Do(ctx, p, func(ctx context.Context) (int, error) {
					d := map[int]time.Duration{0: tt.primary, 1: time.Hour, 2: 5 * ms}[hedge.Attempt(ctx)]
					if err := sleepCtx(ctx, d); err != nil {
						return 0, err
					}
					return 1, nil
				})
				if tenant != "t1" {
					t.Errorf("Observer saw ctx value %v, want the caller's t1", tenant)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("report (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The Report tells a retry, started at once when an attempt ended
// retryable, from a hedge, started when its delay passed.
func TestReportTellsRetriesFromHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got hedge.Report
		p := hedge.Policy[int]{
			Delay: hedge.Fixed(10 * ms), MaxAttempts: 4,
			Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) { got = r }),
		}
		hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			switch hedge.Attempt(ctx) {
			case 0: // fails at 3 ms: attempt 1 is its retry
				if err := sleepCtx(ctx, 3*ms); err != nil {
					return 0, err
				}
				return 0, errors.New("unavailable")
			case 3: // the second hedge after the retry, at 23 ms, wins
				return 1, sleepCtx(ctx, 2*ms)
			}
			return 0, sleepCtx(ctx, time.Hour)
		})
		want := hedge.Report{
			Attempts: 4, Started: [hedge.MaxAttemptsLimit]time.Duration{0, 3 * ms, 13 * ms, 23 * ms},
			Retry:  [hedge.MaxAttemptsLimit]bool{false, true, false, false},
			Winner: 3, Primary: 3 * ms, PrimaryAnswered: true, Elapsed: 25 * ms,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
	})
}
