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

// An attempt started because another ended retryable has no delay to be
// too late for. A learned delay warming up answers its 10s Ceiling, and
// the Timeout is 5s: the "half the delay must be left" rule would refuse
// the retry, yet only the deadline itself may.
func TestRetryIsNotTooLateToHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stats hedge.Stats
		p := hedge.Policy[int]{Delay: &hedge.Percentile{}, Timeout: 5 * time.Second, Observer: &stats}
		start := time.Now()
		var starts []time.Duration
		v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			starts = append(starts, time.Since(start))
			time.Sleep(10 * ms)
			if hedge.Attempt(ctx) == 0 {
				return 0, errBusy // a 503
			}
			return 2, nil
		})
		if v != 2 || err != nil {
			t.Errorf("Do = %v, %v; want the retry's 2", v, err)
		}
		if diff := cmp.Diff([]time.Duration{0, 10 * ms}, starts); diff != "" {
			t.Errorf("starts (-want +got):\n%s", diff)
		}
		if s := stats.Snapshot(); s.DeadlineSkips != 0 {
			t.Errorf("DeadlineSkips = %d, want 0", s.DeadlineSkips)
		}
	})
}

// The retry still needs the deadline not to have passed: an attempt
// that ends retryable just as the deadline passes starts nothing.
func TestRetryAfterTheDeadlineIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stats hedge.Stats
		clk := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Timeout: 50 * ms, Observer: &stats}
		_, err := hedge.Do(t.Context(), clk, func(ctx context.Context) (int, error) {
			time.Sleep(80 * ms) // ignores ctx: ends after the deadline
			return 0, errBusy
		})
		if err != context.DeadlineExceeded {
			t.Errorf("Do = %v, want the deadline", err)
		}
		time.Sleep(time.Second)
		if s := stats.Snapshot(); s.Attempts != 1 {
			t.Errorf("%d attempts, want 1", s.Attempts)
		}
	})
}

// A hedge due at once whose budget takes a second to grant it: the claim
// is open while the Timeout passes, and Do returns at the Timeout, not
// when the grant comes or the primary gives up.
func TestTimeoutDoesNotWaitForASlowGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		permits := &ledger{grants: 1, wait: time.Second}
		p := hedge.Policy[int]{Delay: hedge.Fixed(0), MaxAttempts: 2, Timeout: 50 * time.Millisecond, Budget: permits}
		start := time.Now()
		_, err := hedge.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			time.Sleep(10 * time.Second) // ignores ctx
			return 1, nil
		})
		if at := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || at != 50*time.Millisecond {
			t.Errorf("Do = %v at %v; want context.DeadlineExceeded at 50ms", err, at)
		}
		time.Sleep(20 * time.Second)
	})
}
