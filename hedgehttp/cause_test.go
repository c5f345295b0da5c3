package hedgehttp_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// A call that the caller's context ends returns the caller's cause, over
// the wire too. The cancellation reaches the call two ways at once: as the
// caller's context, and as each attempt's request failing. HTTP/2 fails a
// cancelled request with ctx.Err(), plain context.Canceled, and whichever
// way arrives first must give the same answer; hence many calls.
func TestCallerCauseOverTheWire(t *testing.T) {
	const calls = 100
	for _, p := range protos {
		for _, tt := range []struct {
			name     string
			delay    hedge.Delay
			attempts int // in flight when the caller cancels
		}{
			{"primary", hedge.Fixed(-1), 1},
			{"primary and hedge", hedge.Fixed(0), 2},
		} {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				arrived := make(chan struct{})
				url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case arrived <- struct{}{}:
						<-r.Context().Done()
					case <-r.Context().Done():
					}
				}))
				tr := &hedgehttp.Transport{Base: base, Delay: tt.delay}
				for i := range calls {
					ctx, cancel := context.WithCancelCause(t.Context())
					req := get(t, url).WithContext(ctx)
					errc := make(chan error, 1)
					go func() {
						resp, err := tr.RoundTrip(req)
						if err == nil {
							resp.Body.Close()
						}
						errc <- err
					}()
					for range tt.attempts {
						within(t, arrived, "every attempt to reach the handler")
					}
					cancel(errShutdown)
					if err := within(t, errc, "RoundTrip to return"); err != errShutdown {
						t.Fatalf("call %d: RoundTrip returned %v, want the caller's cause %q", i, err, errShutdown)
					}
				}
			})
		}
	}
}
