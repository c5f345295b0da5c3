package hedge

import "context"

// Started reports that the attempt of a hedged call that ctx belongs to
// (its context, or one derived from it) has begun executing: the server
// took it out of its queue. fn calls it, or a transport on fn's behalf,
// from any goroutine, when the server signals the start; hedgehttp and
// hedgegrpc do so for servers behind an admit.Gate.
//
// Do then cancels, with cause ErrSuperseded, every other attempt of the
// call in flight that has not reported a start of its own: they still
// wait in a queue, so cancelling them wastes nothing ("tied requests").
// An attempt that reported its start is never cancelled by another's,
// and hedges still start at their delays, so that an execution that turns
// slow is still hedged, unless an Adaptive whose primaries queue holds
// them back (see Adaptive); a later start cancels only the attempts that
// have not started. An attempt cancelled by a tie did no work: its Budget
// grant is given back as for an attempt that never ran (see Budget), a
// value it returns goes to Discard, and Report.Tied counts it. When the
// primary is cancelled so, a Delay that learns (see Delay) hears how long
// it had waited, as a lower bound.
//
// Started does nothing outside Do, for an attempt that has reported its
// start already, has answered or was cancelled, and once the call is
// decided. It never waits for the call, and is safe for concurrent use. A
// call whose attempts never report a start runs as if Started did not
// exist.
func Started(ctx context.Context) {
	if ctx == nil {
		return
	}
	a, _ := ctx.Value(tieKey{}).(*attemptCtx)
	if a == nil {
		return
	}
	a.mu.Lock()
	owner := a.owner
	a.mu.Unlock()
	if owner != nil {
		owner.tie(a)
	}
}

// tieKey is the context key under which an attempt's context answers with
// itself, for Started.
type tieKey struct{}

// tier is the call an attempt belongs to, as Started reaches it without
// knowing the call's result type.
type tier interface {
	tie(a *attemptCtx)
}

// tie marks attempt a started and cancels every attempt of the call still
// in flight that has not started, unless a has answered or been cancelled
// or the call is decided. A tied attempt's goroutine gives its grant back
// when it ends (see run and record).
func (c *call[T]) tie(a *attemptCtx) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.decided || a.began || a.tied || c.isKept(a) || a.canceled() {
		return
	}
	a.began = true
	if a == &c.primary && c.tieKey() != nil {
		c.began = max(c.since(), 1) // 0 means none; only an Adaptive learns it
	}
	for b := &c.primary; b != nil; b = b.next {
		if b.began || c.isKept(b) || !b.cancel(context.Canceled, ErrSuperseded) {
			continue
		}
		// Out of the race: a result the call would wait for no longer
		// comes from it (see runOut).
		b.tied = true
		c.inflight--
		if b == &c.primary && c.track && !c.primaryDone {
			// It waited at least this long; it will not answer.
			c.primaryRan, c.learn = c.since(), c.learns
		}
	}
}

// isKept reports whether a's retryable result is the one kept. Called
// with c.mu held.
func (c *call[T]) isKept(a *attemptCtx) bool { return c.kept != nil && c.kept.a == a }
