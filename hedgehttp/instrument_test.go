package hedgehttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// raceServer starts a server on 127.0.0.1 whose primary attempts hang
// until cancelled and whose hedges answer once the primary has arrived,
// so that a hedge always wins over a primary that reached the server.
func raceServer(t *testing.T, p proto) (string, http.RoundTripper) {
	primaryIn := make(chan struct{}, 16)
	return p.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet:
			fmt.Fprint(w, "not hedged")
			return
		case attemptOf(r) == 0:
			primaryIn <- struct{}{}
			<-r.Context().Done()
			return
		}
		select {
		case <-primaryIn:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "from the hedge")
	}))
}

// observed is what an Observer heard of one call.
type observed struct {
	Route string
	hedge.Report
}

// A Transport's Observer hears every hedged request once, with the
// request's route in its context, while the route's Stats go on
// counting; a request that passes through is not reported.
func TestObserverHearsHedgedRequests(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			url, base := raceServer(t, p)
			var mu sync.Mutex
			var got []observed
			tr := &hedgehttp.Transport{
				Base: base, Delay: hedge.Fixed(5 * ms), AttemptHeader: attemptHeader,
				Observer: hedge.ObserverFunc(func(ctx context.Context, r hedge.Report) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, observed{hedgehttp.Route(ctx), r})
				}),
			}
			resp, err := tr.RoundTrip(get(t, url))
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			post, err := http.NewRequest(http.MethodPost, url, strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			post.GetBody = nil // one body: passes through, unhedged
			if resp, err := tr.RoundTrip(post); err != nil {
				t.Fatal(err)
			} else {
				readAll(t, resp)
			}

			route := "GET " + strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
			want := []observed{{Route: route, Report: hedge.Report{Attempts: 2, Winner: 1, Outcome: hedge.Accept}}}
			mu.Lock()
			defer mu.Unlock()
			opts := cmpopts.IgnoreFields(hedge.Report{}, "Started", "Primary", "Elapsed")
			if diff := cmp.Diff(want, got, opts); diff != "" {
				t.Errorf("reports (-want +got)\n%s", diff)
			}
			if s := tr.Stats()[route]; s.Calls != 1 || s.Wins[1] != 1 {
				t.Errorf("Stats()[%q] = %+v, want one call won by the hedge", route, s)
			}
		})
	}
}

// attemptEnd is how one attempt's RoundTrip ended, as Base saw it.
type attemptEnd struct {
	Attempt    int
	Failed     bool
	Superseded bool
}

// reporting is a Base that tells, when each attempt's RoundTrip returns,
// whether it failed and whether Superseded says it lost.
type reporting struct {
	base http.RoundTripper
	ends chan attemptEnd
}

func (r *reporting) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	r.ends <- attemptEnd{hedge.Attempt(req.Context()), err != nil, hedgehttp.Superseded(req.Context())}
	return resp, err
}

// Superseded is true in Base for the attempt that lost the race, and only
// for it: not for the winner, not for attempts that the caller's
// cancellation or the deadline cut off, not outside a hedged request.
func TestSupersededTellsLosersFromCutOffAttempts(t *testing.T) {
	collect := func(t *testing.T, ends chan attemptEnd, n int) []attemptEnd {
		var got []attemptEnd
		for range n {
			got = append(got, within(t, ends, "an attempt to end"))
		}
		return got
	}
	byAttempt := cmpopts.SortSlices(func(a, b attemptEnd) bool { return a.Attempt < b.Attempt })
	// cutOff sends a request under ctx to base, whose handler waits for its
	// request's end, hedged at once; cut ends ctx once both attempts are
	// at the server. Neither attempt lost the race.
	cutOff := func(t *testing.T, base http.RoundTripper, url string, ctx context.Context, cut func()) {
		rt := &reporting{base: base, ends: make(chan attemptEnd, 2)}
		tr := &hedgehttp.Transport{Base: rt, Delay: hedge.Fixed(0)}
		errc := make(chan error, 1)
		go func() {
			_, err := tr.RoundTrip(get(t, url).WithContext(ctx))
			errc <- err
		}()
		cut()
		if err := within(t, errc, "RoundTrip to return"); !errors.Is(err, ctx.Err()) {
			t.Errorf("RoundTrip: %v, want %v", err, ctx.Err())
		}
		want := []attemptEnd{{Attempt: 0, Failed: true}, {Attempt: 1, Failed: true}}
		if diff := cmp.Diff(want, collect(t, rt.ends, 2), byAttempt); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	}
	waitForEnd := func(arrived chan<- struct{}) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-r.Context().Done()
		})
	}

	for _, p := range protos {
		t.Run(p.name+"/loser", func(t *testing.T) {
			url, base := raceServer(t, p)
			rt := &reporting{base: base, ends: make(chan attemptEnd, 2)}
			tr := &hedgehttp.Transport{Base: rt, Delay: hedge.Fixed(5 * ms), AttemptHeader: attemptHeader}
			resp, err := tr.RoundTrip(get(t, url))
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			want := []attemptEnd{{Attempt: 0, Failed: true, Superseded: true}, {Attempt: 1}}
			if diff := cmp.Diff(want, collect(t, rt.ends, 2), byAttempt); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})

		t.Run(p.name+"/caller cancels", func(t *testing.T) {
			arrived := make(chan struct{}, 2)
			url, base := p.start(t, waitForEnd(arrived))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			cutOff(t, base, url, ctx, func() {
				within(t, arrived, "the primary to reach the server")
				within(t, arrived, "the hedge to reach the server")
				cancel()
			})
		})
	}

	// A deadline in real time may pass before a busy machine has sent the
	// attempts; in virtual time it passes only once both wait at the
	// server, a real http.Server reached by a real http.Transport over
	// in-memory pipes. The deadline is then exact: the timers that end the
	// attempts fire at the very instant the request's own does.
	t.Run("deadline passes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			arrived := make(chan struct{}, 2)
			base := servePipes(t, waitForEnd(arrived))
			ctx, cancel := context.WithTimeout(t.Context(), 50*ms)
			defer cancel()
			cutOff(t, base, "http://upstream.test/", ctx, func() {})
			if n := len(arrived); n != 2 {
				t.Errorf("%d attempts reached the server before the deadline, want 2", n)
			}
		})
	})

	t.Run("outside a hedged request", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if hedgehttp.Superseded(ctx) {
			t.Error("Superseded is true for a context of no hedged request")
		}
	})
}
