package hedgehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

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
