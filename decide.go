package hedge

import (
	"context"
)

// How a call ends: the decision, the losers cancelled, the values Do does
// not return handed to Discard.

// settle ends the call with attempt a's result. Called with c.mu held.
func (c *call[T]) settle(a *attemptCtx, v T, err error, o Outcome) {
	c.val, c.err, c.winner, c.outcome = v, err, int8(c.local(a)), o
	c.finish(a, context.Canceled, ErrSuperseded)
}

// end ends the call with a context error: err for the caller, cancel
// and cause for the attempts' contexts (a nil cause: ctx holds it).
// Called with c.mu held.
func (c *call[T]) end(err, cancel, cause error) drop[T] {
	c.err, c.winner, c.outcome = err, -1, Canceled
	d := c.dropKept()
	c.finish(nil, cancel, cause)
	return d
}

// interruptWait ends Do's wait for early discards when the caller's
// context or the deadline ends first: Do then returns the context's
// error at once, and the result it had chosen goes to Discard instead.
// Called with c.mu held, on a decided call.
func (c *call[T]) interruptWait() drop[T] {
	if c.discarding == 0 || c.abandoned || c.outcome == Canceled {
		return drop[T]{}
	}
	err, cancel, cause := context.Cause(c.parent()), c.parent().Err(), error(nil)
	if cancel == nil {
		now := c.since()
		if now < c.timeout {
			c.arm(now)
			return drop[T]{}
		}
		err, cancel, cause = context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded
	}
	c.abandoned = true
	c.wakeDo()
	if c.panicked != nil || c.goexit {
		return drop[T]{} // a panic still reaches the caller, without waiting
	}
	if won := c.won(); won != nil {
		won.cancel(cancel, cause)
	}
	var zero T
	d := drop[T]{v: c.val, ok: c.err == nil && c.discard != nil}
	c.val, c.err, c.winner, c.outcome = zero, err, -1, Canceled
	return d
}

// dropKept cancels the kept retryable attempt and hands its value over
// for Discard. Called with c.mu held.
func (c *call[T]) dropKept() drop[T] {
	if c.kept == nil || c.kept.a == nil {
		return drop[T]{}
	}
	d := c.early(c.kept.v, c.kept.err == nil)
	c.kept.a.cancel(context.Canceled, ErrSuperseded)
	*c.kept = kept[T]{}
	return d
}

// early makes an early drop of v, counted until it is through Discard.
// Called with c.mu held.
func (c *call[T]) early(v T, ok bool) drop[T] {
	d := drop[T]{v, ok && c.discard != nil, true}
	if d.ok {
		c.discarding++
	}
	return d
}

// finish marks the call decided, cancels every attempt but the winner,
// hands the winner its own deadline and has unlock wake Do. The timer
// stays armed while Do waits for early discards, so that the Timeout
// still ends the wait; Do stops it. Called with c.mu held.
func (c *call[T]) finish(winner *attemptCtx, cancel, cause error) {
	c.decided = true
	c.nextAt = never
	c.retryDue = 0
	if c.track && c.started > 0 && !c.primaryDone && !c.primary.tied {
		// The primary lost or was cut off: it would have run at least
		// this long.
		c.primaryRan, c.learn = c.clockNow(), c.learns
	}
	if c.track {
		c.elapsed = c.clockNow()
	}
	if c.started > 0 {
		for a := &c.primary; a != nil; a = a.next {
			if a != winner {
				a.cancel(cancel, cause)
			}
		}
	}
	if winner != nil {
		// Without a Timeout of its own, the winner ends with the
		// caller's context, which has a deadline: nothing more is needed.
		winner.detach(c.timeout == never && c.clock == nil && !c.primary.deadline.IsZero())
	}
	c.letGo = true // unlock lets Do go
}

// won returns the context of the attempt whose result the call returns,
// detached (see finish); nil when it returns none. A call keeps the
// winner's number, not a pointer to it: its attempts link from the
// primary already. Called with c.mu held, on a decided call.
func (c *call[T]) won() *attemptCtx {
	if c.winner < 0 {
		return nil
	}
	for a := &c.primary; a != nil; a = a.next {
		if c.local(a) == int(c.winner) {
			return a
		}
	}
	return nil
}

// dropFrom hands d to Discard on this goroutine, unless it is the
// caller's (here, see Policy.Inline): a slow Discard there would hold Do,
// which does not wait for a late loser's Discard, nor, past the
// deadline, for an early drop's. Small enough to inline: the fast path,
// which has nothing to drop, pays no call for it.
func (c *call[T]) dropFrom(here bool, d drop[T]) {
	if d.ok && c.discard != nil {
		c.handOver(here, d)
	}
}

// handOver is dropFrom with a value to drop.
func (c *call[T]) handOver(here bool, d drop[T]) {
	if here {
		go c.drop(d)
		return
	}
	c.drop(d)
}

func (c *call[T]) drop(d drop[T]) {
	if !d.ok || c.discard == nil {
		return
	}
	if d.early {
		defer func() {
			c.mu.Lock()
			c.discarding--
			c.wakeDo()
			c.mu.Unlock()
		}()
	}
	c.discard(d.v)
}
