package hedge

import (
	"context"
	"runtime/debug"
	"time"
)

// What one attempt does: it runs fn and the classifier, tells the budget,
// and takes its result into the call.

// run runs attempt a on this goroutine and returns the attempt to run next
// on it, if its result made one start at once. here says this goroutine
// is the caller's (see Policy.Inline).
func (c *call[T]) run(a *attemptCtx, here bool) (next *attemptCtx) {
	if a.canceled() {
		// Claimed just before the call was decided: do not call fn.
		c.mu.Lock()
		if !a.tied { // a tie counted it out already
			c.inflight--
		}
		c.unlock()
		c.release(c.local(a))
		return nil
	}
	var r result[T]
	// Deferred so that the result is recorded also when fn calls
	// runtime.Goexit.
	defer func() {
		if !r.recorded {
			next = c.record(a, &r, false, here)
		}
	}()
	c.invoke(a, &r)
	r.recorded = true
	next = c.record(a, &r, true, here)
	if r.later {
		c.report(a, &r, here)
	}
	return next
}

// report tells the budget how attempt a ended, as record left it to in
// r, then hands the value r holds for Discard over, also when Done calls
// runtime.Goexit. The budget's Done then runs from run's frame, with
// record's off the stack: an attempt's goroutine starts with a small
// stack, and a budget that keeps state per key (an Adaptive, with its
// breaker) is deep enough that under record's frames the stack grew on
// every call, copying each frame beneath.
func (c *call[T]) report(a *attemptCtx, r *result[T], here bool) {
	defer c.dropFrom(here, r.d)
	c.tell(c.local(a), r.told, r.hold)
}

func (c *call[T]) invoke(a *attemptCtx, r *result[T]) {
	defer func() {
		if !r.returned {
			if v := recover(); v != nil {
				r.panic = &PanicError{Attempt: int(a.n), Value: v, Stack: debug.Stack()}
			}
		}
	}()
	r.v, r.err = c.fn(a)
	r.produced = true
	if c.classify != nil {
		r.o = c.classify(r.v, r.err)
	} else {
		r.o = classifyErr(r.err)
	}
	if r.o < Accept || r.o == Canceled || r.o > Failed {
		r.o = Terminal
	}
	r.returned = true
}

// record takes attempt a's result into the call, then tells the budget
// how it ended, and returns the attempt it made start at once, if any.
//
// The call decides first, so that the budget hears the outcome the call
// gave the attempt: Canceled for every loser, also one that answered in
// the same instant as the winner, and TimedOut for one that the call's
// deadline cut off. It hears before the attempt that a
// retryable result starts is claimed, so that its answer to that one
// already counts this one; and when a decided the call, Do waits for the
// budget to have heard it, so that its state is settled when Do returns.
//
// The attempt's goroutine decides the call from the bottom of these
// frames, and its stack starts small: the path without a budget keeps
// the budget's frame off it, and when no attempt starts at once and the
// caller can (later), it leaves the report in r for report, once these
// frames are gone.
func (c *call[T]) record(a *attemptCtx, r *result[T], later, here bool) *attemptCtx {
	var d, own drop[T]
	k := 0
	c.mu.Lock()
	// A tied attempt is out of the race, as if it had never run, unless
	// it panicked: that reaches the caller as any attempt's does. The tie
	// counted it out of those in flight already.
	tied := a.tied && r.returned
	if !a.tied {
		c.inflight--
	}
	if c.track && a == &c.primary && !c.decided && !a.tied {
		c.primaryDone = true
		c.seen, c.hasSeen = c.since(), true
		c.primaryRan = c.seen
		// Only an accepted answer says how long a good one takes.
		c.learn = c.learns && r.returned && r.o == Accept
	}
	lost, cut := c.decided, false
	switch {
	case lost:
		own = drop[T]{v: r.v, ok: r.produced && r.err == nil} // a late loser
	case tied:
		own = c.early(r.v, r.produced && r.err == nil)
	case r.returned && r.o != Accept:
		// An attempt that fails because the caller gave up or the deadline
		// passed (its fn returned ctx.Err()) may get here before the
		// caller's context or the timer does: the call still ends with
		// their error and cause, not with the attempt's.
		if d, cut = c.cutOff(); cut {
			own = drop[T]{v: r.v, ok: r.produced && r.err == nil}
			break
		}
		fallthrough
	default:
		k, d, own = c.answer(a, r)
	}
	o, hold := Canceled, false
	switch {
	case c.budget == nil || tied:
	case !lost && !cut:
		o = r.o
		if !r.returned {
			o = Terminal
		}
		if hold = c.decided; hold {
			c.discarding++ // Do waits for tell, as for an early drop
		}
	case a.canceledWith() == context.DeadlineExceeded:
		o = TimedOut // the Timeout's or ctx's deadline, not a lost race
	}
	c.hasSeen = false
	c.unlock()
	// Deferred: a Discard or a Done that calls runtime.Goexit must not keep
	// own from being counted through, or Do would wait for it for ever.
	defer c.dropFrom(here, own)
	if tied {
		c.release(c.local(a)) // it waited in a queue and did no work
		return nil
	}
	if k > 0 && d.ok {
		// Discard may be slow (draining a body): the next attempt must
		// not wait for it.
		go c.drop(d)
		d = drop[T]{}
	}
	switch {
	case c.budget != nil && k == 0 && later:
		r.told, r.hold, r.d, r.later = o, hold, d, true
	case c.budget != nil:
		c.tellThenDrop(c.local(a), o, hold, d, here)
	default:
		c.dropFrom(here, d)
	}
	if k > 0 {
		return c.claim(k, -1)
	}
	return nil
}

// tellThenDrop tells the budget how attempt k ended, then hands d to
// Discard, also when Done calls runtime.Goexit. A function of its own, so
// that the path without a budget keeps its frame small.
func (c *call[T]) tellThenDrop(k int, o Outcome, hold bool, d drop[T], here bool) {
	defer c.dropFrom(here, d)
	c.tell(k, o, hold)
}

// tell reports to the budget that attempt k ended with o. hold says the
// attempt decided the call and Do waits for this report: then a panic or
// runtime.Goexit in Done is the call's answer, as it would have been had
// Done failed before the decision, and the value goes to Discard. A Done
// that fails for any other attempt ends the call if it is undecided.
func (c *call[T]) tell(k int, o Outcome, hold bool) {
	if !hold {
		c.guard(k, func() { c.budget.Done(c.parent(), c.bn(k), o) })
		return
	}
	ok := false
	defer func() {
		v := recover() // nil for a runtime.Goexit, and when Done returned
		var d drop[T]
		c.mu.Lock()
		c.discarding--
		if !ok && !c.abandoned && c.panicked == nil && !c.goexit {
			if v != nil {
				c.panicked = &PanicError{Attempt: c.base() + k, Value: v, Stack: debug.Stack()}
			}
			c.goexit = v == nil
			var zero T
			d = c.early(c.val, c.err == nil)
			if won := c.won(); won != nil {
				won.cancel(context.Canceled, context.Canceled)
			}
			c.val, c.winner, c.outcome = zero, -1, Terminal
		}
		c.wakeDo()
		c.mu.Unlock()
		c.dropFrom(true, d) // aside, as guard does
	}()
	c.budget.Done(c.parent(), c.bn(k), o)
	ok = true
}

// clockNow returns the clock reading of this turn under c.mu, or reads
// the clock. Called with c.mu held.
func (c *call[T]) clockNow() time.Duration {
	if c.hasSeen {
		return c.seen
	}
	return c.since()
}

// cutOff ends the call if the caller's context is done or the Timeout
// has passed. Called with c.mu held.
func (c *call[T]) cutOff() (drop[T], bool) {
	if err := c.parent().Err(); err != nil {
		return c.end(context.Cause(c.parent()), err, nil), true
	}
	if c.timeout != never && c.since() >= c.timeout {
		return c.end(context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded), true
	}
	return drop[T]{}, false
}

// answer takes attempt a's result into an undecided call, and returns the
// number of the attempt it makes start at once (0: none) and the values
// to discard. The rare outcomes have functions of their own, so that an
// accepted answer's frames stay small. Called with c.mu held.
func (c *call[T]) answer(a *attemptCtx, r *result[T]) (k int, d, own drop[T]) {
	switch {
	case !r.returned:
		d, own = c.broke(r)
	case r.o == Retryable || r.o == Failed:
		k, d = c.keep(a, r)
	default:
		d = c.dropKept()
		c.settle(a, r.v, r.err, r.o)
	}
	return k, d, own
}

// broke ends the call with the panic or runtime.Goexit of fn or the
// classifier. Called with c.mu held.
func (c *call[T]) broke(r *result[T]) (d, own drop[T]) {
	c.panicked, c.goexit = r.panic, r.panic == nil
	c.winner, c.outcome = -1, Terminal
	d = c.dropKept()
	own = c.early(r.v, r.produced && r.err == nil) // the classifier failed on it
	c.finish(nil, context.Canceled, context.Canceled)
	return d, own
}

// keep keeps a retryable or failed result in case nothing better comes,
// and returns the attempt a retryable one makes start at once (0: none)
// and the result it replaces. Called with c.mu held.
func (c *call[T]) keep(a *attemptCtx, r *result[T]) (k int, d drop[T]) {
	if a == c.last {
		c.nextAt = never // a's own hedge is moot: it has answered
	}
	d = c.dropKept()
	if c.kept == nil {
		c.kept = new(kept[T])
	}
	*c.kept = kept[T]{a, r.v, r.err, r.o}
	if r.o == Retryable && !c.looped {
		c.retryDue++ // the next attempt starts now
		k = c.due(c.clockNow())
	}
	if k == 0 {
		c.runOut()
	}
	return k, d
}

// runOut ends the call with the kept result (Retryable or Failed) when
// nothing is in flight and nothing more will start. Called with c.mu held.
func (c *call[T]) runOut() {
	if c.decided || c.kept == nil || c.kept.a == nil || c.inflight > 0 || c.claiming || c.retryDue > 0 {
		return
	}
	if c.started < c.max && c.nextAt != never {
		return // a timed hedge is still to come
	}
	k := *c.kept
	*c.kept = kept[T]{}
	c.settle(k.a, k.v, k.err, k.o)
}
