package hedgehttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

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
func TestPrimarySentFromTheCallersGoroutine(t *testing.T) {
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
