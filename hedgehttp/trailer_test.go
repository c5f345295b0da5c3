package hedgehttp_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// summing is a request body that fills its request's X-Sum trailer as it
// ends, as an upload that checksums what it streams does. Every body of
// one request fills the same map, once, whichever ends first.
type summing struct {
	r    io.Reader
	sum  string
	once *sync.Once
	tr   http.Header
}

func (s *summing) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF {
		s.once.Do(func() { s.tr.Set("X-Sum", s.sum) })
	}
	return n, err
}

func (s *summing) Close() error { return nil }

// Trailers that the caller fills while the body is read reach the server
// on every attempt, as http.Transport alone sends them.
func TestTrailersFilledWhileTheBodyIsRead(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4<<10)
	h := sha256.Sum256(payload)
	sum := hex.EncodeToString(h[:])
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[int]string{}
			primaryIn := make(chan struct{})
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := attemptOf(r)
				io.Copy(io.Discard, r.Body)
				mu.Lock()
				got[k] = r.Trailer.Get("X-Sum")
				mu.Unlock()
				if k == 0 {
					close(primaryIn)
					<-r.Context().Done()
					return
				}
				awaitPrimary(t, primaryIn)
				fmt.Fprint(w, "stored")
			}))
			tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(0), AttemptHeader: attemptHeader}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a broken test fails, not hangs
			defer cancel()
			trailer := http.Header{"X-Sum": nil}
			var once sync.Once
			body := func() io.ReadCloser {
				return &summing{r: bytes.NewReader(payload), sum: sum, once: &once, tr: trailer}
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, url, body())
			req.GetBody = func() (io.ReadCloser, error) { return body(), nil }
			req.Trailer = trailer
			req.Header.Set("Idempotency-Key", "upload-7")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if b := readAll(t, resp); b != "stored" {
				t.Errorf("body %q, want the hedge's", b)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(map[int]string{0: sum, 1: sum}, got); diff != "" {
				t.Errorf("X-Sum as the server got it per attempt (-want +got):\n%s", diff)
			}
		})
	}
}
