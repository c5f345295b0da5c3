package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// openLoop calls call(0), …, call(n-1), each on a goroutine of its own, at
// the arrivals of a Poisson process of rate per second, whether or not
// earlier calls have answered: the load a server meets from many
// independent clients. (A closed loop of N workers would slow its
// arrivals as the server slowed, and hide the queue that hedges add to.)
// When arrivals fall behind the schedule, they catch up at once. It
// returns once every call has returned; when ctx ends, the calls not yet
// started are left out.
func openLoop(ctx context.Context, rate float64, seed uint64, n int, call func(i int)) {
	rng := rand.New(rand.NewPCG(seed, 0x10ad))
	var calls sync.WaitGroup
	defer calls.Wait()
	start := time.Now()
	var at time.Duration // since start
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range n {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if wait := at - time.Since(start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		calls.Go(func() { call(i) })
	}
}

// callTally is what one call of the sweep saw. The counts are what had
// happened when the point was summed up: a loser still on its way then
// (rare: losers are cancelled as the call returns) is left out.
type callTally struct {
	latency time.Duration
	err     error
	winner  int          // the attempt whose response the call got
	sent    atomic.Int32 // attempts sent to the server
	shed    atomic.Int32 // of them, answered 503 by a Shedder
}

type tallyKey struct{}

// run makes the call: a GET through client within timeout, its body read
// to the end.
func (t *callTally) run(ctx context.Context, client *http.Client, url string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, tallyKey{}, t), timeout)
	defer cancel()
	start := time.Now()
	t.err = t.get(ctx, client, url)
	t.latency = time.Since(start)
}

func (t *callTally) get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// The response's request is the winning attempt's, whose context says
	// which attempt it was.
	t.winner = hedge.Attempt(resp.Request.Context())
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// attemptCounter counts, for the call each request belongs to, the
// attempts that reach the server and those a Shedder turned away.
type attemptCounter struct{ next http.RoundTripper }

func (c *attemptCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	t, _ := req.Context().Value(tallyKey{}).(*callTally)
	if t != nil {
		t.sent.Add(1)
	}
	resp, err := c.next.RoundTrip(req)
	if t != nil && err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		t.shed.Add(1)
	}
	return resp, err
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport underneath.
func (c *attemptCounter) CloseIdleConnections() {
	if t, ok := c.next.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// loadClient sends tr's attempts over HTTP/2 (see newH2CTransport),
// counting them for the call each belongs to (see callTally), and
// numbers them as a Shedder reads them.
func loadClient(tr *hedgehttp.Transport, workers int) *http.Client {
	tr.Base = &attemptCounter{next: newH2CTransport(2 * workers)}
	tr.AttemptHeader = hedgehttp.DefaultAttemptHeader
	return &http.Client{Transport: tr}
}

// newH2CTransport speaks HTTP/2 without TLS, as the demo's server does.
// Over HTTP/1.1, an attempt that loses or times out closes its connection
// and the next attempt dials anew, so that the sweep would measure
// connection churn as much as the server's work; over HTTP/2, it resets
// its stream, and the connection carries on.
func newH2CTransport(concurrency int) *http.Transport {
	t := newTransport(concurrency)
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	return t
}
