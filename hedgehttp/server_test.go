package hedgehttp_test

// Tests against real servers on 127.0.0.1, over HTTP/1.1 and HTTP/2 (TLS).
// Handlers script each attempt by its Hedge-Attempt header; an attempt
// that must lose waits for its context, so no outcome depends on timing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// The primary hangs, the hedge answers: the hedge wins, and the server
// sees the primary's request cancelled.
func TestHedgeWinsAndServerSeesLoserCancelled(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			lost := make(chan error, 1)
			primaryIn := make(chan struct{})
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attemptOf(r) == 0 {
					close(primaryIn)
					<-r.Context().Done()
					lost <- r.Context().Err()
					return
				}
				awaitPrimary(t, primaryIn)
				fmt.Fprint(w, "from attempt 1")
			}))
			tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(5 * ms), AttemptHeader: attemptHeader}
			resp, err := tr.RoundTrip(get(t, url))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); got != "from attempt 1" || resp.ProtoMajor != p.major {
				t.Errorf("got %q over HTTP/%d, want the hedge's answer over HTTP/%d", got, resp.ProtoMajor, p.major)
			}
			if err := within(t, lost, "the server to see the loser cancelled"); !errors.Is(err, context.Canceled) {
				t.Errorf("loser's handler context: %v, want context.Canceled", err)
			}
			for route, s := range tr.Stats() {
				if s.Calls != 1 || s.Hedged != 1 || s.Wins[1] != 1 {
					t.Errorf("stats of %s: %+v, want one call, hedged, won by attempt 1", route, s)
				}
			}
		})
	}
}

// awaitPrimary holds a hedge's handler until the primary's handler has
// closed in. Only a loser that reached the server can be seen cancelled
// there, so the hedge answers once the primary has, however late a busy
// machine sent it. The bound only keeps a broken test from hanging.
func awaitPrimary(t *testing.T, in <-chan struct{}) {
	select {
	case <-in:
	case <-time.After(10 * time.Second):
		t.Error("the primary never reached the server")
	}
}

// Every response body that Base opens is closed exactly once, across
// winners, losers that answered late, superseded 503s and primaries that
// won outright.
func TestEveryBodyClosedExactlyOnce(t *testing.T) {
	const calls, workers = 1000, 8
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, _ := strconv.Atoi(r.URL.Query().Get("call"))
				first := attemptOf(r) == 0
				switch {
				case call%4 == 0 && first: // hangs: cancelled in flight
					<-r.Context().Done()
					return
				case call%4 == 1 && first: // superseded at once
					w.WriteHeader(http.StatusServiceUnavailable)
					fmt.Fprint(w, "busy")
					return
				case call%4 == 2 && first: // about as slow as the hedge: at times a late loser
					time.Sleep(ms) // upstream latency, not a synchronisation
				}
				fmt.Fprint(w, "ok")
			}))
			cb := &counting{base: base}
			tr := &hedgehttp.Transport{Base: cb, Delay: hedge.Fixed(ms), AttemptHeader: attemptHeader}
			var wg sync.WaitGroup
			errs := make(chan error, calls)
			for w := range workers {
				wg.Go(func() {
					for i := w; i < calls; i += workers {
						req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/?call=%d", url, i), nil)
						resp, err := tr.RoundTrip(req)
						if err != nil {
							errs <- err
							continue
						}
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if err != nil || string(b) != "ok" {
							errs <- fmt.Errorf("call %d: %q, %v", i, b, err)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			closes := cb.settle(t)
			for status, n := range closes {
				for _, c := range n {
					if c != 1 {
						t.Fatalf("a %d body was closed %d times, want exactly once", status, c)
					}
				}
			}
			// A 503 may be cancelled in flight by the hedge after 1ms.
			if len(closes[200]) < calls || len(closes[503]) == 0 || len(closes[503]) > calls/4 {
				t.Errorf("opened %d 200s and %d 503s, want at least %d and 1 to %d", len(closes[200]), len(closes[503]), calls, calls/4)
			}
		})
	}
}

// A POST that may be hedged (an Idempotency-Key, and GetBody) sends its
// whole body on every attempt; run with -race, attempts share no body.
func TestPostSendsFullBodyOnEveryAttempt(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[int]int{}      // attempt → bytes received intact, or -1
			hung := make(chan int, 2) // attempts 0 and 1 have their bodies
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := attemptOf(r)
				b, err := io.ReadAll(r.Body)
				mu.Lock()
				got[k] = len(b)
				if err != nil || !bytes.Equal(b, payload) {
					got[k] = -1
				}
				mu.Unlock()
				if k < 2 {
					hung <- k
					<-r.Context().Done()
					return
				}
				fmt.Fprint(w, "stored")
			}))
			// Every attempt at once, to race them; the third is sent once
			// the first two hold their bodies.
			tr := &hedgehttp.Transport{
				Base:  &gated{base: base, wait: hung, n: 2},
				Delay: hedge.Fixed(0), MaxAttempts: 3, AttemptHeader: attemptHeader,
			}
			// Bounded, so that an attempt whose body never arrives fails
			// the test rather than hanging it.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
			req.Header.Set("Idempotency-Key", "order-42")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if body := readAll(t, resp); body != "stored" {
				t.Errorf("body %q, want the third attempt's", body)
			}
			mu.Lock()
			defer mu.Unlock()
			want := map[int]int{0: len(payload), 1: len(payload), 2: len(payload)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("bytes received intact per attempt (-want +got):\n%s", diff)
			}
		})
	}
}

// gated holds attempt 2 back until n attempts have reported on wait.
type gated struct {
	base http.RoundTripper
	wait chan int
	n    int
}

func (g *gated) RoundTrip(r *http.Request) (*http.Response, error) {
	if hedge.Attempt(r.Context()) == 2 {
		for range g.n {
			select {
			case <-g.wait:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
	}
	return g.base.RoundTrip(r)
}

// A body that cannot be made afresh is sent once: the request passes
// through, unhedged, even when it is slow.
func TestPostWithoutGetBodyIsNeverHedged(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "%d bytes", len(b))
			}))
			cb := &counting{base: base}
			tr := &hedgehttp.Transport{Base: cb, Delay: hedge.Fixed(0)}
			req, _ := http.NewRequest(http.MethodPost, url, io.NopCloser(bytes.NewReader(make([]byte, 1000))))
			req.Header.Set("Idempotency-Key", "order-43")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); got != "1000 bytes" {
				t.Errorf("body %q, want 1000 bytes", got)
			}
			if n := len(cb.settle(t)[200]); n != 1 {
				t.Errorf("%d requests sent, want 1", n)
			}
			if len(tr.Stats()) != 0 {
				t.Errorf("stats %v, want none: the request passed through", tr.Stats())
			}
		})
	}
}

// A 503 starts the next attempt at once, without waiting for the delay;
// the 200 is returned and the 503 closed.
func Test503Then200(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attemptOf(r) == 0 {
					http.Error(w, "busy", http.StatusServiceUnavailable)
					return
				}
				fmt.Fprint(w, "ok")
			}))
			cb := &counting{base: base}
			tr := &hedgehttp.Transport{Base: cb, Delay: hedge.Fixed(time.Hour), AttemptHeader: attemptHeader}
			resp, err := tr.RoundTrip(get(t, url))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); resp.StatusCode != 200 || got != "ok" {
				t.Errorf("got %d %q, want 200 ok", resp.StatusCode, got)
			}
			want := map[int][]int32{200: {1}, 503: {1}}
			if diff := cmp.Diff(want, cb.settle(t)); diff != "" {
				t.Errorf("closes per body by status (-want +got):\n%s", diff)
			}
		})
	}
}

// The hedge that wins streams 1 MiB slowly, most of it after RoundTrip
// has returned and the loser has been cancelled: it all arrives.
func TestSlowLargeBodyReadsAfterReturn(t *testing.T) {
	const chunk, chunks = 16 << 10, 64
	want := bytes.Repeat([]byte("hedge"), chunk*chunks/5+1)[:chunk*chunks]
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			returned := make(chan struct{})
			lost := make(chan error, 1)
			primaryIn := make(chan struct{})
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attemptOf(r) == 0 {
					close(primaryIn)
					<-r.Context().Done()
					lost <- r.Context().Err()
					return
				}
				awaitPrimary(t, primaryIn)
				w.Write(want[:chunk])
				w.(http.Flusher).Flush()
				select {
				case <-returned:
				case <-r.Context().Done():
					return
				}
				for i := 1; i < chunks; i++ {
					time.Sleep(ms / 2) // a slow upstream, not a synchronisation
					w.Write(want[i*chunk : (i+1)*chunk])
					w.(http.Flusher).Flush()
				}
			}))
			tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(5 * ms), AttemptHeader: attemptHeader}
			resp, err := tr.RoundTrip(get(t, url))
			if err != nil {
				t.Fatal(err)
			}
			within(t, lost, "the loser's cancellation")
			close(returned)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("read %d of %d bytes (equal: %v), err %v", len(got), len(want), bytes.Equal(got, want), err)
			}
		})
	}
}

// Cancelling the request's context after RoundTrip returned still aborts
// the winner's body, as it would with http.Transport alone.
func TestCallerCancelReachesBodyAfterReturn(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			ended := make(chan error, 2)
			primaryIn := make(chan struct{})
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attemptOf(r) == 0 {
					close(primaryIn)
				} else {
					awaitPrimary(t, primaryIn)
					fmt.Fprint(w, "first")
					w.(http.Flusher).Flush()
				}
				<-r.Context().Done()
				ended <- r.Context().Err()
			}))
			tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(5 * ms), AttemptHeader: attemptHeader}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			resp, err := tr.RoundTrip(get(t, url).WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := make([]byte, 5)
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first" {
				t.Fatalf("read %q, %v; want first", first, err)
			}
			within(t, ended, "the loser's cancellation")
			cancel()
			if _, err := io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
				t.Errorf("reading on after the caller cancelled: %v, want context.Canceled", err)
			}
			if err := within(t, ended, "the winner's cancellation"); !errors.Is(err, context.Canceled) {
				t.Errorf("winner's handler context: %v, want context.Canceled", err)
			}
		})
	}
}

// A superseded 503 is drained before it is closed, so that its HTTP/1.1
// connection carries a later request instead of being dropped.
func TestSupersededResponseKeepsItsConnection(t *testing.T) {
	const calls = 20
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attemptOf(r) == 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := &hedgehttp.Transport{Base: srv.Client().Transport, Delay: hedge.Fixed(time.Hour), AttemptHeader: attemptHeader}
	for range calls {
		resp, err := tr.RoundTrip(get(t, srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	// Dropping the 503s' connections would take a new one per call. The
	// bound leaves room for a winner's connection that has not yet gone
	// back to the pool when the next call starts.
	if n := conns.Load(); n > calls/2 {
		t.Errorf("%d connections for %d calls, want the 503s' connections reused", n, calls)
	}
}
