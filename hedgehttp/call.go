package hedgehttp

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tailcut/hedge"
)

// call is one hedged RoundTrip. It is also the context hedge.Do runs
// under: the caller's, with the call reachable from it, so that the
// Transport's Delay and every attempt find their route and the pushback
// the call has heard without an allocation of their own.
type call struct {
	context.Context // the request's

	t *Transport
	// req is what every attempt sends, each with its own context: the
	// caller's request, copied before the first attempt down to its URL,
	// Header and Trailer, the parts a caller changes in place when it
	// reuses a request. RoundTrip waits neither for the attempts that
	// lose, whose Base may read their request long after the caller has
	// reused its own, nor for a hedge claimed as the call is decided,
	// which copies req only then. Attempts only read it, so they share it.
	req     http.Request
	url     url.URL // req.URL points here
	route   *route
	hasBody bool

	bodyTaken atomic.Bool               // req.Body is spoken for: by attempt 0, or closed
	resume    atomic.Pointer[time.Time] // no attempt is sent before it: a Retry-After
	primary   attempt
}

type callKey struct{}

func (c *call) Value(key any) any {
	if key == (callKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// AfterFunc lets contexts derived from the call register on the
// request's context by whatever means suits it, as if derived from it
// directly: without it, a context of another package's making would cost
// a goroutine per link.
func (c *call) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(c.Context, f) }

func callOf(ctx context.Context) *call {
	if c, ok := ctx.(*call); ok {
		return c
	}
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// Route returns the route of the hedged request that ctx belongs to, the
// name Transport.Stats counts it under: the Routes pattern it matched, or
// its method and host ("GET example.com"). ctx is the one a Transport
// gives its Delay, or an attempt's request context. Outside a hedged
// request it returns "".
func Route(ctx context.Context) string {
	if c := callOf(ctx); c != nil {
		return c.route.name
	}
	return ""
}

// newCall makes the call that hedges req, with the copy of req that its
// attempts send. The copy is what not waiting for losers costs: a Header
// clone per call, and a request and a URL inside the call's allocation.
func newCall(t *Transport, req *http.Request) *call {
	c := &call{Context: req.Context(), t: t, req: *req, hasBody: req.Body != nil && req.Body != http.NoBody}
	c.url = *req.URL // not nil: hedges turns such requests away
	c.req.URL = &c.url
	c.req.Header = req.Header.Clone()
	c.req.Trailer = req.Trailer.Clone()
	if h := t.AttemptHeader; h != "" {
		// The primary's header; each hedge numbers a copy of it.
		if c.req.Header == nil {
			c.req.Header = make(http.Header, 1)
		}
		c.req.Header.Set(h, "0")
	}
	return c
}

// closeBody closes req.Body unless attempt 0 took it: RoundTrip owns it,
// and an attempt that never ran must not leave it open.
func (c *call) closeBody() {
	if c.hasBody && c.bodyTaken.CompareAndSwap(false, true) {
		c.req.Body.Close()
	}
}

// result is what one attempt brings back to hedge.Do: the response and
// its outcome, classified on the attempt's goroutine, where the request's
// context is at hand.
type result struct {
	resp *http.Response
	o    hedge.Outcome
}

func outcome(r result, _ error) hedge.Outcome { return r.o }

func discard(r result) { release(r.resp) }

// run is the function hedge.Do races. A plain function rather than a
// closure over the call: the call travels in the context.
func run(ctx context.Context) (result, error) { return callOf(ctx).do(ctx) }

// reqCtx is an attempt's request context: the request's for the deadline
// and cancellation, the hedge attempt's for values. The attempt's own
// context is unlinked from the request's once the call is decided, so a
// body tied to it would not hear the caller cancel after RoundTrip
// returned; tied to the request's, it does, and Close releases the link.
type reqCtx struct {
	context.Context                 // the request's
	vals            context.Context // hedge.Do's for this attempt: hedge.Attempt, Route
}

func (r *reqCtx) Value(key any) any { return r.vals.Value(key) }

// AfterFunc: see call.AfterFunc.
func (r *reqCtx) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(r.Context, f) }

// attempt holds what one attempt owns, in one allocation; the primary's
// lives inside the call.
type attempt struct {
	ctx  reqCtx
	body body
	req  http.Request // what it sends: the call's req with its own context, in the attempt's allocation
}

// do sends one attempt of the call. hctx is hedge.Do's context for it: cancelled when the attempt loses, which reaches the request only
// while it waits for the response's header. From then on, the body is
// Discard's (a loser) or the caller's (the winner) to close.
func (c *call) do(hctx context.Context) (result, error) {
	k := hedge.Attempt(hctx)
	a := &c.primary
	if k > 0 {
		a = &attempt{}
	}
	a.ctx = reqCtx{c.Context, hctx}
	// A plain cancel, not a cause: it doubles as the loser's callback
	// without a closure around it.
	ctx, cancel := context.WithCancel(&a.ctx)
	a.body.cancel = cancel
	stop := afterFunc(hctx, cancel)
	resp, err := c.send(ctx, a, k)
	stop()
	switch {
	case err != nil:
		cancel()
		if resp != nil && resp.Body != nil { // a RoundTripper out of contract
			resp.Body.Close()
		}
		resp = nil
	case resp.Body == nil || resp.Body == http.NoBody:
		cancel() // nothing to read: hold nothing
	default:
		a.body.rc = resp.Body
		resp.Body = &a.body
	}
	if err != nil && c.Err() != nil {
		// The caller gave up, and the transport said so in its own words
		// (HTTP/2 answers ctx.Err(), without the cause). Either way this
		// reaches hedge.Do, through the caller's context or as this
		// result, the call's answer is the caller's cause, and no other
		// attempt could change it.
		return result{o: hedge.Terminal}, context.Cause(c.Context)
	}
	o := c.classify(resp, err)
	if o == hedge.Retryable && resp != nil {
		if h := resp.Header.Get("Retry-After"); h != "" {
			o = c.pushBack(h)
		}
	}
	return result{resp, o}, err
}

func (c *call) send(ctx context.Context, a *attempt, k int) (*http.Response, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	a.req = *c.req.WithContext(ctx)
	r := &a.req
	if c.hasBody && (k > 0 || !c.bodyTaken.CompareAndSwap(false, true)) {
		b, err := c.req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = b
	}
	if h := c.t.AttemptHeader; h != "" && k > 0 {
		r.Header = c.req.Header.Clone()
		r.Header.Set(h, strconv.Itoa(k))
	}
	return c.t.base.RoundTrip(r)
}

// classify runs the Transport's classifier.
func (c *call) classify(resp *http.Response, err error) hedge.Outcome {
	if c.t.Classify == nil {
		return Classify(resp, err)
	}
	done := false
	defer func() {
		if !done && resp != nil {
			resp.Body.Close() // the classifier panicked: hedge.Do will not discard it
		}
	}()
	o := c.t.Classify(resp, err)
	done = true
	return o
}

// Classify is the default classifier: a network error and a 429, 502, 503
// or 504 response are retryable (the next attempt starts at once, a
// Retry-After permitting); every other response is accepted.
func Classify(resp *http.Response, err error) hedge.Outcome {
	if err != nil {
		return hedge.Retryable
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return hedge.Retryable
	}
	return hedge.Accept
}

// afterFunc is context.AfterFunc without its own context: hedge.Do's
// attempt contexts take a callback directly, where context.AfterFunc
// would first make them allocate a Done channel.
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(interface{ AfterFunc(func()) func() bool }); ok {
		return a.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}
