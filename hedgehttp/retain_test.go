package hedgehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/ctxtest"
)

// A body read to its end and never closed, under a request context that
// lives as long as the process, retains nothing of its call: the end of
// the body releases the attempt's context, as http.Transport releases its
// own, over every protocol.
func TestBodyReadToTheEndReleasesTheCall(t *testing.T) {
	const calls = 50
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, "ok")
			}))
			var mu sync.Mutex
			var sent []context.Context // the request context Base got, per call
			rec := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				mu.Lock()
				sent = append(sent, r.Context())
				mu.Unlock()
				return base.RoundTrip(r)
			})
			reg := &ctxtest.Registry{}
			tr := &hedgehttp.Transport{Base: rec, Delay: hedge.Fixed(time.Hour)}
			for i := range calls {
				req, _ := http.NewRequestWithContext(reg, http.MethodGet, url, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body) // and never closed
				if err != nil || string(b) != "ok" {
					t.Fatalf("call %d: body %q, %v", i, b, err)
				}
				if n := reg.Live(); n != 0 {
					t.Fatalf("call %d: %d registrations left on the request's context once the body was read, want 0", i, n)
				}
				mu.Lock()
				ctx := sent[len(sent)-1]
				mu.Unlock()
				if ctx.Err() == nil {
					t.Fatalf("call %d: the attempt's context is live once its body was read to the end", i)
				}
			}
		})
	}
}

// The responses RoundTrip does not return are the caller's to forget: a
// superseded one, handed back to Discard, is not kept alive by the
// winner's response, which keeps its call alive while the caller holds
// it (its body is the attempt's).
func TestWinnerRetainsNoSupersededResponse(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attemptOf(r) == 0 {
					http.Error(w, "busy", http.StatusServiceUnavailable) // retried at once
					return
				}
				fmt.Fprint(w, "ok")
			}))
			var superseded weak.Pointer[http.Response]
			tr := &hedgehttp.Transport{
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					resp, err := base.RoundTrip(r)
					if err == nil && attemptOf(r) == 0 {
						superseded = weak.Make(resp)
					}
					return resp, err
				}),
				Delay:         hedge.Fixed(time.Hour),
				AttemptHeader: attemptHeader,
			}
			resp, err := tr.RoundTrip(get(t, url))
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			// RoundTrip returns once Discard has had the 503: hedge.Do
			// waits for the values superseded before its answer.
			runtime.GC()
			if superseded.Value() != nil {
				t.Error("the superseded 503 is still reachable while the caller holds the winner's response")
			}
			if got := readAll(t, resp); got != "ok" {
				t.Errorf("body %q, want ok", got)
			}
		})
	}
}

// Nor does a loser whose Base is still running keep the winner's response
// alive once the caller is done with it: the loser keeps its call. Over
// HTTP/1, whose body does not lead back to its response; an HTTP/2 body
// does, and the winner's is the caller's.
func TestLoserRetainsNoWinnersResponse(t *testing.T) {
	url, base := protos[0].start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attemptOf(r) == 0 {
			<-r.Context().Done() // the primary loses
			return
		}
		fmt.Fprint(w, "ok")
	}))
	lost := make(chan struct{})  // the primary's Base has seen its request end
	leave := make(chan struct{}) // and may return
	tr := &hedgehttp.Transport{
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := base.RoundTrip(r)
			if attemptOf(r) == 0 {
				close(lost)
				<-leave
			}
			return resp, err
		}),
		Delay:         hedge.Fixed(ms),
		AttemptHeader: attemptHeader,
	}
	defer close(leave)
	won := func() weak.Pointer[http.Response] {
		resp, err := tr.RoundTrip(get(t, url))
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Fatalf("body %q, want ok", got)
		}
		return weak.Make(resp)
	}()
	within(t, lost, "the primary's cancellation")
	runtime.GC()
	if won.Value() != nil {
		t.Error("the winner's response is still reachable while the loser's Base runs")
	}
}
