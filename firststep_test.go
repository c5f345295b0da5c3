// Regression tests for the call's first step, which takes the primary
// without the call's lock, and for its times kept as offsets from its
// start.

package hedge

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
)

// A caller that gives up after Do checked ctx but before the primary's
// goroutine runs ends the call: Do returns the context's error, and fn is
// not called. The step that takes the primary must look at ctx first, as
// every other step does; the caller's context is done before any step
// runs here, so no interleaving excuses running fn.
func TestPrimaryNotRunOnceTheCallerGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for i := range 20 {
			ctx, cancel := context.WithCancel(context.Background())
			delay := DelayFunc(func(context.Context, int) time.Duration {
				cancel() // on the caller's goroutine, before the primary starts
				return time.Second
			})
			var calls atomic.Int32
			v, err := Do(ctx, Policy[int]{Delay: delay, MaxAttempts: 2},
				func(context.Context) (int, error) { calls.Add(1); return 1, nil })
			synctest.Wait()
			if !errors.Is(err, context.Canceled) || calls.Load() != 0 {
				t.Fatalf("call %d: Do = %d, %v with fn called %d times; want context.Canceled, fn not called",
					i, v, err, calls.Load())
			}
		}
	})
}

// A clock set back behind the call's start, with a hedge due near the
// end of time: arm must wait for it, not take the offset's overflow for
// a hedge due already (which kicks a step that arms again, without end).
func TestArmDoesNotOverflowOnAClockSetBack(t *testing.T) {
	mock := clock.NewMock()
	c := &call[int]{clock: &policyClock{Clock: mock}, nextAt: never - time.Second, timeout: never, stepFn: func() {}}
	c.arm(-2 * time.Second) // the mock was Set 2s before the call's start
	if c.kick {
		t.Fatal("arm kicked a step for a hedge due near the end of time")
	}
	c.stopTimer()
}
