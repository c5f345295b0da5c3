package hedgehttp

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
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
	// req is the primary's request, and what every hedge copies with a
	// context of its own: the caller's request, copied before the first
	// attempt down to its URL, Header and Trailer, the parts a caller
	// changes in place when it reuses a request. RoundTrip waits neither
	// for the attempts that lose, whose Base may read their request long
	// after the caller has reused its own, nor for a hedge claimed as the
	// call is decided, which copies req only then. Attempts only read it,
	// so they share it.
	req   http.Request
	url   url.URL // req.URL points here
	route *route
	tr    *trailers // nil: req declares no trailers, or has no body to end
	// These share one word, which keeps the call in the allocator's size
	// class of 768 bytes (TestCallFitsItsSizeClass).
	hasBody  bool
	askedTie bool // the caller's request asked for the start signal itself (see tie.go)
	over     bool // guarded by mu: a response has ended the call, or RoundTrip is returning
	// Guarded by mu, and read only while the call is not over: the
	// attempts sent, or about to be, whose answer has not been taken in
	// (at most hedge.MaxAttemptsLimit).
	live      int8
	bodyTaken atomic.Bool // req.Body is spoken for: by attempt 0, or closed

	resume atomic.Pointer[time.Time] // no attempt is sent before it: a Retry-After

	// The attempts, the primary first and the hedges after it, linked by
	// attempt.next. The call cancels the losers still waiting for their
	// response's header itself (cancelLosers), rather than through a
	// registration on each hedge.Do attempt's context: that would cost
	// three allocations per attempt and a goroutine per loser.
	mu      sync.Mutex
	primary attempt
	// Guarded by mu, and read only while the call is not over: the
	// refusal the call holds (see refusal.go).
	refused *http.Response
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
// The copy is the primary's request, with the primary's context, made
// here so that the primary needs no allocation of its own: it waits for
// its header until it answers or end cancels it, whether it ran or not.
func newCall(t *Transport, req *http.Request) *call {
	c := &call{Context: req.Context(), t: t, hasBody: req.Body != nil && req.Body != http.NoBody}
	if t.ties {
		c.askedTie = len(req.Header[TieHeader]) > 0
	}
	a := &c.primary
	a.Context = c
	c.tie(a)
	ctx, cancel := context.WithCancel(a)
	a.body.cancel = cancel
	a.req = &c.req
	a.waiting = true
	c.req = *req.WithContext(ctx)
	c.url = *req.URL // not nil: hedges turns such requests away
	c.req.URL = &c.url
	c.req.Header = req.Header.Clone()
	if t.ties {
		c.req.Header = askTie(c.req.Header)
	}
	c.req.Trailer = req.Trailer.Clone()
	if req.Trailer != nil && c.hasBody {
		c.tr = &trailers{from: req.Trailer, keys: c.req.Trailer, getBody: req.GetBody}
		c.tr.give(&c.req)
	}
	if h := t.header; h != "" && t.numberFirst {
		// The primary's header; each hedge numbers a copy of it.
		if c.req.Header == nil {
			c.req.Header = make(http.Header, 1)
		}
		c.req.Header.Set(h, "0")
	}
	return c
}

// end ends the call as RoundTrip returns winner's response (nil: none):
// it cancels every other attempt still waiting for its header, the
// primary too if it never ran, and closes req.Body unless an attempt took
// it, so that an attempt that never ran does not leave it open.
func (c *call) end(winner *attempt) {
	c.cancelLosers(winner)
	c.closeBody()
	if resp := c.takeRefused(); resp != nil {
		release(resp) // RoundTrip returns another answer
	}
}

// closeBody closes req.Body unless attempt 0 took it: RoundTrip owns it,
// and an attempt that never ran must not leave it open.
func (c *call) closeBody() {
	if c.hasBody && c.bodyTaken.CompareAndSwap(false, true) {
		c.req.Body.Close()
	}
}

// An attempt is also what it brings back to hedge.Do: its response and
// its outcome, classified on the attempt's goroutine, where the request's
// context is at hand, are fields of its own (see answer). hedge.Do's
// state holds a copy of the value it returns: one word fits that state
// in the allocator's size class of 448 bytes, where the three words of a
// response, an outcome and an attempt took it to 480
// (TestResultIsOneWord).

// outcome is hedge.Do's classifier: the attempt's own, taken on its
// goroutine.
func outcome(a *attempt, _ error) hedge.Outcome {
	if a == nil {
		return hedge.Terminal // run always returns its attempt
	}
	return hedge.Outcome(a.outcome)
}

// discard hands back the response of an attempt whose answer RoundTrip
// does not return.
func discard(a *attempt) { release(a.take()) }

// take returns the response a brought back, and forgets it: the attempt
// lives as long as its call, which the winner's response keeps while the
// caller holds it, and a loser whose Base still runs keeps after that.
func (a *attempt) take() *http.Response {
	resp := a.resp
	a.resp = nil
	return resp
}

// answer records resp and o as what a brings back to hedge.Do, and
// returns a. An outcome outside int8's range is one hedge.Do treats as
// Terminal, and stays one.
func (a *attempt) answer(resp *http.Response, o hedge.Outcome) *attempt {
	if o < math.MinInt8 || o > math.MaxInt8 {
		o = hedge.Terminal
	}
	a.resp, a.outcome = resp, int8(o)
	return a
}

// run is the function hedge.Do races. A plain function rather than a
// closure over the call: the call travels in the context. It grows the
// attempt's stack first if Base needs it to (see stack.go), while the
// frames beneath are few.
//
// With Inline (and so no Delay and no Budget, whose hooks could fail on
// another goroutine), the primary runs on the caller's goroutine
// (hedge.Policy.Inline), whose stack has grown
// already and is the caller's business. hedge.Do then returns only once
// the attempt on that goroutine has, and a Base or a Classify that fails
// in another attempt ends the call without the cancellation that reaches
// the requests when an answer ends it: that attempt cancels them then
// (see beside).
func run(ctx context.Context) (*attempt, error) {
	c := callOf(ctx)
	if c.t.inline {
		return c.beside(ctx)
	}
	level := c.t.stackLevel.Load()
	if level > 0 {
		growStack(level)
	}
	return c.do(ctx, level)
}

// beside runs an attempt of a call whose primary runs on the caller's
// goroutine (see run): as a rule the primary there, and the hedges on
// goroutines of their own, but the caller's goroutine runs whichever it
// claims first, a hedge if a timer took the primary. If Base or Classify
// panics or calls runtime.Goexit in one, hedge.Do, which re-raises that
// on the caller's goroutine, waits for the attempt there first: the
// requests still waiting are cancelled here, as an answer would cancel
// them, so that it does not wait for its server. The primary casts no
// vote on the stack it runs on (level -1), which is the caller's.
func (c *call) beside(ctx context.Context) (a *attempt, err error) {
	ok := false
	defer func() {
		if !ok {
			c.cancelLosers(nil)
		}
	}()
	level := int32(-1)
	if hedge.Attempt(ctx) > 0 {
		level = c.t.stackLevel.Load()
		if level > 0 {
			growStack(level)
		}
	}
	a, err = c.do(ctx, level)
	ok = true
	return a, err
}

// attempt holds what one attempt owns, in one allocation; the primary's
// lives inside the call.
type attempt struct {
	// The attempt is the parent of its request's context. Its deadline
	// and cancellation are the request's, through the call: the
	// attempt's hedge.Do context is unlinked from the request's once the
	// call is decided, so a body tied to it would not hear the caller
	// cancel after RoundTrip returned; tied to the request's, it does,
	// and Close releases the link. Its values are hedge.Do's (hctx) for a
	// hedge, for hedge.Attempt and Route, and the call's for the
	// primary, whose context is made before hedge.Do runs (hedge.Attempt
	// is 0 without one).
	context.Context // the call

	body body
	req  *http.Request // what it sends: the call's req for the primary, a hedge's own copy
	// What it brings back to hedge.Do, with outcome (see answer), until
	// Discard or RoundTrip takes it. Written on the attempt's goroutine
	// before run returns, and read after hedge.Do took the result in,
	// which orders the two.
	resp *http.Response
	// Guarded by the call's mu: the call's next attempt, whether the
	// attempt may yet be sent or waits for its response's header, and
	// whether it counts in the call's live. Ties (see tie.go): whether a
	// tie took the attempt out of the race, whether its answer has come
	// and may yet end the call, which no tie may then drop, and whether
	// its start signal has come and waits to be reported (see tieHeard).
	next      *attempt
	waiting   bool
	live      bool
	tied      bool
	answering bool
	heard     bool
	outcome   int8 // resp's hedge.Outcome, in a byte the flags leave
	// Set before the attempt's request context is made: whether the
	// attempt is a hedge, whose values are hctx's, and whether its
	// request context hands Base trace (see tie.go); when not, Base
	// finds the caller's trace, if any, among the values.
	isHedge bool
	traced  bool
	// Ties (see tie.go): hedge.Do's context for the attempt, set before
	// it is sent, which the attempt reports its start with, and the trace
	// by which Base tells the attempt of its informational responses,
	// whose hook's closure is hook (see hook.go).
	hctx  context.Context
	trace httptrace.ClientTrace
	hook  hook1xx
}

func (a *attempt) Value(key any) any {
	switch {
	case a.traced && key == traceKey:
		return &a.trace
	case a.isHedge:
		return a.hctx.Value(key)
	}
	return a.Context.Value(key)
}

// AfterFunc: see call.AfterFunc.
func (a *attempt) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(a.Context, f) }

// hedgeAttempt is a hedge's attempt and the request it sends, in one
// allocation.
type hedgeAttempt struct {
	attempt
	req http.Request
}

// do sends one attempt of the call. hctx is hedge.Do's context for it;
// the attempt's stack has grown to level (see stack.go). The call cancels
// the attempt when it loses, but only while it waits for the response's
// header. From then on, the body is Discard's (a loser) or the caller's
// (the winner) to close.
func (c *call) do(hctx context.Context, level int32) (*attempt, error) {
	k := hedge.Attempt(hctx)
	a := &c.primary
	if k > 0 {
		a = c.hedge(hctx)
	}
	send, refused := c.start(a, hctx)
	if !send {
		a.body.cancel()
		if refused {
			return c.stopped(a)
		}
		// The call has ended, or a response has ended it: send nothing.
		<-hctx.Done() // see below
		return a.answer(nil, hedge.Terminal), context.Canceled
	}
	mark := stackMark()
	resp, err := c.send(a, k)
	c.t.sent(level, stackMark() != mark)
	switch {
	case err == errHeldBack:
		a.body.cancel()
		c.answered(a)
		return c.stopped(a)
	case resp == nil && err == nil:
		err = nothingFrom(c.t.base)
	}
	lost, tied := c.answered(a)
	if lost {
		// Cancelled because another response ended the call, maybe before
		// hedge.Do has taken it: this result must reach hedge.Do after
		// that one, as a loser's, or a retryable error would start
		// another attempt, and a terminal one end the call with it.
		// hedge.Do cancels hctx when it decides.
		<-hctx.Done()
	}
	switch {
	case err != nil:
		a.body.cancel()
		if resp != nil && resp.Body != nil { // a RoundTripper out of contract
			resp.Body.Close()
		}
		resp = nil
	case resp.Body == nil || resp.Body == http.NoBody:
		a.body.cancel() // nothing to read: hold nothing
	default:
		a.body.rc = resp.Body
		resp.Body = &a.body
	}
	if tied {
		// Out of the race, as if it had never been sent: hedge.Do drops
		// this result and hands resp to Discard. It must not end the
		// call, which goes on with the attempt that started.
		return a.answer(resp, hedge.Failed), err
	}
	if err != nil && c.Err() != nil {
		// The caller gave up, and the transport said so in its own words
		// (HTTP/2 answers ctx.Err(), without the cause). Either way this
		// reaches hedge.Do, through the caller's context or as this
		// result, the call's answer is the caller's cause, and no other
		// attempt could change it.
		return a.answer(nil, hedge.Terminal), context.Cause(c.Context)
	}
	o := c.classify(resp, err)
	refusal := false
	if o == hedge.Retryable && resp != nil {
		if h := resp.Header.Get("Retry-After"); h != "" {
			refusal = !c.pushBack(h)
		}
	}
	if o == hedge.Retryable || o == hedge.Failed {
		return c.fail(a, resp, o, err, refusal)
	}
	// Accept and Terminal end the call (this one, or one hedge.Do took
	// before it): every attempt still waiting has lost. Cancelled here,
	// they leave the server at the decision, not once RoundTrip has
	// returned.
	c.cancelLosers(a)
	return a.answer(resp, o), err
}

// nothingFrom is the error of an attempt whose Base returned neither a
// response nor an error, which http.Client reports the same way.
func nothingFrom(base http.RoundTripper) error {
	return fmt.Errorf("hedgehttp: Base (%T) returned a nil *http.Response with a nil error", base)
}

// start makes a, waiting, the attempt hedge.Do sends next, and reports
// whether to send it: not once the call has ended, hedge.Do has already
// cancelled it (hctx), or the call holds a refusal (refused).
func (c *call) start(a *attempt, hctx context.Context) (send, refused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a == &c.primary {
		// The primary's values are the call's, so nothing reads hctx
		// through its request context. A hedge's came with it (see
		// hedge): its request context may already have read them, on a
		// goroutine of the context package's, if the caller gave up as
		// it linked to the request's, and a write here would race.
		a.hctx = hctx
		// a.waiting is false only for a loser before it ran
	} else {
		a.next, c.primary.next = c.primary.next, a
		a.waiting = !c.over
	}
	// hctx has ended if the attempt was claimed as the call was decided,
	// or a tie cancelled it before it was sent (see tie.go).
	a.waiting = a.waiting && hctx.Err() == nil
	if a.waiting && c.refused != nil {
		a.waiting, refused = false, true
	}
	if a.waiting {
		a.live = true
		c.live++
	}
	return a.waiting, refused
}

// hedge makes the attempt of a hedge: a copy of the call's request with
// a context of its own.
func (c *call) hedge(hctx context.Context) *attempt {
	h := &hedgeAttempt{}
	a := &h.attempt
	a.Context, a.isHedge, a.hctx = c, true, hctx
	c.tie(a)
	ctx, cancel := context.WithCancel(a)
	a.body.cancel = cancel
	h.copyRequest(&c.req, ctx)
	a.req = &h.req
	return a
}

// copyRequest makes h's request req with ctx. Not inlined, so that the
// request WithContext builds on the stack on its way is on it only here,
// not in the frames under which Base and the allocator run.
//
//go:noinline
func (h *hedgeAttempt) copyRequest(req *http.Request, ctx context.Context) {
	h.req = *req.WithContext(ctx)
}

// answered marks a's response's header as come, or its attempt as
// failed: cancelling it is no longer the call's to do. It reports whether
// the call cancelled a first: a lost; and whether a tie did: a is out of
// the race, and hedge.Do drops its answer. An answer that is not tied may
// end the call: from now on a start signal waits (see tieHeard), until
// fail or stopped takes it in as one that does not.
func (c *call) answered(a *attempt) (lost, tied bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lost, tied = !a.waiting, a.tied
	a.waiting = false
	a.answering = !tied
	return lost, tied
}

// cancelLosers ends the call for every attempt but keep: it cancels those
// still waiting for their response's header (and the primary if it has
// not run), and keeps any attempt from being sent from now on.
func (c *call) cancelLosers(keep *attempt) {
	var cancels [hedge.MaxAttemptsLimit]context.CancelFunc
	n := 0
	c.mu.Lock()
	c.over = true
	for a := &c.primary; a != nil; a = a.next {
		if a != keep && a.waiting {
			a.waiting = false
			cancels[n] = a.body.cancel
			n++
		}
	}
	c.mu.Unlock()
	for _, cancel := range cancels[:n] {
		cancel()
	}
}

// send sends attempt k. Its frame is kept small, the rare steps in
// functions of their own: the attempt runs on a fresh goroutine, whose
// first stack is small, and growing it would cost more than the rest of
// the call.
func (c *call) send(a *attempt, k int) (*http.Response, error) {
	r := a.req
	if c.resume.Load() != nil {
		if err := c.holdBack(a); err != nil {
			return nil, err
		}
	}
	if c.hasBody {
		if k > 0 {
			if err := c.body(r); err != nil {
				return nil, err
			}
		} else if !c.bodyTaken.CompareAndSwap(false, true) {
			// end closed req.Body, after it cancelled the primary.
			return nil, context.Cause(r.Context())
		}
	}
	if c.t.header != "" && k > 0 {
		c.number(r, k)
	}
	return c.t.base.RoundTrip(r)
}

// body gives r a body of its own, from GetBody, and trailers of its own
// if the call has any.
func (c *call) body(r *http.Request) error {
	if c.tr != nil {
		b, err := c.tr.getBody()
		if err != nil {
			return err
		}
		r.Body = b
		c.tr.give(r)
		return nil
	}
	b, err := c.req.GetBody()
	if err != nil {
		return err
	}
	r.Body = b
	return nil
}

// number gives r a copy of the call's header with the attempt number k
// in AttemptHeader.
func (c *call) number(r *http.Request, k int) {
	r.Header = c.req.Header.Clone()
	if r.Header == nil {
		r.Header = make(http.Header, 1)
	}
	r.Header.Set(c.t.header, strconv.Itoa(k))
}

// classify runs the Transport's classifier.
func (c *call) classify(resp *http.Response, err error) hedge.Outcome {
	if c.t.Classify == nil {
		return Classify(resp, err)
	}
	done := false
	defer func() {
		if !done && resp != nil && resp.Body != nil {
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
