// Package baseline holds what hedge measures itself against: the hedge a
// careful Go programmer writes by hand (HandRolled), and the least any
// hedger that returns at the deadline must pay on its fast path (Floor).
package baseline

import (
	"context"
	"time"
)

// HandRolled is a hand-written hedge: a goroutine per attempt, a timer, a
// select, and one cancel for the losers. It starts fn(ctx, 0), and
// fn(ctx, 1) if the first has not answered after delay, and returns the
// first answer. Safe for concurrent use.
func HandRolled[T any](ctx context.Context, delay time.Duration, fn func(context.Context, int) (T, error)) (T, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	results := make(chan result, 2)
	run := func(k int) {
		v, err := fn(ctx, k)
		results <- result{v, err}
	}
	go run(0)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case r := <-results:
		return r.v, r.err
	case <-timer.C:
		go run(1)
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
	select {
	case r := <-results:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
