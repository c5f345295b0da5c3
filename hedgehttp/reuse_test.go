package hedgehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// signer is Base as a signing or logging middleware: it reads the URL and
// Header of each request it sends. One attempt is slow to give up: it
// reads its request when it is sent, and again once the test lets it go
// on, after the caller has reused its own request.
type signer struct {
	base http.RoundTripper
	slow int           // the attempt that is slow to give up
	sent chan struct{} // closed as the slow attempt is sent
	hold chan struct{} // closed by the test
	saw  chan string   // what the slow attempt read after hold
}

func newSigner(base http.RoundTripper, slow int) *signer {
	return &signer{base: base, slow: slow, sent: make(chan struct{}), hold: make(chan struct{}), saw: make(chan string, 1)}
}

func (s *signer) RoundTrip(r *http.Request) (*http.Response, error) {
	if hedge.Attempt(r.Context()) != s.slow {
		signature(r)
		return s.base.RoundTrip(r)
	}
	close(s.sent)
	signature(r) // unordered with the caller's reuse: a data race if the request is the caller's
	<-s.hold
	s.saw <- signature(r)
	return s.base.RoundTrip(r) // cancelled by now: fails at once
}

func signature(r *http.Request) string {
	return r.URL.Path + " " + r.Header.Get("Authorization")
}

// An attempt that RoundTrip did not wait for reads a request of its own:
// the caller may reuse its request once it has closed the winner's body,
// or once RoundTrip failed, while a loser's Base still reads the
// request's URL and Header. Run with -race, the loser's first read races
// with the caller's reuse unless the two share nothing; its second, made
// after the reuse, must see the request as it was sent.
func TestCallerReusesRequestWhileLoserReadsIt(t *testing.T) {
	for _, p := range protos {
		for _, tt := range []struct {
			name   string
			slow   int
			delay  hedge.Delay
			cancel bool // the caller cancels: no attempt wins
			header string
		}{
			{"primary loses", 0, hedge.Fixed(0), false, ""},
			{"hedge loses", 1, hedge.Fixed(0), false, ""},
			{"primary loses, attempts numbered", 0, hedge.Fixed(0), false, attemptHeader},
			{"hedge loses, attempts numbered", 1, hedge.Fixed(0), false, attemptHeader},
			{"caller cancels the primary", 0, hedge.Fixed(-1), true, ""},
		} {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				s := newSigner(nil, tt.slow)
				url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					// The winner answers once the slow attempt is sent, so
					// that the slow one is in flight when the call ends.
					select {
					case <-s.sent:
						fmt.Fprint(w, "ok")
					case <-r.Context().Done():
					}
				}))
				s.base = base
				tr := &hedgehttp.Transport{Base: s, Delay: tt.delay, AttemptHeader: tt.header}
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				req := get(t, url+"/first").WithContext(ctx)
				req.Header.Set("Authorization", "first")
				if tt.cancel {
					go func() { <-s.sent; cancel(errShutdown) }()
				}

				resp, err := tr.RoundTrip(req)
				switch {
				case tt.cancel && err != errShutdown:
					t.Fatalf("RoundTrip returned %v, want %v", err, errShutdown)
				case !tt.cancel && err != nil:
					t.Fatal(err)
				case !tt.cancel:
					if got := readAll(t, resp); got != "ok" {
						t.Fatalf("body %q, want ok", got)
					}
				}
				req.URL.Path = "/next"
				req.Header.Set("Authorization", "next")
				close(s.hold)
				if got, want := within(t, s.saw, "the slow attempt to read its request"), "/first first"; got != want {
					t.Errorf("after the caller reused its request, the slow attempt read %q, want %q as it was sent", got, want)
				}
			})
		}
	}
}
