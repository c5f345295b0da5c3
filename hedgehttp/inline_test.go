package hedgehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/goid"
)

// sentFrom notes the goroutine the first attempt is sent from, then sends
// every attempt through a real http.Transport. A hedge may be sent too,
// from a goroutine of its own, when the machine is slow enough for the
// delay to pass.
type sentFrom struct {
	http.RoundTripper
	mu    sync.Mutex
	first uint64 // the goroutine that sent attempt 0; 0: none did
}

func (s *sentFrom) RoundTrip(r *http.Request) (*http.Response, error) {
	if hedge.Attempt(r.Context()) == 0 {
		s.mu.Lock()
		s.first = goid.Current()
		s.mu.Unlock()
	}
	return s.RoundTripper.RoundTrip(r)
}

// Inline sends the first attempt from the caller's goroutine; the zero
// Transport, and one with a Delay, from a goroutine of its own, so that a
// hedge that wins answers without waiting for the first attempt to
// return from its cancellation.
func TestPrimarySentFromTheCallersGoroutineOnlyInline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	for _, tt := range []struct {
		name   string
		inline bool
		delay  hedge.Delay
		here   bool
	}{
		{"zero Transport", false, nil, false},
		{"Inline", true, nil, true},
		{"a Delay set", false, hedge.Fixed(hedge.DefaultDelay), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := &sentFrom{RoundTripper: srv.Client().Transport}
			c := &http.Client{Transport: &hedgehttp.Transport{Base: base, Inline: tt.inline, Delay: tt.delay}}
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			base.mu.Lock()
			first := base.first
			base.mu.Unlock()
			if first == 0 || (first == goid.Current()) != tt.here {
				t.Errorf("the first attempt sent from goroutine %d; from the caller's (%d): %v, want %v",
					first, goid.Current(), first == goid.Current(), tt.here)
			}
		})
	}
}

// A request that a hedge wins returns from the zero Transport as the
// hedge answers, while its first attempt still unwinds from its
// cancellation; with Inline, whose first attempt runs on the caller's
// goroutine, only once that attempt's RoundTrip has returned.
func TestHedgeWinWaitsForTheFirstAttemptOnlyInline(t *testing.T) {
	const unwind = 30 * ms
	for _, tt := range []struct {
		name   string
		inline bool
		want   time.Duration
	}{{"zero Transport", false, 0}, {"Inline", true, unwind}} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// armed: the measured request; before it, the route's
				// learned delay warms up on an upstream whose every tenth
				// first attempt is slow, which hedges cut.
				var armed atomic.Bool
				var calls atomic.Int32
				answered := make(chan time.Time, 1) // when the measured request's hedge answered
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					switch {
					case !armed.Load():
						return tailing(r, &calls)
					case hedge.Attempt(r.Context()) == 0:
						select {
						case <-time.After(50 * ms):
						case <-r.Context().Done():
							time.Sleep(unwind) // a transport slow to return once cancelled
							return nil, context.Cause(r.Context())
						}
					default:
						time.Sleep(ms)
						select {
						case answered <- time.Now():
						default: // a later hedge, which lost
						}
					}
					resp, _ := respond(200, "ok")
					return resp, nil
				})
				tr := &hedgehttp.Transport{Base: base, Inline: tt.inline}
				learnTail(t, tr)
				armed.Store(true)
				resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
				if err != nil {
					t.Fatal(err)
				}
				returned := time.Now()
				resp.Body.Close()
				select {
				case at := <-answered:
					if waited := returned.Sub(at); waited != tt.want {
						t.Errorf("RoundTrip returned %v after the hedge answered, want %v", waited, tt.want)
					}
				default:
					t.Fatal("the measured request was not hedged")
				}
				time.Sleep(unwind) // the first attempt's return, where it is still due
				synctest.Wait()
			})
		})
	}
}
