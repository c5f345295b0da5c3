package hedgehttp_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// script is an in-memory upstream for synctest bubbles: attempt k answers
// with answers[k] after its latency, or hangs without one. It notes when
// each attempt was sent, in virtual time since the script began.
type script struct {
	t0      time.Time
	answers []answer
	mu      sync.Mutex
	sent    []time.Duration
	bodies  []*fakeBody
}

type answer struct {
	after  time.Duration
	status int
	header []string // name, value, ...
	err    error
}

func newScript(answers ...answer) *script { return &script{t0: time.Now(), answers: answers} }

func (s *script) RoundTrip(r *http.Request) (*http.Response, error) {
	k := hedge.Attempt(r.Context())
	s.mu.Lock()
	s.sent = append(s.sent, time.Since(s.t0))
	s.mu.Unlock()
	if k >= len(s.answers) {
		return hang(r)
	}
	a := s.answers[k]
	select {
	case <-time.After(a.after):
	case <-r.Context().Done():
		return nil, context.Cause(r.Context())
	}
	if a.err != nil {
		return nil, a.err
	}
	resp, b := respond(a.status, http.StatusText(a.status), a.header...)
	s.mu.Lock()
	s.bodies = append(s.bodies, b)
	s.mu.Unlock()
	return resp, nil
}

func (s *script) sends() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.sent...)
}

// unclosed counts the bodies the script handed out that are not closed
// exactly once.
func (s *script) unclosed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.bodies {
		if b.closes.Load() != 1 {
			n++
		}
	}
	return n
}

// A Retry-After on a retryable response holds the next attempt back when
// the call can afford the wait; when it cannot and nothing else is in
// flight, the call ends with that response (refusal_test.go has the rest).
func TestRetryAfter(t *testing.T) {
	// synctest's clock starts on a whole second, so an HTTP date one
	// second ahead is exactly one second ahead.
	inASecond := func() string { return time.Now().Add(time.Second).UTC().Format(http.TimeFormat) }
	ok := answer{status: 200}
	tests := []struct {
		name       string
		retryAfter func() string // nil: no header
		status     int
		deadline   time.Duration // 0: none
		wantStatus int
		wantSent   []time.Duration
	}{
		{"no header: next at once", nil, 503, 0, 200, []time.Duration{0, 0}},
		{"seconds", func() string { return "1" }, 503, 0, 200, []time.Duration{0, time.Second}},
		{"zero", func() string { return "0" }, 503, 0, 200, []time.Duration{0, 0}},
		{"HTTP date", inASecond, 503, 0, 200, []time.Duration{0, time.Second}},
		{"429", func() string { return "1" }, 429, 0, 200, []time.Duration{0, time.Second}},
		{"past the deadline: stop", func() string { return "1" }, 503, 500 * ms, 503, []time.Duration{0}},
		{"longer than a second: stop", func() string { return "2" }, 503, 0, 503, []time.Duration{0}},
		{"unreadable: stop", func() string { return "soon" }, 503, 0, 503, []time.Duration{0}},
		{"on an accepted response: ignored", func() string { return "5" }, 200, 0, 200, []time.Duration{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				first := answer{status: tt.status}
				if tt.retryAfter != nil {
					first.header = []string{"Retry-After", tt.retryAfter()}
				}
				s := newScript(first, ok)
				tr := &hedgehttp.Transport{Base: s, Delay: hedge.Fixed(time.Hour)}
				ctx := t.Context()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				resp, err := tr.RoundTrip(get(t, "http://upstream.test/").WithContext(ctx))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				synctest.Wait()
				if resp.StatusCode != tt.wantStatus {
					t.Errorf("status %d, want %d", resp.StatusCode, tt.wantStatus)
				}
				if diff := cmp.Diff(tt.wantSent, s.sends()); diff != "" {
					t.Errorf("attempts sent at (-want +got):\n%s", diff)
				}
				if n := s.unclosed(); n != 0 {
					t.Errorf("%d bodies not closed exactly once", n)
				}
			})
		})
	}
}

// Timed hedges keep their spacing after a pushback rather than all
// leaving when it ends.
func TestPushbackMovesTimedHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScript(
			answer{after: 10 * ms, status: 503, header: []string{"Retry-After", "1"}},
			answer{after: time.Hour},
			answer{after: 5 * ms, status: 200},
		)
		tr := &hedgehttp.Transport{Base: s, Delay: hedge.Fixed(100 * ms), MaxAttempts: 3}
		resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := []time.Duration{0, 1010 * ms, 1110 * ms}
		if diff := cmp.Diff(want, s.sends()); diff != "" {
			t.Errorf("attempts sent at (-want +got):\n%s", diff)
		}
		if resp.StatusCode != 200 {
			t.Errorf("status %d, want 200", resp.StatusCode)
		}
	})
}

// A network error starts the next attempt at once; when every attempt
// fails, RoundTrip returns the last error.
func TestNetworkErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := &net.OpError{Op: "dial", Err: errors.New("connection refused")}
		s := newScript(answer{after: 10 * ms, err: refused}, answer{after: 5 * ms, status: 200})
		tr := &hedgehttp.Transport{Base: s, Delay: hedge.Fixed(time.Hour)}
		resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if diff := cmp.Diff([]time.Duration{0, 10 * ms}, s.sends()); diff != "" {
			t.Errorf("attempts sent at (-want +got):\n%s", diff)
		}

		last := errors.New("reset")
		s = newScript(answer{err: refused}, answer{err: last})
		_, err = (&hedgehttp.Transport{Base: s, Delay: hedge.Fixed(time.Hour)}).RoundTrip(get(t, "http://upstream.test/"))
		if err != last {
			t.Errorf("RoundTrip = %v, want the last attempt's error", err)
		}
	})
}
