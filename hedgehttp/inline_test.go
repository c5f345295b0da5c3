package hedgehttp_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// goroutineID reads the calling goroutine's number from its stack's
// header, "goroutine N [running]:".
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// sentFrom notes the goroutine each request is sent from, then sends it
// through a real http.Transport.
type sentFrom struct {
	http.RoundTripper
	ids []uint64
}

func (s *sentFrom) RoundTrip(r *http.Request) (*http.Response, error) {
	s.ids = append(s.ids, goroutineID())
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
			if len(base.ids) != 1 || (base.ids[0] == goroutineID()) != tt.here {
				t.Errorf("sent %d attempts; the first from the caller's goroutine: %v, want %v",
					len(base.ids), len(base.ids) == 1 && base.ids[0] == goroutineID(), tt.here)
			}
		})
	}
}
