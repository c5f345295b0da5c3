package hedgehttp_test

// A start signal that comes while another attempt's answer is being
// classified, over real servers on 127.0.0.1. Handlers, the classifier,
// the budget and the caller's trace wait on each other with channels, so
// no outcome depends on timing.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"testing"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// The primary and two hedges are sent at once, the hedges to a replica of
// their own. While the Transport classifies the primary's 503, the first
// hedge starts and says so. The 503 ends nothing, so that start must
// count once the 503 is taken in: it ties the second hedge, still queued,
// and a start the second hedge reports later cancels nothing that runs.
// Were the first hedge's start lost, the second's would tie it, running,
// and the call would end with the second hedge's answer.
func TestStartWhileAnotherAnswerFails(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) { testStartWhileAnotherAnswerFails(t, p) })
	}
}

func testStartWhileAnotherAnswerFails(t *testing.T, p proto) {
	var (
		hedgesIn    sync.WaitGroup
		classifying = make(chan struct{})
		firstHeard  = make(chan struct{})
		secondHeard = make(chan struct{})
		secondGone  = make(chan struct{})
		firstGone   = make(chan struct{})
	)
	hedgesIn.Add(2)
	// The start signal names its attempt. The header stays for the final
	// response: HTTP/2 may still be writing the 103 from the map when
	// the client has reset the stream.
	signal := func(w http.ResponseWriter, k int) {
		w.Header().Set(hedgehttp.StartedHeader, fmt.Sprint(k))
		w.WriteHeader(http.StatusEarlyHints)
	}
	primaryURL, primaryBase := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hedgesIn.Wait() // both hedges are in flight
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "from attempt 0")
	}))
	primaryEnded := make(chan struct{})
	endedOnce := sync.OnceFunc(func() { close(primaryEnded) })
	hedgesURL, hedgesBase := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch attemptOf(r) {
		case 1:
			defer close(firstGone)
			hedgesIn.Done()
			<-classifying
			signal(w, 1)
			// Runs on until the second hedge has said it started, or
			// has left its queue.
			select {
			case <-secondHeard:
			case <-secondGone:
			case <-r.Context().Done():
				return
			}
			fmt.Fprint(w, "from attempt 1")
		case 2:
			defer close(secondGone)
			hedgesIn.Done()
			// Queued until the primary's 503 has been taken in.
			select {
			case <-primaryEnded:
			case <-r.Context().Done():
				return
			}
			signal(w, 2)
			select {
			case <-firstGone:
				fmt.Fprint(w, "from attempt 2")
			case <-r.Context().Done():
			}
		}
	}))

	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		switch h.Get(hedgehttp.StartedHeader) {
		case "1":
			close(firstHeard)
		case "2":
			close(secondHeard)
		}
		return nil
	}}
	obs := &reports{}
	tr := &hedgehttp.Transport{
		Base:          &replicas{primaryURL, hedgesURL, primaryBase, hedgesBase},
		Delay:         hedge.Fixed(0),
		MaxAttempts:   3,
		Budget:        primaryEnd(endedOnce),
		AttemptHeader: attemptHeader,
		Observer:      obs,
		Classify: func(resp *http.Response, err error) hedge.Outcome {
			if err == nil && resp.Request.Header.Get(attemptHeader) == "0" {
				// The first hedge's start signal is heard while the
				// primary's 503 is classified.
				close(classifying)
				within(t, firstHeard, "the first hedge's start signal")
			}
			return hedgehttp.Classify(resp, err)
		},
	}
	req := get(t, primaryURL).WithContext(httptrace.WithClientTrace(bounded(t), trace))
	req.Header.Set(hedgehttp.TieHeader, "1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v, want the first hedge's 200", err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "from attempt 1" {
		t.Errorf("got %d %q, want the first hedge's 200", resp.StatusCode, body)
	}
	if r := obs.last(t); r.Winner != 1 {
		t.Errorf("report: won by %d, want 1", r.Winner)
	}
	tr.CloseIdleConnections()
}

// primaryEnd is a Budget that grants every attempt and calls itself once
// it hears how the primary ended: by then hedge.Do has taken in the
// primary's result.
type primaryEnd func()

func (primaryEnd) Allow(context.Context, int) bool { return true }

func (f primaryEnd) Done(_ context.Context, k int, _ hedge.Outcome) {
	if k == 0 {
		f()
	}
}
