package hedgehttp

import (
	"context"
	"errors"
	"net/http"

	"github.com/tailcut/hedge"
)

// A refusal is a retryable response whose Retry-After the call cannot
// wait out: longer than maxPushback, past the deadline, or unreadable. It
// comes as often from a load shedder in front of one replica (a gateway,
// Envoy) as from the service, and it speaks for the attempt that got it,
// not for the others: it stops the attempts not yet sent, and those in
// flight run on. The call ends with the refusal only if none of them is
// accepted; a failure that comes after it gives way to it, since the
// refusal says when to come back.
//
// hedge.Do hears a held refusal as a Failed result carrying errRefused,
// which starts nothing and is returned only when nothing else is left;
// the call keeps the response itself until RoundTrip returns or discards
// it. The last attempt in flight to end without an accepted answer ends
// the call at once with errRefused as Terminal, rather than leave it to
// wait for a hedge that will not be sent.

// errRefused stands, between the attempts and RoundTrip, for the refusal
// the call holds. It never reaches the caller.
var errRefused = errors.New("hedgehttp: refused")

// errHeldBack is what send returns for an attempt that waited out a
// Retry-After and found that the call had been refused meanwhile.
var errHeldBack = errors.New("hedgehttp: held back")

// fail takes in attempt a's failure, a Retryable or Failed outcome, or,
// if refusal, its refusal, and returns what hedge.Do gets for it.
func (c *call) fail(a *attempt, resp *http.Response, o hedge.Outcome, err error, refusal bool) (*attempt, error) {
	c.mu.Lock()
	c.unlive(a)
	// Whatever becomes of it, this answer ends the call only here: a tie
	// that drops it from now on costs the call nothing, and the starts
	// heard while it was classified are reported now (see tieHeard).
	a.answering = false
	var cancels [hedge.MaxAttemptsLimit]context.CancelFunc
	if n := c.tieHeard(&cancels); n > 0 {
		c.mu.Unlock()
		cancelAll(cancels[:n])
		c.mu.Lock()
	}
	switch {
	case a.tied:
		// A start reported just now tied a: out of the race, its answer
		// ends nothing, and the call holds no refusal of its.
		c.mu.Unlock()
		return a.answer(resp, hedge.Failed), err
	case c.over:
		// Another answer has ended the call: this one reaches hedge.Do
		// as a loser's, and starts nothing.
		c.mu.Unlock()
		if refusal {
			o = hedge.Failed
		}
		return a.answer(resp, o), err
	case c.refused == nil && !refusal:
		c.mu.Unlock()
		return a.answer(resp, o), err
	case c.refused == nil && c.live == 0:
		// Nothing else in flight: the refusal is the answer, now.
		c.over = true
		c.mu.Unlock()
		c.cancelLosers(a)
		return a.answer(resp, hedge.Terminal), nil
	case c.refused == nil:
		c.refused = resp
		c.mu.Unlock()
		return a.answer(nil, hedge.Failed), errRefused
	}
	c.mu.Unlock()
	if resp != nil {
		release(resp) // the refusal held first answers for this one
	}
	return c.stopped(a)
}

// stopped is what attempt a, which the call's refusal stopped or which
// gave way to it, gets hedge.Do: errRefused, Terminal if no attempt is
// left in flight. A tied attempt is never the last: hedge.Do drops its
// result, and the attempt that started answers for the call.
func (c *call) stopped(a *attempt) (*attempt, error) {
	var cancels [hedge.MaxAttemptsLimit]context.CancelFunc
	c.mu.Lock()
	c.unlive(a)
	a.answering = false
	n := c.tieHeard(&cancels)
	last := !c.over && c.live == 0 && !a.tied
	c.over = c.over || last
	c.mu.Unlock()
	cancelAll(cancels[:n])
	if last {
		c.cancelLosers(nil)
		return a.answer(nil, hedge.Terminal), errRefused
	}
	return a.answer(nil, hedge.Failed), errRefused
}

// unlive stops counting a in flight. Called with c.mu held.
func (c *call) unlive(a *attempt) {
	if a.live {
		a.live = false
		c.live--
	}
}

// takeRefused hands over the refusal the call holds, if any.
func (c *call) takeRefused() *http.Response {
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := c.refused
	c.refused = nil
	return resp
}
