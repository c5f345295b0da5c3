package hedgehttp

import (
	"errors"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/tailcut/hedge/admit"
)

// Admission is net/http middleware that admits requests to Handler
// through an admit.Gate, so that a busy server serves primaries before
// hedges and tells its clients when a request starts. A request waits in
// the Gate's queue for one of the Gate's Limit places; a waiting primary
// goes before any hedge. A hedge the Gate sheds (its queue full, or its
// wait past HedgeWait), as a Shedder tells hedges by AttemptHeader, is
// answered at once with 503 Service Unavailable and "Retry-After: 0",
// without reaching Handler, and its call goes on as after any shed hedge.
// A primary the Gate turns away (admit.ErrFull: only primaries wait, and
// the queue is full) gets a 503 without the Retry-After.
//
//	srv := &http.Server{Handler: &hedgehttp.Admission{Handler: mux, Gate: &admit.Gate{Limit: 64}}}
//	client := &http.Client{Transport: &hedgehttp.Transport{}}
//
// When a request leaves the queue, and before Handler runs, Admission
// tells its client that it has started, if the client asked (TieHeader),
// with a 103 Early Hints informational response that carries
// StartedHeader and no other header. A Transport then cancels the
// attempts of the same call that have not started: they wait in a queue,
// here or at another replica, and leave it without running. A request
// whose client leaves while it waits leaves the queue and never reaches
// Handler. A client that does not ask gets no 103, nor does an HTTP/1.0
// one, which cannot read it. Go's HTTP/1.1 and HTTP/2 servers send a 103
// at once, Go's clients hand it to httptrace.ClientTrace.Got1xxResponse,
// and httputil.ReverseProxy forwards it; a proxy that drops it leaves the
// client's calls as they would be without ties. Admission must come
// before any middleware that takes a 1xx status for the final one.
//
// What Admission costs, beside the Gate: no allocation, and for each
// request that asks for the signal, one more write, flushed at once (and
// a copy of the headers that a middleware before it set, if any).
//
// The zero value admits through a Gate of its own, admit.Gate's zero
// value, which limits nothing: every request starts at once, and its
// client still hears it, so that the attempts it waits for elsewhere are
// tied. It passes requests to http.DefaultServeMux. An Admission is safe
// for concurrent use. Set its fields before it serves; it must not be
// copied after.
type Admission struct {
	// Handler serves the requests the Admission lets through. Nil means
	// http.DefaultServeMux, as in http.Server.
	Handler http.Handler

	// Gate admits the requests. Nil means a Gate of the Admission's own,
	// the zero admit.Gate; set one to share a limit with other handlers
	// or a gRPC server.
	Gate *admit.Gate

	// AttemptHeader names the header that tells hedges from primaries,
	// as a Shedder reads it. Empty means DefaultAttemptHeader.
	AttemptHeader string

	once       sync.Once
	gate       *admit.Gate
	own        admit.Gate
	turnedAway atomic.Uint64
}

// ServeHTTP admits r through the Gate, tells its client that it started
// if the client asked, and passes it to Handler: see Admission.
func (a *Admission) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.once.Do(a.init)
	pass, err := a.gate.Enter(r.Context(), countsHedge(r.Header.Get(a.attemptHeader())))
	if err != nil {
		if r.Context().Err() != nil {
			return // the client has gone: no one reads an answer
		}
		a.turnedAway.Add(1)
		if errors.Is(err, admit.ErrShed) {
			w.Header().Set("Retry-After", shedRetryAfter)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	// Deferred, so that the slot is given back through a panic in the
	// handler, which http.Server recovers, and through runtime.Goexit.
	defer pass.Leave()
	if len(r.Header[TieHeader]) > 0 && r.ProtoAtLeast(1, 1) {
		signalStart(w)
	}
	h := a.Handler
	if h == nil {
		h = http.DefaultServeMux
	}
	h.ServeHTTP(w, r)
}

// TurnedAway returns how many requests the Gate has turned away, hedges
// and primaries, each answered with a 503.
func (a *Admission) TurnedAway() uint64 { return a.turnedAway.Load() }

func (a *Admission) init() {
	a.gate = a.Gate
	if a.gate == nil {
		a.gate = &a.own
	}
}

func (a *Admission) attemptHeader() string {
	if a.AttemptHeader == "" {
		return DefaultAttemptHeader
	}
	return a.AttemptHeader
}

// startedValues is StartedHeader's value in every 103, shared: the
// server only reads it.
var startedValues = []string{tieValue}[:1:1]

// signalStart sends the 103 that says the request has started, with
// StartedHeader alone. net/http writes every header set so far into a
// 1xx, and keeps them for the final response: the ones a middleware
// before this one set are put aside for the 103 and back after it.
func signalStart(w http.ResponseWriter) {
	h := w.Header()
	var kept http.Header
	if len(h) > 0 {
		kept = maps.Clone(h)
		clear(h)
	}
	h[StartedHeader] = startedValues
	w.WriteHeader(http.StatusEarlyHints)
	delete(h, StartedHeader)
	maps.Copy(h, kept)
}
