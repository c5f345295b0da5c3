package hedgehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// hearing is a Budget that grants every attempt and closes heard once it
// hears how attempt 1 ended: by then the Transport has taken in that
// attempt's response.
type hearing struct {
	once  sync.Once
	heard chan struct{}
}

func (*hearing) Allow(context.Context, int) bool { return true }

func (h *hearing) Done(_ context.Context, k int, _ hedge.Outcome) {
	if k == 1 {
		h.once.Do(func() { close(h.heard) })
	}
}

// bounded is a request context with a deadline far beyond any the test
// needs: a call that would hang fails the test instead.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// hedgeOnce is a Delay with one timed hedge, d after the primary: any
// attempt after it is a retry.
func hedgeOnce(d time.Duration) hedge.Delay {
	return hedge.DelayFunc(func(_ context.Context, k int) time.Duration {
		if k == 0 {
			return d
		}
		return -1
	})
}

// refusals are answers a load shedder in front of one replica gives, none
// of which a call can wait out.
var refusals = []struct {
	name       string
	status     int
	retryAfter string
}{
	{"503 Retry-After: 30", 503, "30"},
	{"429 Retry-After: 5", 429, "5"},
	{"503 Retry-After: soon", 503, "soon"},
}

// A hedge's refusal does not cut off a healthy primary: the primary,
// which answers once the Transport has taken the refusal in, is the
// answer, and the refusal is closed.
func TestHedgeRefusalLeavesThePrimary(t *testing.T) {
	for _, p := range protos {
		for _, rf := range refusals {
			t.Run(p.name+"/"+rf.name, func(t *testing.T) {
				budget := &hearing{heard: make(chan struct{})}
				primaryIn := make(chan struct{})
				url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if attemptOf(r) == 1 {
						awaitPrimary(t, primaryIn) // the primary is in flight
						w.Header().Set("Retry-After", rf.retryAfter)
						w.WriteHeader(rf.status)
						fmt.Fprint(w, "shed")
						return
					}
					close(primaryIn)
					select {
					case <-budget.heard:
						fmt.Fprint(w, "from the primary")
					case <-r.Context().Done(): // cut off: the call has failed
					}
				}))
				cb := &counting{base: base}
				tr := &hedgehttp.Transport{Base: cb, Budget: budget, Delay: hedge.Fixed(0), AttemptHeader: attemptHeader}
				resp, err := tr.RoundTrip(get(t, url).WithContext(bounded(t)))
				if err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, resp); resp.StatusCode != 200 || got != "from the primary" {
					t.Errorf("got %d %q, want the primary's 200", resp.StatusCode, got)
				}
				want := map[int][]int32{200: {1}, rf.status: {1}}
				if diff := cmp.Diff(want, cb.settle(t)); diff != "" {
					t.Errorf("bodies opened and their closes, by status (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// A refusal stops the attempts not yet sent, a retry a failure would
// start included, and when no attempt in flight succeeds, it is the
// answer: it says when to come back.
func TestRefusalIsTheAnswerWhenNothingSucceeds(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			budget := &hearing{heard: make(chan struct{})}
			var mu sync.Mutex
			var sent []int
			primaryIn := make(chan struct{})
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := attemptOf(r)
				mu.Lock()
				sent = append(sent, k)
				mu.Unlock()
				if k == 1 {
					awaitPrimary(t, primaryIn)
					w.Header().Set("Retry-After", "30")
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				close(primaryIn)
				select {
				case <-budget.heard:
					w.WriteHeader(http.StatusBadGateway) // retryable: would start attempt 2 at once
				case <-r.Context().Done():
				}
			}))
			cb := &counting{base: base}
			tr := &hedgehttp.Transport{Base: cb, Budget: budget, Delay: hedgeOnce(0), MaxAttempts: 3, AttemptHeader: attemptHeader}
			resp, err := tr.RoundTrip(get(t, url).WithContext(bounded(t)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "30" {
				t.Errorf("got %d, Retry-After %q; want the refusal", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			want := map[int][]int32{502: {1}, 503: {1}}
			if diff := cmp.Diff(want, cb.settle(t)); diff != "" {
				t.Errorf("bodies opened and their closes, by status (-want +got):\n%s", diff)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sent) != 2 {
				t.Errorf("the server got attempts %v, want 0 and 1 only", sent)
			}
		})
	}
}

// A failure that starts nothing (Failed, from the classifier) leaves the
// attempts in flight running too.
func TestFailedLeavesThePrimary(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			budget := &hearing{heard: make(chan struct{})}
			primaryIn := make(chan struct{})
			url, base := p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attemptOf(r) == 1 {
					awaitPrimary(t, primaryIn)
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				close(primaryIn)
				select {
				case <-budget.heard:
					fmt.Fprint(w, "from the primary")
				case <-r.Context().Done():
				}
			}))
			classify := func(resp *http.Response, err error) hedge.Outcome {
				if err == nil && resp.StatusCode == 500 {
					return hedge.Failed // a retry loop around the call retries it
				}
				return hedgehttp.Classify(resp, err)
			}
			tr := &hedgehttp.Transport{Base: base, Budget: budget, Classify: classify, Delay: hedge.Fixed(0), AttemptHeader: attemptHeader}
			resp, err := tr.RoundTrip(get(t, url).WithContext(bounded(t)))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); resp.StatusCode != 200 || got != "from the primary" {
				t.Errorf("got %d %q, want the primary's 200", resp.StatusCode, got)
			}
		})
	}
}

// An attempt held back by a Retry-After the call can wait out is not in
// flight: a refusal heard meanwhile ends the call at once, and the
// attempt is never sent.
func TestRefusalStopsAnAttemptHeldBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScript(
			answer{after: 500 * ms, status: 503, header: []string{"Retry-After", "30"}},
			answer{after: 5 * ms, status: 503, header: []string{"Retry-After", "1"}}, // holds attempt 2 until 1.01s
		)
		tr := &hedgehttp.Transport{Base: s, Delay: hedgeOnce(5 * ms), MaxAttempts: 3}
		start := time.Now()
		resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "30" || time.Since(start) != 500*ms {
			t.Errorf("got %d, Retry-After %q after %v; want the refusal after 500ms", resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(start))
		}
		synctest.Wait()
		if diff := cmp.Diff([]time.Duration{0, 5 * ms}, s.sends()); diff != "" {
			t.Errorf("attempts sent at (-want +got):\n%s", diff)
		}
		if n := s.unclosed(); n != 0 {
			t.Errorf("%d bodies not closed exactly once", n)
		}
	})
}
