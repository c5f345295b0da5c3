package hedge

import (
	"context"
	"runtime/debug"
	"time"
)

// The policy's hooks (Delay, Budget) that the call's goroutines run,
// outside the call's lock, and what a failing hook does to the call.

// starting tells the delay that attempt k starts, if it counts attempts, and
// returns its delay for attempt k+1 (-1 when none may follow).
func (c *call[T]) starting(k int) time.Duration {
	if c.counts {
		c.delay.(counter).began(c.parent(), k)
	}
	if k+1 < int(c.max) {
		return c.delay.Next(c.parent(), k)
	}
	return -1
}

// release undoes the claim of attempt k, whose fn never ran because the
// call ended first. A delay that counts attempts gets a hedge back. The
// budget gets its grant back: Release if it takes grants back, Done(k,
// Canceled) otherwise (and always for the primary, which Allow(0) does
// not charge for).
func (c *call[T]) release(k int) {
	if c.counts && k > 0 {
		// If began itself failed (a Keyed's Key panicked), the call has
		// ended with that panic, and this one fails the same way, to no
		// effect.
		c.guard(k, func() { c.delay.(counter).gaveBack(c.parent(), k) })
	}
	if c.budget == nil {
		return
	}
	n := c.bn(k)
	if r, ok := c.budget.(releaser); ok && n > 0 {
		c.guard(k, func() { r.Release(c.parent(), n) })
		return
	}
	c.guard(k, func() { c.budget.Done(c.parent(), n, Canceled) })
}

// base returns the number of the call's primary: 0, or in a retry loop of
// Tries, the try's (see Tries).
func (c *call[T]) base() int { return int(c.primary.n) }

// local returns the number of attempt a within the call.
func (c *call[T]) local(a *attemptCtx) int { return int(a.n - c.primary.n) }

// bn returns the number by which the budget knows attempt k of the call:
// k, or, when the call is a try that the loop's budget granted, the
// attempt's number across the loop.
func (c *call[T]) bn(k int) int {
	if c.granted {
		return c.base() + k
	}
	return k
}

// guard runs one of the policy's hooks for attempt k (Delay.Next, or the
// Budget's Allow or Done) outside c.mu. It reports whether hook returned.
// If hook panics, the call ends with that panic, which Do re-raises in the
// caller; if it calls runtime.Goexit, the call ends and Do calls
// runtime.Goexit in the caller, and guard does not return: the goroutine
// exits, so its caller defers what must still happen. Either way the
// other attempts are cancelled. A hook that fails after the decision
// changes nothing.
func (c *call[T]) guard(k int, hook func()) (ok bool) {
	defer func() {
		if ok {
			return
		}
		v := recover()
		var pe *PanicError
		if v != nil {
			pe = &PanicError{Attempt: c.base() + k, Value: v, Stack: debug.Stack()}
		}
		var d drop[T]
		c.mu.Lock()
		if !c.decided {
			c.panicked, c.goexit = pe, pe == nil
			c.winner, c.outcome = -1, Terminal
			d = c.dropKept()
			c.finish(nil, context.Canceled, context.Canceled)
		}
		c.unlock()
		// This may be the caller's goroutine (Policy.Inline), which must
		// not sit in a slow Discard that Do stops waiting for when ctx
		// ends: rare enough to cost a goroutine anywhere.
		c.dropFrom(true, d)
	}()
	hook()
	return true
}
