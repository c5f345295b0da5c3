package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// tracer is a load server's work, gated by the test: each request, named
// by its path (and, for a hedge, "/" and its attempt), works until its
// gate is closed or its context ends. What the server does goes to
// events, in the order it happens: "queued" and "abandoned" from the
// pool, "start", "done" (the gate opened) and "stop" (the context ended)
// from the work. gone hears each request whose context ended while its
// handler ran.
type tracer struct {
	gates  map[string]chan struct{} // made before serving, then only read
	events chan string
	gone   chan string
}

type idKey struct{}

func newTracer(ids ...string) *tracer {
	tr := &tracer{
		gates:  make(map[string]chan struct{}),
		events: make(chan string, 100),
		gone:   make(chan string, 100),
	}
	for _, id := range ids {
		tr.gates[id] = make(chan struct{})
	}
	return tr
}

// pool returns a pool of workers that reports to tr.events.
func (tr *tracer) pool(workers int) *pool {
	p := newPool(workers)
	p.trace = func(e poolEvent) {
		tr.events <- map[poolEvent]string{queued: "queued", abandoned: "abandoned"}[e]
	}
	return p
}

func (tr *tracer) work(ctx context.Context) error {
	id := ctx.Value(idKey{}).(string)
	tr.events <- "start " + id
	select {
	case <-tr.gates[id]:
		tr.events <- "done " + id
		return nil
	case <-ctx.Done():
		tr.events <- "stop " + id
		return ctx.Err()
	}
}

// serve serves h, with each request named for tr.work, on loopback.
func (tr *tracer) serve(t *testing.T, h http.Handler) *server {
	t.Helper()
	srv, err := listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/")
		if k := r.Header.Get(hedgehttp.DefaultAttemptHeader); k != "" && k != "0" {
			id += "/" + k
		}
		stop := context.AfterFunc(r.Context(), func() { tr.gone <- id })
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), idKey{}, id)))
		stop()
	}))
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// expect reads len(want) events from ch and fails t unless they are want,
// in order.
func expect(t *testing.T, ch <-chan string, want ...string) {
	t.Helper()
	for i, w := range want {
		if got := <-ch; got != w {
			t.Fatalf("event %d is %q, want %q (expected %q)", i, got, w, want)
		}
	}
}

// reply is what a client got for one request.
type reply struct {
	id     string
	status int
	err    error
}

// send GETs id from srv on its own goroutine, and reports the reply on
// replies.
func send(ctx context.Context, client *http.Client, srv *server, id string, replies chan<- reply) {
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.url+id, nil)
		if err != nil {
			replies <- reply{id, 0, err}
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			replies <- reply{id, 0, err}
			return
		}
		resp.Body.Close()
		replies <- reply{id, resp.StatusCode, nil}
	}()
}

// collect reads n replies and returns them by id.
func collect(replies <-chan reply, n int) map[string]reply {
	got := make(map[string]reply)
	for range n {
		r := <-replies
		got[r.id] = r
	}
	return got
}

// protocols are what the pool's tests run over: HTTP/1.1, where a client
// that gives up closes its connection, and HTTP/2 without TLS, which the
// sweep speaks, where it resets its stream.
var protocols = []struct {
	name      string
	transport func(concurrency int) *http.Transport
}{
	{"HTTP/1.1", newTransport},
	{"HTTP/2", newH2CTransport},
}

// TestPoolServesInArrivalOrder: with its one worker busy, the pool serves
// the requests that wait for it in the order they came, each after the
// one before it has finished.
func TestPoolServesInArrivalOrder(t *testing.T) {
	checkNoLeaks(t)
	tr := newTracer("a", "b", "c", "d")
	srv := tr.serve(t, loadHandler(tr.pool(1), true, false, tr.work))
	defer srv.close()
	transport := newTransport(4)
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	replies := make(chan reply, 4)

	send(t.Context(), client, srv, "a", replies)
	expect(t, tr.events, "start a")
	for _, id := range []string{"b", "c", "d"} {
		send(t.Context(), client, srv, id, replies)
		expect(t, tr.events, "queued")
	}
	for _, step := range []struct{ release, next string }{{"a", "b"}, {"b", "c"}, {"c", "d"}} {
		close(tr.gates[step.release])
		expect(t, tr.events, "done "+step.release, "start "+step.next)
	}
	close(tr.gates["d"])
	expect(t, tr.events, "done d")
	for id, r := range collect(replies, 4) {
		if r.err != nil || r.status != http.StatusOK {
			t.Errorf("%s: %d, %v; want 200", id, r.status, r.err)
		}
	}
}

// TestPoolDropsCancelledWaiters: a request whose client gives up while it
// waits leaves the queue and never runs; the worker goes to the next one.
// It does so whether or not running work stops when cancelled.
func TestPoolDropsCancelledWaiters(t *testing.T) {
	for _, proto := range protocols {
		for _, stopWork := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stopwork=%v", proto.name, stopWork), func(t *testing.T) {
				checkNoLeaks(t)
				tr := newTracer("a", "b", "c")
				srv := tr.serve(t, loadHandler(tr.pool(1), stopWork, false, tr.work))
				defer srv.close()
				transport := proto.transport(4)
				defer transport.CloseIdleConnections()
				client := &http.Client{Transport: transport}
				replies := make(chan reply, 3)

				send(t.Context(), client, srv, "a", replies)
				expect(t, tr.events, "start a")
				bCtx, cancelB := context.WithCancel(t.Context())
				defer cancelB()
				send(bCtx, client, srv, "b", replies)
				expect(t, tr.events, "queued")
				send(t.Context(), client, srv, "c", replies)
				expect(t, tr.events, "queued")

				cancelB()
				expect(t, tr.events, "abandoned")
				close(tr.gates["a"])
				expect(t, tr.events, "done a", "start c")
				close(tr.gates["c"])
				expect(t, tr.events, "done c")

				got := collect(replies, 3)
				if !errors.Is(got["b"].err, context.Canceled) {
					t.Errorf("b: %d, %v; want context.Canceled", got["b"].status, got["b"].err)
				}
				for _, id := range []string{"a", "c"} {
					if r := got[id]; r.err != nil || r.status != http.StatusOK {
						t.Errorf("%s: %d, %v; want 200", id, r.status, r.err)
					}
				}
				transport.CloseIdleConnections() // or an HTTP/2 server waits a second for the client to go
				if err := srv.close(); err != nil {
					t.Fatal(err)
				}
				close(tr.events)
				for e := range tr.events {
					t.Errorf("unexpected event %q: b must never start", e)
				}
			})
		}
	}
}

// TestPoolRunningWorkOnCancel: when the client of a running request gives
// up, -stopwork decides whether its work stops at once, handing the worker
// to the next request, or runs to the end first.
func TestPoolRunningWorkOnCancel(t *testing.T) {
	for _, proto := range protocols {
		for _, stopWork := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stopwork=%v", proto.name, stopWork), func(t *testing.T) {
				checkNoLeaks(t)
				tr := newTracer("a", "b")
				srv := tr.serve(t, loadHandler(tr.pool(1), stopWork, false, tr.work))
				defer srv.close()
				transport := proto.transport(4)
				defer transport.CloseIdleConnections()
				client := &http.Client{Transport: transport}
				replies := make(chan reply, 2)

				aCtx, cancelA := context.WithCancel(t.Context())
				defer cancelA()
				send(aCtx, client, srv, "a", replies)
				expect(t, tr.events, "start a")
				send(t.Context(), client, srv, "b", replies)
				expect(t, tr.events, "queued")

				cancelA()
				if stopWork {
					expect(t, tr.events, "stop a", "start b")
				} else {
					// The server has seen a's client go, and a works on:
					// once its gate opens, it finishes before b starts.
					expect(t, tr.gone, "a")
					close(tr.gates["a"])
					expect(t, tr.events, "done a", "start b")
				}
				close(tr.gates["b"])
				expect(t, tr.events, "done b")

				got := collect(replies, 2)
				if !errors.Is(got["a"].err, context.Canceled) {
					t.Errorf("a: %d, %v; want context.Canceled", got["a"].status, got["a"].err)
				}
				if r := got["b"]; r.err != nil || r.status != http.StatusOK {
					t.Errorf("b: %d, %v; want 200", r.status, r.err)
				}
			})
		}
	}
}

// heldHedges is a Budget that grants every attempt, but holds each hedge
// until ready is closed.
type heldHedges struct{ ready <-chan struct{} }

func (b heldHedges) Allow(_ context.Context, k int) bool {
	if k > 0 {
		<-b.ready
	}
	return true
}

func (heldHedges) Done(context.Context, int, hedge.Outcome) {}

// hedgeAnswers passes attempts on to next, and reports the status of each
// hedge's response on answered once the client has it.
type hedgeAnswers struct {
	next     http.RoundTripper
	answered chan<- int
}

func (h hedgeAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(req)
	if err == nil && hedge.Attempt(req.Context()) > 0 {
		h.answered <- resp.StatusCode
	}
	return resp, err
}

func (h hedgeAnswers) CloseIdleConnections() {
	h.next.(interface{ CloseIdleConnections() }).CloseIdleConnections()
}

// TestSweepClientIsShed: the sweep's client numbers its attempts as the
// Shedder reads them, so that with -shed a hedge that finds every worker
// busy is answered 503 at once rather than queued, the tally counts it,
// and the primary still answers the call.
func TestSweepClientIsShed(t *testing.T) {
	checkNoLeaks(t)
	tr := newTracer("a")
	srv := tr.serve(t, loadHandler(tr.pool(1), true, true, tr.work))
	defer srv.close()
	hedgeReady := make(chan struct{})
	transport := &hedgehttp.Transport{Delay: hedge.Fixed(0), Budget: heldHedges{hedgeReady}}
	client := loadClient(transport, 1)
	defer client.CloseIdleConnections()
	answered := make(chan int, 1)
	transport.Base = hedgeAnswers{next: transport.Base, answered: answered}

	var call callTally
	called := make(chan struct{})
	go func() {
		defer close(called)
		call.run(t.Context(), client, srv.url+"a", time.Minute)
	}()
	expect(t, tr.events, "start a")
	close(hedgeReady)
	select {
	case status := <-answered:
		if status != http.StatusServiceUnavailable {
			t.Fatalf("the hedge was answered %d, want 503", status)
		}
	case e := <-tr.events:
		t.Fatalf("the hedge reached the pool (%s): the Shedder took it for a primary", e)
	}
	close(tr.gates["a"])
	<-called
	if call.err != nil || call.winner != 0 || call.sent.Load() != 2 || call.shed.Load() != 1 {
		t.Errorf("call: err %v, winner %d, %d sent, %d shed; want the primary's answer, 2 sent, 1 shed",
			call.err, call.winner, call.sent.Load(), call.shed.Load())
	}
}
