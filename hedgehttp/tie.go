package hedgehttp

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"net/textproto"

	"github.com/tailcut/hedge"
)

// Ties. A server that queues requests (see Admission) can tell a client
// when a request leaves its queue and starts to run: an informational
// response, 103 Early Hints, that carries StartedHeader and comes before
// the final response. A Transport asks for it on every attempt
// (TieHeader) and reports the attempt that hears it to hedge.Started,
// which cancels the call's attempts that have not started: they are still
// queued, so cancelling them costs the servers nothing, and the call goes
// on with the attempts that run. A signal that comes while another
// attempt's answer is being classified waits for it: that answer may end
// the call, and then the signal ties nothing. A server that sends no such
// response leaves the call as it was before ties.

// TieHeader is the request header by which a client asks for the start
// signal: a server that admits requests through an Admission sends a 103
// with StartedHeader to a request that carries it, and to no other. A
// Transport sends it, with the value "1", on every attempt of the
// requests it hedges unless DisableTies is set.
const TieHeader = "Hedge-Tie"

// StartedHeader is the header of the 103 Early Hints response by which a
// server says that a request has left its queue and started. A Transport
// ties on any informational response that carries it, whatever its
// value; the 103 carries no other header.
const StartedHeader = "Hedge-Started"

// tieValue is the value a Transport sends in TieHeader, and an Admission
// in StartedHeader.
const tieValue = "1"

// traceKey is the key under which net/http/httptrace keeps a request's
// ClientTrace in its context. httptrace does not export it, so it is
// learned once by asking a context that records the key it is asked for.
// With it, an attempt's request context hands Base the attempt's trace
// itself: a tied attempt costs no context of its own, where one would
// cost three allocations, and its hook none (see hook.go). If httptrace
// ever looked a trace up some other way, traceKey would be nil, attempts
// would carry no trace, and calls would never tie: TestTieAcrossProtocols
// would fail.
var traceKey = func() any {
	var r keyRecorder
	httptrace.ContextClientTrace(&r)
	return r.key
}()

// keyRecorder is a context that remembers the last key it was asked for.
type keyRecorder struct {
	context.Context
	key any
}

func (r *keyRecorder) Value(key any) any {
	r.key = key
	return nil
}

// tie makes a's request context carry a trace that hears the attempt's
// informational responses. The trace is a copy of the one the caller's
// request carries, if any, so that Base calls the caller's hooks as
// before; its Got1xxResponse hears the start signal first. Called once
// per attempt, before anything reads its context.
func (c *call) tie(a *attempt) {
	if !c.t.ties || traceKey == nil {
		return
	}
	if outer := httptrace.ContextClientTrace(c.Context); outer != nil {
		a.trace = *outer
	}
	a.trace.Got1xxResponse = a.got1xxHook()
	a.traced = true
}

// got1xx hears an informational response to attempt a. A start signal
// reports the attempt started; it reaches the caller's own hook only if
// the caller's request asked for it, so that a client behind a proxy
// that hedges sees no 103 it did not ask for. Any other response reaches
// the caller's hook as it would without ties. It runs on Base's
// goroutine, which holds the response back until it returns.
func (a *attempt) got1xx(code int, h textproto.MIMEHeader) error {
	c := callOf(a.hctx)
	if _, ok := h[StartedHeader]; ok {
		c.started(a)
		if !c.askedTie {
			return nil
		}
	}
	if outer := httptrace.ContextClientTrace(c.Context); outer != nil && outer.Got1xxResponse != nil {
		return outer.Got1xxResponse(code, h)
	}
	return nil
}

// started hears a's start signal, and reports it to hedge.Started unless
// an answer that may end the call is being classified (see tieHeard).
func (c *call) started(a *attempt) {
	if c.Err() != nil {
		return // the caller's end reaches every attempt by itself
	}
	var cancels [hedge.MaxAttemptsLimit]context.CancelFunc
	c.mu.Lock()
	a.heard = true
	n := c.tieHeard(&cancels)
	c.mu.Unlock()
	cancelAll(cancels[:n])
}

// tieHeard reports the starts heard and not yet reported to
// hedge.Started, which cancels the call's attempts that have not
// started, and takes those out of the call: they no longer count in
// flight (live), their answer ends nothing (see do), and the requests of
// those still waiting for their response's header go in cancels, n of
// them, for the caller to cancel once it has released c.mu, so that the
// server sees the queued request leave at once. (The call cancels its
// attempts' requests itself: see call.) Called with c.mu held.
//
// The ties and the answers are ordered by c.mu. While an answer that may
// end the call is classified (answering), a start waits: reported then,
// it would make hedge.Do drop that answer as a tied attempt's while the
// call went on as if it had won, and cancelled the others. The answer's
// attempt reports it once the answer turns out to end nothing (see fail
// and stopped); lost, the start would leave its attempt to be tied, still
// running, by the next start. Once an answer has ended the call (over),
// a start ties nothing, and one whose attempt has answered since is no
// longer news. hedge.Started takes only the locks of hedge.Do's call,
// under which hedge.Do calls no code of this package, and runs no
// callback.
func (c *call) tieHeard(cancels *[hedge.MaxAttemptsLimit]context.CancelFunc) (n int) {
	if c.over || c.answering() {
		return 0
	}
	for s := &c.primary; s != nil; s = s.next {
		if !s.heard {
			continue
		}
		s.heard = false
		if !s.waiting {
			continue
		}
		hedge.Started(s.hctx)
		for b := &c.primary; b != nil; b = b.next {
			if b.tied || b.hctx == nil || b.hctx.Err() == nil {
				continue
			}
			if cancel := c.takeOut(b); cancel != nil {
				cancels[n] = cancel
				n++
			}
		}
	}
	return n
}

// takeOut takes b, which a tie cancelled, out of the call, and returns
// the cancel of its request if it still waits for its response's header
// (nil if not), for the caller to call once it has released c.mu.
// Called with c.mu held.
func (c *call) takeOut(b *attempt) context.CancelFunc {
	b.tied = true
	c.unlive(b)
	if !b.waiting {
		return nil
	}
	b.waiting = false
	return b.body.cancel
}

// cancelAll cancels the requests of the attempts a tie took out.
func cancelAll(cancels []context.CancelFunc) {
	for _, cancel := range cancels {
		cancel()
	}
}

// answering reports whether an attempt's answer has come that may yet end
// the call. Called with c.mu held.
func (c *call) answering() bool {
	for b := &c.primary; b != nil; b = b.next {
		if b.answering {
			return true
		}
	}
	return false
}

// tieValues is TieHeader's value in every request, shared, as a
// request's header values are read, never written, once it is sent. Its
// capacity is its length, so that an append makes a slice of its own.
var tieValues = []string{tieValue}[:1:1]

// askTie adds TieHeader to h, a request's header of the call's own.
func askTie(h http.Header) http.Header {
	if h == nil {
		h = make(http.Header, 1)
	}
	h[TieHeader] = tieValues
	return h
}
