// Tests for a call that reads its start only when it first needs it: on
// real time, without a deadline, an Observer, a Learner or hooks of the
// user's to ask first (see since in call.go).

package hedge_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tailcut/hedge"
)

// A primary that fails retryable before its hedge is due is retried at
// once, whatever the delay: a Fixed delay past the end of time schedules
// no hedge, and must not make the first reading of the start look like
// the deadline's.
func TestLazyStartRetryBehindAnEndlessDelay(t *testing.T) {
	for _, d := range []time.Duration{time.Hour, math.MaxInt64 - 1, math.MaxInt64} {
		t.Run(d.String(), func(t *testing.T) {
			v, err := hedge.Do(context.Background(), hedge.Policy[int]{Delay: hedge.Fixed(d), MaxAttempts: 2},
				func(ctx context.Context) (int, error) {
					if hedge.Attempt(ctx) == 0 {
						return 0, errors.New("unavailable")
					}
					return 1, nil
				})
			if v != 1 || err != nil {
				t.Errorf("Do = %d, %v; want 1, nil from the retry", v, err)
			}
		})
	}
}

// A call that leaves its start unread starts its hedges at their delays,
// as one that reads it: after a slow primary, after a retry that an early
// failure made start, and after the primary reported its start.
func TestLazyStartHedgesAtTheirDelays(t *testing.T) {
	const d = 10 * time.Millisecond
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context) (time.Duration, error) // attempt k's run, and its error
		want []time.Duration                                  // when each attempt started
	}{{
		name: "slow primary",
		fn:   func(context.Context) (time.Duration, error) { return time.Second, nil },
		want: []time.Duration{0, d, 2 * d},
	}, {
		name: "early failure",
		fn: func(ctx context.Context) (time.Duration, error) {
			if hedge.Attempt(ctx) == 0 {
				return 3 * time.Millisecond, errors.New("unavailable")
			}
			return time.Second, nil
		},
		want: []time.Duration{0, 3 * time.Millisecond, 3*time.Millisecond + d},
	}, {
		name: "started",
		fn: func(ctx context.Context) (time.Duration, error) {
			if hedge.Attempt(ctx) == 0 {
				time.Sleep(2 * time.Millisecond)
				hedge.Started(ctx)
			}
			return time.Second, nil
		},
		want: []time.Duration{0, d, 2 * d},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var got []time.Duration
				start := time.Now()
				_, _ = hedge.Do(context.Background(), hedge.Policy[int]{Delay: hedge.Fixed(d), MaxAttempts: 3},
					func(ctx context.Context) (int, error) {
						mu.Lock()
						got = append(got, time.Since(start))
						mu.Unlock()
						run, err := tc.fn(ctx)
						select {
						case <-time.After(run):
						case <-ctx.Done():
							return 0, ctx.Err()
						}
						return 1, err
					})
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("attempts started at (-want +got):\n%s", diff)
				}
			})
		})
	}
}
