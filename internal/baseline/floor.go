package baseline

import (
	"context"
	"time"
)

// Floor is the least a hedger can pay on its fast path while keeping the
// promise that it returns at the deadline even if fn ignores ctx: fn on a
// goroutine of its own, one handoff back, and one timer armed and
// stopped. It never hedges and never returns early (its timer does
// nothing), so it is a measuring stick for the fast path, not a hedge:
// whatever a hedger costs above it is its own bookkeeping. Safe for
// concurrent use.
func Floor[T any](ctx context.Context, delay time.Duration, fn func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		ch <- result{v, err}
	}()
	t := time.AfterFunc(delay, nop)
	r := <-ch
	t.Stop()
	return r.v, r.err
}

// nop is the floor's timer function. A func literal inside the generic
// Floor would close over its type dictionary and cost an allocation that
// no hedger has to pay.
func nop() {}
