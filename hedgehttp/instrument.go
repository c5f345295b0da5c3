package hedgehttp

import (
	"context"
	"time"

	"github.com/tailcut/hedge"
)

// breakerObserver is a Transport's Observer that also hears when the
// breaker of a route's own Adaptive opens, as hedgeotel's Observer does.
type breakerObserver interface {
	BreakerOpened(route string)
}

// observer is the Observer of a call's hedge.Do: the route's Stats, or,
// when the Transport has an Observer, the call itself, which passes the
// report to both. The call exists anyway, so hearing a request twice
// costs no allocation.
func (c *call) observer() hedge.Observer {
	if c.t.Observer == nil {
		return &c.route.stats
	}
	return c
}

// Observe counts r in the route's Stats, then hands it to the Transport's
// Observer with ctx, from which Route reads the route.
func (c *call) Observe(ctx context.Context, r hedge.Report) {
	c.route.stats.Observe(ctx, r)
	c.t.Observer.Observe(ctx, r)
}

// Superseded reports whether ctx, the context of an attempt's request as
// Base gets it (or one derived from it), was cancelled because the call
// chose another attempt's response: the attempt lost the race, and the
// error it ends with is not a failure of the upstream. It is false while
// the attempt runs, when the caller cancelled or its deadline passed,
// and outside a hedged request.
//
// Base asks it when its RoundTrip fails, before returning: tracing
// marks a loser's span there (hedgeotel.AttemptTransport). It is needed
// because an attempt's request context ends with context.Canceled as
// its cause whatever ended it, not with hedge.ErrSuperseded. Once an
// attempt's RoundTrip has returned, the Transport cancels its context as
// it releases the response, the winner's included, so the answer says
// nothing then.
func Superseded(ctx context.Context) bool {
	c := callOf(ctx)
	if c == nil || ctx.Err() == nil || c.Context.Err() != nil {
		return false
	}
	// The call's deadline is the request's; the timers that end the
	// attempts at it may fire before the request's own.
	deadline, ok := c.Context.Deadline()
	return !ok || time.Now().Before(deadline)
}
