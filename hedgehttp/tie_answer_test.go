package hedgehttp_test

// A start signal that comes after another attempt's response, over real
// servers on 127.0.0.1. Handlers, the classifier and the caller's trace
// wait on each other with channels, so no outcome depends on timing.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgehttp"
)

// The primary queues at a busy replica; the hedge gets a 200 at once
// from a replica that sends no start signal. While the Transport
// classifies that 200, the busy replica admits the primary, whose start
// signal reaches the client before the 200 is accepted. The signal comes
// too late to tie anything: the hedge's answer is the call's, the primary
// is cancelled as a loser, and RoundTrip returns the 200, whether or not
// the call could send another attempt.
func TestStartAfterAnotherAnswer(t *testing.T) {
	for _, p := range protos {
		for _, maxAttempts := range []int{2, 3} {
			t.Run(fmt.Sprint(p.name, "/MaxAttempts=", maxAttempts), func(t *testing.T) {
				testStartAfterAnotherAnswer(t, p, maxAttempts)
			})
		}
	}
}

func testStartAfterAnotherAnswer(t *testing.T, p proto, maxAttempts int) {
	holdBusy := make(chan struct{})
	release := sync.OnceFunc(func() { close(holdBusy) })
	busyIn := make(chan struct{})
	primaryIn := make(chan struct{})
	busyAdm := &hedgehttp.Admission{Gate: &admit.Gate{Limit: 1}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Blocker") != "" {
			close(busyIn)
			<-holdBusy
			return
		}
		<-r.Context().Done() // the primary runs until it loses
	})}
	busyURL, busyBase := busyReplica(t, p, busyAdm, primaryIn)
	idleURL, idleBase := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attemptOf(r) > 1 {
			<-r.Context().Done() // a second hedge, if any, never answers
			return
		}
		// The hedge answers only once the primary waits at the busy
		// replica, behind the blocker.
		awaitPrimary(t, primaryIn)
		fmt.Fprint(w, "from attempt ", attemptOf(r))
	}))

	blockerDone := holdWithBlocker(t, busyURL, busyBase, busyIn)
	defer func() {
		release()
		blockerDone()
	}()

	// The caller asks for the start signal itself, so that its trace
	// hears the 103 once the Transport has.
	heard := make(chan struct{})
	heardOnce := sync.OnceFunc(func() { close(heard) })
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if _, ok := h[hedgehttp.StartedHeader]; ok {
			heardOnce()
		}
		return nil
	}}
	obs := &reports{}
	tr := &hedgehttp.Transport{
		Base:          &replicas{busyURL, idleURL, busyBase, idleBase},
		Delay:         hedge.Fixed(ms),
		MaxAttempts:   maxAttempts,
		AttemptHeader: attemptHeader,
		Observer:      obs,
		Classify: func(resp *http.Response, err error) hedge.Outcome {
			if err != nil || resp.Request.Header.Get(attemptHeader) != "1" {
				return hedgehttp.Classify(resp, err)
			}
			// The hedge's 200: the primary is admitted now, and its start
			// signal heard, before the 200 is accepted.
			release()
			select {
			case <-heard:
			case <-time.After(10 * time.Second):
				t.Error("the primary's start signal never reached the caller")
			}
			return hedge.Accept
		},
	}
	req := get(t, busyURL)
	req.Header.Set(hedgehttp.TieHeader, "1")
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	type answer struct {
		resp *http.Response
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		answered <- answer{resp, err}
	}()
	got := within(t, answered, "RoundTrip to return")
	if got.err != nil {
		t.Fatalf("RoundTrip: %v, want the hedge's 200", got.err)
	}
	if body := readAll(t, got.resp); body != "from attempt 1" {
		t.Errorf("got %q, want the hedge's answer", body)
	}
	if r := obs.last(t); r.Tied != 0 || r.Winner != 1 {
		t.Errorf("report: %d tied, won by %d; want none tied, won by 1", r.Tied, r.Winner)
	}
}

// lateAnswer sends the first hedge as if its server's answer were on its
// way when the hedge was cancelled: once the hedge's request context
// ends, it fetches the answer anyway, and hands it over with a body that
// closes closed when it is closed. Other attempts go to the replicas as
// they are.
type lateAnswer struct {
	replicas
	closed chan struct{}
}

func (l *lateAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if hedge.Attempt(r.Context()) != 1 {
		return l.replicas.RoundTrip(r)
	}
	<-r.Context().Done()
	resp, err := l.replicas.RoundTrip(r.WithContext(context.WithoutCancel(r.Context())))
	if err != nil {
		return nil, err
	}
	resp.Body = &closeSignal{ReadCloser: resp.Body, once: sync.OnceFunc(func() { close(l.closed) })}
	return resp, nil
}

type closeSignal struct {
	io.ReadCloser
	once func()
}

func (b *closeSignal) Close() error {
	b.once()
	return b.ReadCloser.Close()
}

// The primary's start signal ties the hedges, sent to another replica,
// and the first hedge's answer comes all the same. A tied hedge is out of
// the race: its answer is released unread and ends nothing, and the call
// goes on with the primary, which answers only then. A tied hedge's
// refusal is no exception: the call does not hold it, and a primary that
// fails returns its own failure.
func TestTiedAttemptAnswers(t *testing.T) {
	for _, p := range protos {
		for _, refused := range []bool{false, true} {
			for _, maxAttempts := range []int{2, 3} {
				t.Run(fmt.Sprint(p.name, "/refused=", refused, "/MaxAttempts=", maxAttempts), func(t *testing.T) {
					testTiedAttemptAnswers(t, p, refused, maxAttempts)
				})
			}
		}
	}
}

func testTiedAttemptAnswers(t *testing.T, p proto, refused bool, maxAttempts int) {
	want := http.StatusOK
	if refused {
		want = http.StatusServiceUnavailable
	}
	holdBusy := make(chan struct{})
	busyIn := make(chan struct{})
	primaryIn := make(chan struct{})
	hedgeClosed := make(chan struct{})
	busyAdm := &hedgehttp.Admission{Gate: &admit.Gate{Limit: 1}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Blocker") != "" {
			close(busyIn)
			<-holdBusy
			return
		}
		// The primary answers once the tied hedge's answer is released.
		select {
		case <-hedgeClosed:
		case <-time.After(10 * time.Second):
			t.Error("the tied hedge's body was never closed")
		}
		w.WriteHeader(want)
		fmt.Fprint(w, "from attempt ", attemptOf(r))
	})}
	busyURL, busyBase := busyReplica(t, p, busyAdm, primaryIn)
	idleURL, idleBase := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attemptOf(r) > 1 {
			<-r.Context().Done() // a second hedge, if any, never answers
			return
		}
		if refused {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, "from attempt ", attemptOf(r))
	}))

	blockerDone := holdWithBlocker(t, busyURL, busyBase, busyIn)
	defer func() {
		blockerDone()
	}()

	obs := &reports{}
	base := &lateAnswer{replicas{busyURL, idleURL, busyBase, idleBase}, hedgeClosed}
	secondIn := make(chan struct{})
	tr := &hedgehttp.Transport{
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch hedge.Attempt(r.Context()) {
			case 1:
				// The hedges are sent once the primary waits at the busy
				// replica; then the blocker leaves, and the primary
				// starts, which ties every hedge.
				awaitPrimary(t, primaryIn)
				if maxAttempts > 2 {
					<-secondIn
				}
				close(holdBusy)
			case 2:
				close(secondIn)
			}
			return base.RoundTrip(r)
		}),
		Delay:         hedge.Fixed(ms),
		MaxAttempts:   maxAttempts,
		AttemptHeader: attemptHeader,
		Observer:      obs,
	}
	type answer struct {
		resp *http.Response
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := tr.RoundTrip(get(t, busyURL))
		answered <- answer{resp, err}
	}()
	got := within(t, answered, "RoundTrip to return")
	if got.err != nil {
		t.Fatalf("RoundTrip: %v, want the primary's %d", got.err, want)
	}
	if body := readAll(t, got.resp); got.resp.StatusCode != want || body != "from attempt 0" {
		t.Errorf("got %d %q, want the primary's %d", got.resp.StatusCode, body, want)
	}
	if r := obs.last(t); r.Tied != maxAttempts-1 || r.Winner != 0 {
		t.Errorf("report: %d tied, won by %d; want %d tied, won by 0", r.Tied, r.Winner, maxAttempts-1)
	}
}

// busyReplica serves adm over p, and closes primaryIn when the first
// request that is not the blocker arrives: the primary, queued.
func busyReplica(t *testing.T, p proto, adm http.Handler, primaryIn chan<- struct{}) (string, http.RoundTripper) {
	return p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Blocker") == "" {
			close(primaryIn)
		}
		adm.ServeHTTP(w, r)
	}))
}
