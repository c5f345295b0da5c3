package hedgehttp

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tailcut/hedge"
)

// maxPushback is the longest Retry-After a call waits out. Hedging trades
// load for latency within one request; a server that asks for more than
// this gets its answer passed to the caller, whose retry loop can wait.
const maxPushback = time.Second

// pushBack takes in a Retry-After heard on a retryable response, and
// reports whether the call can wait it out. A wait it can afford holds
// back every attempt not yet sent; one it cannot, or cannot read, makes
// the response a refusal (see refusal.go).
func (c *call) pushBack(h string) bool {
	now := time.Now()
	deadline, _ := c.Deadline()
	wait, ok := pushback(h, now, deadline)
	if !ok {
		return false
	}
	at := now.Add(wait)
	for {
		old := c.resume.Load()
		if old != nil && !old.Before(at) {
			return true
		}
		if c.resume.CompareAndSwap(old, &at) {
			return true
		}
	}
}

// pushback reads a Retry-After header received at now: how long to wait,
// and whether the call can: the wait must be readable, at most
// maxPushback, and end before the deadline (zero: none). A date in the
// past waits for nothing.
func pushback(h string, now, deadline time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	var wait time.Duration
	if secs, err := strconv.ParseUint(h, 10, 32); err == nil {
		wait = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(h); err == nil {
		wait = max(at.Sub(now), 0)
	} else {
		return 0, false
	}
	if wait > maxPushback || (!deadline.IsZero() && !now.Add(wait).Before(deadline)) {
		return wait, false
	}
	return wait, true
}

// holdBack holds attempt a back until the call's pushback has passed.
// Meanwhile a does not count in flight: a refusal heard then ends the
// call without waiting for it, or, if others are in flight, stops it. An
// attempt that the call or a tie cancelled meanwhile is not sent, and
// counts in flight no more: a tied attempt's answer is never taken in as
// one that was (see do), and would leave the call a live attempt for
// good, so that no refusal could end it at once (see stopped).
func (c *call) holdBack(a *attempt) error {
	c.mu.Lock()
	c.unlive(a)
	c.mu.Unlock()
	if err := c.wait(a.req.Context()); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !a.waiting:
		return context.Cause(a.req.Context())
	case c.refused != nil:
		return errHeldBack
	}
	a.live = true
	c.live++
	return nil
}

// wait holds an attempt back until the call's pushback has passed.
func (c *call) wait(ctx context.Context) error {
	at := c.resume.Load()
	if at == nil {
		return nil
	}
	d := time.Until(*at)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// delay is the Delay every call runs under: the Transport's, or the
// route's own, with the timed hedges moved past a pushback the call has
// heard, so that they keep their spacing after it rather than all
// leaving at its end.
type delay struct{ shared hedge.Delay } // nil: the route's own

// learner is a delay whose inner delays learn. A separate type so that a
// delay that does not learn keeps hedge.Do from timing the primary.
type learner struct{ delay }

// learning is a hedge.Delay that learns, as hedge.Delay's doc says.
type learning interface {
	Learn(ctx context.Context, primary time.Duration, complete bool)
}

func wrapDelay(shared hedge.Delay) hedge.Delay {
	if _, ok := shared.(learning); ok || shared == nil {
		return learner{delay{shared}}
	}
	return delay{shared}
}

func (d delay) inner(c *call) hedge.Delay {
	if d.shared != nil {
		return d.shared
	}
	return c.route.delay
}

func (d delay) Next(ctx context.Context, k int) time.Duration {
	c := callOf(ctx)
	next := d.inner(c).Next(ctx, k)
	if at := c.resume.Load(); at != nil && next >= 0 {
		next += max(time.Until(*at), 0)
	}
	return next
}

func (d learner) Learn(ctx context.Context, primary time.Duration, complete bool) {
	if l, ok := d.inner(callOf(ctx)).(learning); ok {
		l.Learn(ctx, primary, complete)
	}
}
