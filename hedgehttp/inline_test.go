package hedgehttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/goid"
)

// sentFrom notes the goroutine each request is sent from, then sends it
// through a real http.Transport.
type sentFrom struct {
	http.RoundTripper
	ids []uint64
}

func (s *sentFrom) RoundTrip(r *http.Request) (*http.Response, error) {
	s.ids = append(s.ids, goid.Current())
	return s.RoundTripper.RoundTrip(r)
}

// The zero Transport sends the first attempt from the caller's goroutine;
// one with a Delay of the user's, whose hooks could fail elsewhere while
// it runs, from a goroutine of its own.
func TestPrimarySentFromTheCallersGoroutine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	for _, tt := range []struct {
		name  string
		delay hedge.Delay
		here  bool
	}{{"zero Transport", nil, true}, {"a Delay set", hedge.Fixed(hedge.DefaultDelay), false}} {
		t.Run(tt.name, func(t *testing.T) {
			base := &sentFrom{RoundTripper: srv.Client().Transport}
			c := &http.Client{Transport: &hedgehttp.Transport{Base: base, Delay: tt.delay}}
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(base.ids) != 1 || (base.ids[0] == goid.Current()) != tt.here {
				t.Errorf("sent %d attempts; the first from the caller's goroutine: %v, want %v",
					len(base.ids), len(base.ids) == 1 && base.ids[0] == goid.Current(), tt.here)
			}
		})
	}
}
