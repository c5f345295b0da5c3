package hedge_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// doneLog is a Budget that grants everything and logs every Done.
type doneLog struct {
	mu   sync.Mutex
	done []string
}

func (l *doneLog) Allow(context.Context, int) bool { return true }

func (l *doneLog) Done(_ context.Context, k int, o hedge.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = append(l.done, string(rune('0'+k))+" "+o.String())
}

func (l *doneLog) log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.done...)
}

// A Budget hears TimedOut for an attempt that the call's deadline cut off,
// whether the deadline is the Timeout's or ctx's, and Canceled for one
// that lost the race or whose caller gave up: only the first says
// something of the upstream.
func TestDoneTellsTimedOutFromCanceled(t *testing.T) {
	hang := func(ctx context.Context) (int, error) {
		return 0, lab.Wait(ctx, time.Hour)
	}
	hedgeWins := func(ctx context.Context) (int, error) {
		if hedge.Attempt(ctx) == 0 {
			return 0, lab.Wait(ctx, time.Hour)
		}
		return 1, nil
	}
	tests := []struct {
		name string
		run  func(ctx context.Context, b hedge.Budget)
		want []string
	}{
		{"Timeout", func(ctx context.Context, b hedge.Budget) {
			hedge.Do(ctx, hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Timeout: 100 * ms, Budget: b}, hang)
		}, []string{"0 TimedOut", "1 TimedOut"}},
		{"ctx's deadline", func(ctx context.Context, b hedge.Budget) {
			ctx, cancel := context.WithTimeout(ctx, 100*ms)
			defer cancel()
			hedge.Do(ctx, hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: b}, hang)
		}, []string{"0 TimedOut", "1 TimedOut"}},
		{"caller gives up", func(ctx context.Context, b hedge.Budget) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(100*ms, cancel)
			hedge.Do(ctx, hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: b}, hang)
		}, []string{"0 Canceled", "1 Canceled"}},
		{"loser", func(ctx context.Context, b hedge.Budget) {
			hedge.Do(ctx, hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Timeout: 100 * ms, Budget: b}, hedgeWins)
		}, []string{"0 Canceled", "1 Accept"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var l doneLog
				tt.run(t.Context(), &l)
				synctest.Wait() // the cancelled attempts have returned
				// Attempts cut off at one instant report in either order.
				got := slices.Sorted(slices.Values(l.log()))
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("Done calls (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// A hung upstream opens the breaker: primaries that the deadline cuts off
// are failures. Each of the first Samples calls makes two attempts; then
// OnOpen runs once and the calls after it make one.
func TestBreakerOpensOnAHungUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o opens
		b := &hedge.Breaker{Samples: 10, OnOpen: o.onOpen}
		hang := func(ctx context.Context) (int, error) { return 0, lab.Wait(ctx, time.Hour) }
		var attempts []int
		for range 20 {
			var r hedge.Report
			p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Timeout: 100 * ms, Budget: b,
				Observer: observerFunc(func(got hedge.Report) { r = got })}
			if _, err := hedge.Do(t.Context(), p, hang); err != context.DeadlineExceeded {
				t.Fatalf("Do: %v, want DeadlineExceeded", err)
			}
			synctest.Wait() // the attempts have returned, and told the breaker
			attempts = append(attempts, r.Attempts)
		}
		want := []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
		if diff := cmp.Diff(want, attempts); diff != "" {
			t.Errorf("attempts per call (-want +got)\n%s", diff)
		}
		if n := o.count(); n != 1 {
			t.Errorf("OnOpen ran %d times, want 1", n)
		}
	})
}
