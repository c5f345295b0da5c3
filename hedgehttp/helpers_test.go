package hedgehttp_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// attemptHeader is the header the tests ask Transports to number attempts
// with, so that handlers can script each attempt.
const attemptHeader = "Hedge-Attempt"

func attemptOf(r *http.Request) int {
	k, _ := strconv.Atoi(r.Header.Get(attemptHeader))
	return k
}

// proto starts a real server on 127.0.0.1 and returns its URL and a
// transport that speaks the protocol to it. The server closes when the
// test ends, after its handlers have returned.
type proto struct {
	name  string
	major int
	start func(t *testing.T, h http.Handler) (string, http.RoundTripper)
}

var protos = []proto{
	{"HTTP/1.1", 1, func(t *testing.T, h http.Handler) (string, http.RoundTripper) {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL, srv.Client().Transport
	}},
	{"HTTP/2", 2, func(t *testing.T, h http.Handler) (string, http.RoundTripper) {
		srv := httptest.NewUnstartedServer(h)
		srv.EnableHTTP2 = true
		// Closing the server can cut short the handshake of a connection
		// that a cancelled attempt had begun to dial: not worth a log line.
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL, srv.Client().Transport
	}},
	{"h2c", 2, func(t *testing.T, h http.Handler) (string, http.RoundTripper) {
		// HTTP/2 without TLS, as between services inside a mesh.
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		srv := httptest.NewUnstartedServer(h)
		srv.Config.Protocols = &p
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.Start()
		t.Cleanup(srv.Close)
		tr := &http.Transport{Protocols: &p}
		t.Cleanup(tr.CloseIdleConnections)
		return srv.URL, tr
	}},
}

// within fails the test if ch does not yield within a generous bound: a
// guard against hanging, not a measurement.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// counting wraps a RoundTripper and counts, for every response body it
// hands out, how often it is closed. An attempt is outstanding from its
// RoundTrip until its error, or until its body's first Close.
type counting struct {
	base        http.RoundTripper
	outstanding sync.WaitGroup
	mu          sync.Mutex
	bodies      []*countedBody
}

type countedBody struct {
	io.ReadCloser
	status int
	closes atomic.Int32
	done   func()
}

func (b *countedBody) Close() error {
	if b.closes.Add(1) == 1 {
		b.done()
	}
	return b.ReadCloser.Close()
}

func (c *counting) RoundTrip(req *http.Request) (*http.Response, error) {
	c.outstanding.Add(1)
	resp, err := c.base.RoundTrip(req)
	if err != nil {
		c.outstanding.Done()
		return nil, err
	}
	b := &countedBody{ReadCloser: resp.Body, status: resp.StatusCode, done: c.outstanding.Done}
	resp.Body = b
	c.mu.Lock()
	c.bodies = append(c.bodies, b)
	c.mu.Unlock()
	return resp, nil
}

// settle waits until every attempt has ended and every body it opened is
// closed, and returns the close count of each body by status.
func (c *counting) settle(t *testing.T) map[int][]int32 {
	t.Helper()
	done := make(chan struct{})
	go func() { c.outstanding.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.mu.Lock()
		open := 0
		for _, b := range c.bodies {
			if b.closes.Load() == 0 {
				open++
			}
		}
		c.mu.Unlock()
		t.Fatalf("attempts still outstanding after 10s; %d bodies never closed", open)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	got := map[int][]int32{}
	for _, b := range c.bodies {
		got[b.status] = append(got[b.status], b.closes.Load())
	}
	return got
}

// fakeBody is an in-memory response body that counts its Closes.
type fakeBody struct {
	io.Reader
	closes atomic.Int32
}

func (b *fakeBody) Close() error { b.closes.Add(1); return nil }

func respond(status int, text string, header ...string) (*http.Response, *fakeBody) {
	b := &fakeBody{Reader: strings.NewReader(text)}
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: b, ContentLength: int64(len(text))}, b
}

// roundTripFunc is an in-memory upstream.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// hang waits for the request's context, as an upstream that never answers.
func hang(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, context.Cause(r.Context())
}

func get(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return string(b)
}
