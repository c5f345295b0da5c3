// Package hedgehttp hedges HTTP requests. Transport is an
// http.RoundTripper: when a request that is safe to send twice has not
// answered within a delay near its route's normal p95, it sends a
// duplicate and returns the first acceptable response.
//
//	client := &http.Client{Transport: &hedgehttp.Transport{}}
//
// Every attempt is a request of its own, with its own context and its own
// body, so an attempt that loses is cancelled on the wire (its handler's
// context ends) and no two attempts share a body. Every response the
// caller does not get is drained a little and closed, exactly once. The
// response the caller gets stays readable after RoundTrip returns, until
// the caller closes its body or cancels the request's context, as with
// http.Transport.
package hedgehttp

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/tailcut/hedge"
)

// Transport is an http.RoundTripper that hedges the requests Idempotent
// allows and passes every other request straight to Base.
//
// The zero value is ready to use: it sends through http.DefaultTransport,
// hedges GET, HEAD and OPTIONS requests and those that carry an
// Idempotency-Key header, up to twice, on a plan it learns per method and
// host (see Delay), sends their first attempt from a goroutine of its own
// (see Inline), and classifies responses with Classify.
//
// Within the deadline of the request's context (set http.Client.Timeout
// or a context deadline: Transport adds none), a network error or a 429,
// 502, 503 or 504 starts the next attempt at once. A Retry-After on such a
// response holds the next attempts back: a wait of up to a second that
// ends before the deadline is waited out. A longer or unreadable one is a
// refusal: no attempt is sent after it, the attempts in flight run on,
// and unless one of them is accepted the call ends with the refusal, so
// that the caller sees when the server asked it to come back. A load
// shedder in front of one replica refuses a hedge without saying anything
// of the primary's fate.
//
// Every attempt asks its server to say when it starts (TieHeader). A
// server behind an Admission does, and when one attempt starts, the
// attempts still waiting in a queue, there or elsewhere, are cancelled
// (tied), while those that run race on. A server that does not answer
// leaves the calls as they would be without ties. DisableTies turns it
// off.
//
// A Transport is safe for concurrent use. Set its fields before its first
// request, or its first Validate; it reads some of them once, and must
// not be copied after.
type Transport struct {
	// Base sends every attempt. Nil means http.DefaultTransport. It gets
	// each attempt as a request of its own whose context carries
	// hedge.Attempt and Route, and must return as soon as that context
	// ends, as net/http's transports do and as http.Client.Timeout needs
	// it to. Like any RoundTripper it must not modify the request, whose
	// URL and Header (unless AttemptHeader is set) the attempts of one
	// call share. They are copies of the caller's, so Base may go on
	// reading an attempt's request after RoundTrip returned, as a loser's
	// does.
	Base http.RoundTripper

	// Inline sends the first attempt, and the retry its failure starts at
	// once (after the wait of a Retry-After, if any), from the caller's
	// goroutine (hedge.Policy.Inline) instead of a goroutine of its own.
	// It saves that goroutine and the growth of its stack: about 40 % of
	// what a request costs hedgehttp with Base in memory, within the noise
	// over loopback. The requests a hedge wins pay for it, and they are
	// the slowest: RoundTrip returns only once the first attempt's
	// RoundTrip has returned from its cancellation, on a goroutine that
	// the cancellation must wake first. In the peer's evaluation in the
	// benchmarks module, over loopback, p99 came out longer with it in
	// five runs of six: by 1–2 % on a quiet machine, more on a busy one.
	// So the zero Transport leaves it off; it suits a Base that answers
	// from memory or rarely needs a hedge. It needs Delay and Budget nil,
	// as their hooks run on the hedges' goroutines and one that failed
	// there would leave RoundTrip waiting for the first attempt's server:
	// Validate reports it otherwise.
	Inline bool

	// Delay says when to hedge. Nil gives each route (see Routes) its
	// own *hedge.Adaptive, as its delay and as its budget: it learns the
	// route's latency, plans how early to hedge and how many times (up
	// to two hedges), never lets the route's extra attempts exceed a
	// tenth of its requests, and stops hedging while hedges stop winning
	// or the route's first attempts fail or time out. A Delay set here
	// is shared by every route, and comes with no budget but Budget (a
	// *hedge.Adaptive set here belongs in Budget too); it can still tell
	// routes apart by Route, as &hedge.Keyed{Key: hedgehttp.Route} does.
	Delay hedge.Delay

	// MaxAttempts bounds the attempts of one request, the first included.
	// 0 means 3 with the routes' own delays (what their plans may send),
	// and 2 with a Delay set here; 2 with the routes' own delays makes
	// their plans send one hedge at most (hedge.Adaptive's MaxHedges 1);
	// 1 turns hedging off and passes every request through;
	// values outside 0..hedge.MaxAttemptsLimit make Validate and every
	// hedged RoundTrip fail with an error wrapping hedge.ErrInvalidPolicy.
	MaxAttempts int

	// Budget bounds the extra attempts across requests, and can be shared
	// with a retry loop. With the routes' own delays (Delay nil), a route
	// asks both its own bound and Budget; nil leaves the route's own.
	// With a Delay set here, nil grants every attempt.
	Budget hedge.Budget

	// Classify tells accepted responses from retryable and terminal ones.
	// Nil means Classify. It runs on the attempt's goroutine, possibly
	// concurrently with itself.
	Classify func(*http.Response, error) hedge.Outcome

	// Idempotent reports whether a request is safe to send more than once.
	// Nil means the function Idempotent. Whatever it says, a request whose
	// body cannot be made afresh (GetBody is nil) or that asks for a
	// protocol upgrade is never hedged.
	Idempotent func(*http.Request) bool

	// Routes are http.ServeMux patterns, such as "GET /users/{id}" or
	// "api.example.com/export/", that each get their own delay and stats,
	// so that a slow export does not skew a fast lookup on the same host.
	// A request that matches none falls back to its method and host. A
	// pattern ServeMux rejects makes Validate and every hedged RoundTrip
	// fail.
	Routes []string

	// MaxRoutes bounds how many method-and-host routes get a delay and
	// stats of their own (about 34 KB each with the default delay);
	// routes past it share one, named "(other)". Patterns always have
	// their own. 0 means 64.
	MaxRoutes int

	// AttemptHeader names the header that tells a server which attempt
	// a request is, so that a Shedder can shed hedges first and an
	// Admission serve primaries first. Empty means
	// DefaultAttemptHeader, sent on hedges only (1 on the first hedge, 2
	// on the second): a request without it is a first attempt, as a
	// Shedder reads it. A name set here numbers every attempt, the first
	// with 0, for the server's logs too; "-" sends no header at all.
	AttemptHeader string

	// Observer, if set, hears the hedge.Report of every hedged request,
	// after the route's Stats have counted it, with a context from which
	// Route reads the route. Requests that pass through are not
	// reported. If it also has a method BreakerOpened(route string), as
	// hedgeotel's Observer has, the routes' own delays (Delay nil) call
	// it each time a route's breaker opens, with the route's name as
	// Route gives it, on the goroutine of the attempt whose outcome
	// opened it; it should be quick. A Breaker or Adaptive set as Delay
	// or Budget is yours to wire, through its OnOpen. The Observer must
	// be safe for concurrent use; hedgeotel's turns the reports and
	// openings into OpenTelemetry metrics. Nil: only Stats.
	Observer hedge.Observer

	// DisableTies, if set, keeps the attempts from asking servers when
	// they start (TieHeader) and from hearing it: no attempt is then
	// cancelled because another started. By default every attempt asks,
	// and a server that admits requests through an Admission answers; the
	// start of one attempt cancels those still queued (see
	// hedge.Started).
	DisableTies bool

	once        sync.Once
	base        http.RoundTripper
	delay       hedge.Delay
	maxAttempts int    // MaxAttempts, its default worked out
	header      string // the attempt header's name; "" for none
	numberFirst bool   // the first attempt carries its 0 too
	ties        bool   // attempts ask for and hear the start signal
	inline      bool   // the primary runs on the caller's goroutine (see run)
	routes      *routes
	err         error // a setting RoundTrip cannot run with

	// How far an attempt grows its stack before Base, and the votes for
	// the next level: see stack.go.
	stackLevel, stackVotes atomic.Int32
}

// RoundTrip sends req and, if it may be hedged, its duplicates, and
// returns the first acceptable response, or, when every attempt failed,
// the first refusal (see Transport) if one came, else the last attempt's
// response or error. A request that may not be hedged goes to Base as it
// is, at Base's own cost.
//
// The response's body stays readable after RoundTrip returns, until the
// caller closes it or req's context ends; closing it, or reading it to
// its end, releases all the call holds. If req's context ends before a
// response is chosen, RoundTrip returns context.Cause at once (with
// Inline, once Base has returned the first attempt's, which runs on the
// caller's goroutine). A panic in Classify, Delay or Budget reaches the
// caller as a *hedge.PanicError.
//
// As http.RoundTripper requires, RoundTrip closes req.Body, and it does
// not modify req. Each attempt sends a copy of req with its own context
// and, after the first, a body from req.GetBody. The copies are made
// before the first attempt and have a URL, Header and Trailer of their
// own, so that the attempts RoundTrip does not wait for never read req
// after it returned: the caller may reuse req once it has closed the
// response's body, or at once after an error. (req.Body goes with the
// first attempt, whose Base may close it later, as http.RoundTripper
// allows.) The values of req.Trailer are the exception: as
// http.Transport does, each attempt reads them from that map as its body
// ends, so that a caller may fill them while the body is read.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.once.Do(t.init)
	if !t.hedges(req) {
		return t.base.RoundTrip(req)
	}
	c := newCall(t, req)
	var a *attempt // the attempt whose answer RoundTrip returns
	// Deferred, so that a panic of Classify, Delay or Budget cancels the
	// attempts too.
	defer func() { c.end(a) }()
	if t.err != nil {
		return nil, t.err
	}
	c.route = t.routes.of(req)
	p := hedge.Policy[*attempt]{
		Delay:       t.delay,
		MaxAttempts: t.maxAttempts,
		Budget:      c.route.budget,
		Classify:    outcome,
		Discard:     discard,
		Observer:    c.observer(),
		Inline:      t.inline,
	}
	a, err := hedge.Do(c, p, run)
	if err == errRefused {
		return c.takeRefused(), nil
	}
	if err != nil {
		return nil, err
	}
	return a.take(), nil
}

// CloseIdleConnections closes Base's idle connections, if Base can, so
// that http.Client.CloseIdleConnections reaches through the Transport.
func (t *Transport) CloseIdleConnections() {
	t.once.Do(t.init)
	if b, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		b.CloseIdleConnections()
	}
}

// Stats returns the counts of every route the Transport has hedged,
// keyed by Route's name for it: requests (Calls), hedges, wins by attempt
// and budget refusals. Requests that passed through are not counted. The
// map is the caller's.
func (t *Transport) Stats() map[string]hedge.Snapshot {
	t.once.Do(t.init)
	return t.routes.snapshot()
}

// Range calls f with the name of each route that has a delay of its own
// (Delay nil) and that route's current delay source, until f returns
// false: what hedgeotel.WithDelays reads the routes' learned delays
// from. With a Delay set on the Transport it calls f for nothing. It is
// safe to call concurrently with requests.
func (t *Transport) Range(f func(route string, d hedge.Delay) bool) {
	t.once.Do(t.init)
	if !t.routes.own {
		return
	}
	more := true
	t.routes.each(func(r *route) bool {
		r.learned.Range(func(_ string, d hedge.Delay) bool {
			more = f(r.name, d)
			return false // one key: the route's own
		})
		return more
	})
}

// hedges reports whether req may be hedged. It must not allocate: the
// requests it turns away pay nothing for passing through.
func (t *Transport) hedges(req *http.Request) bool {
	switch {
	case t.MaxAttempts == 1:
		return false
	case req.URL == nil:
		return false // nothing to route: Base's to reject, as http.Transport does
	case req.Body != nil && req.Body != http.NoBody && req.GetBody == nil:
		return false // one body cannot be sent twice
	case len(req.Header["Upgrade"]) > 0:
		return false // a switched protocol's stream cannot be raced
	case t.Idempotent != nil:
		return t.Idempotent(req)
	}
	return Idempotent(req)
}

// Idempotent is the default rule for what a Transport hedges: GET, HEAD
// and OPTIONS requests, and requests of any method that carry an
// Idempotency-Key header, by which the server can answer a duplicate
// without acting twice.
func Idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return len(req.Header["Idempotency-Key"]) > 0
}

// ownHedges is the MaxHedges of the routes' own Adaptives: a MaxAttempts
// of 2 asks their plans for one hedge at most; 0, their default.
func (t *Transport) ownHedges() int {
	if t.MaxAttempts == 2 {
		return 1
	}
	return 0
}

func (t *Transport) init() {
	t.base = t.Base
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	var opened func(route string)
	if o, ok := t.Observer.(breakerObserver); ok {
		opened = o.BreakerOpened
	}
	t.routes, t.err = newRoutes(t.Routes, t.MaxRoutes, t.Delay == nil, t.ownHedges(), t.Budget, opened)
	t.ties = !t.DisableTies
	t.inline = t.Inline // check reports it with a Delay or a Budget
	t.maxAttempts = t.MaxAttempts
	if t.maxAttempts == 0 && t.Delay == nil {
		t.maxAttempts = 3
	}
	switch t.AttemptHeader {
	case "":
		t.header = DefaultAttemptHeader
	case "-":
	default:
		t.header, t.numberFirst = t.AttemptHeader, true
	}
	if t.err == nil {
		t.err = t.check()
	}
	t.delay = wrapDelay(t.Delay)
}
