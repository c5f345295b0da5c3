package hedgehttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/ctxtest"
)

// The Transport cancels the attempts that lose itself, not through
// registrations on hedge.Do's attempt contexts. These tests pin when.

// blockingObserver holds RoundTrip, after the decision and before it
// returns, until release is closed.
type blockingObserver struct{ release <-chan struct{} }

func (o blockingObserver) Observe(context.Context, hedge.Report) { <-o.release }

// A loser is cancelled as soon as a response decides the call, not once
// RoundTrip returns: the Observer, which runs in between, sees it gone.
func TestLoserCancelledAtTheDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lost := make(chan struct{})
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if hedge.Attempt(r.Context()) == 0 {
				defer close(lost)
				return hang(r)
			}
			resp, _ := respond(200, "ok")
			return resp, nil
		})
		tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(10 * ms), Observer: blockingObserver{lost}}
		resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Errorf("body %q, want the hedge's", got)
		}
	})
}

// slowDone is a Budget that grants every attempt and records how each
// ended. Its Done for attempt 1 takes a millisecond, during which
// hedge.Do has not yet taken that attempt's result.
type slowDone struct {
	mu   sync.Mutex
	done map[int]hedge.Outcome
}

func (b *slowDone) Allow(context.Context, int) bool { return true }

func (b *slowDone) Done(_ context.Context, k int, o hedge.Outcome) {
	if k == 1 {
		time.Sleep(ms)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done[k] = o
}

// The loser cancelled at the winner's response reaches hedge.Do after the
// winner's result, as a loser: a classifier that makes its error terminal
// does not end the call with it, and the Budget hears it was cancelled.
func TestLoserReachesDoAfterTheWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if hedge.Attempt(r.Context()) == 0 {
				return hang(r)
			}
			resp, _ := respond(200, "ok")
			return resp, nil
		})
		classify := func(resp *http.Response, err error) hedge.Outcome {
			if err != nil {
				return hedge.Terminal
			}
			return hedge.Accept
		}
		budget := &slowDone{done: map[int]hedge.Outcome{}}
		tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(10 * ms), Classify: classify, Budget: budget}
		resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
		if err != nil {
			t.Fatalf("RoundTrip: %v, want the hedge's response", err)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Errorf("body %q, want the hedge's", got)
		}
		synctest.Wait()
		budget.mu.Lock()
		defer budget.mu.Unlock()
		if diff := cmp.Diff(map[int]hedge.Outcome{0: hedge.Canceled, 1: hedge.Accept}, budget.done); diff != "" {
			t.Errorf("Budget.Done (-want +got):\n%s", diff)
		}
	})
}

// When the call ends in a panic (here the classifier's, on the hedge's
// response), the attempt still waiting for its header is cancelled.
func TestLoserCancelledWhenTheCallPanics(t *testing.T) {
	// Inline runs the primary on the caller's goroutine, where hedge.Do
	// waits for it before it re-raises the hedge's panic: the hedge
	// cancels it. Without it, the primary runs on a goroutine of its own.
	setups := []struct {
		name   string
		inline bool
		delay  hedge.Delay
	}{{"inline", true, nil}, {"the routes' own delay", false, nil}, {"fixed delay", false, hedge.Fixed(10 * ms)}}
	for _, d := range setups {
		for _, where := range []string{"Classify", "Base"} {
			t.Run(d.name+", "+where+" panics", func(t *testing.T) {
				loserCancelledWhenTheCallPanics(t, d.inline, d.delay, where)
			})
		}
	}
}

func loserCancelledWhenTheCallPanics(t *testing.T, inline bool, delay hedge.Delay, where string) {
	synctest.Test(t, func(t *testing.T) {
		lost := make(chan error, 1)
		// armed: the call that panics; before it, the learned delay warms
		// up on an upstream with a tail that hedges cut.
		var armed atomic.Bool
		var calls atomic.Int32
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch {
			case !armed.Load():
				return tailing(r, &calls)
			case hedge.Attempt(r.Context()) == 0:
				resp, err := hang(r)
				lost <- err
				return resp, err
			case where == "Base":
				panic("transport bug")
			}
			resp, _ := respond(200, "ok")
			return resp, nil
		})
		classify := func(resp *http.Response, err error) hedge.Outcome {
			if resp != nil && armed.Load() {
				panic("classifier bug")
			}
			return hedgehttp.Classify(resp, err)
		}
		tr := &hedgehttp.Transport{Base: base, Inline: inline, Delay: delay, Classify: classify}
		learnTail(t, tr)
		armed.Store(true)
		func() {
			defer func() {
				if _, ok := recover().(*hedge.PanicError); !ok {
					t.Error("RoundTrip did not panic with a *hedge.PanicError")
				}
			}()
			tr.RoundTrip(get(t, "http://upstream.test/"))
		}()
		synctest.Wait()
		select {
		case err := <-lost:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the primary ended with %v, want context.Canceled", err)
			}
		default:
			t.Error("the primary is still waiting for its header")
		}
	})
}

// A request that fails before any attempt runs (a policy hedge.Do
// rejects, a Delay that panics on the primary, a context already done)
// leaves no registration on a long-lived request context: the primary's
// request context, made with the call, is released unused.
func TestFailedRequestRetainsNothing(t *testing.T) {
	for _, tt := range []struct {
		name string
		tr   *hedgehttp.Transport
		ctx  func(*ctxtest.Registry) context.Context
	}{
		{"MaxAttempts over the limit", &hedgehttp.Transport{MaxAttempts: hedge.MaxAttemptsLimit + 1},
			func(r *ctxtest.Registry) context.Context { return r }},
		{"Delay panics", &hedgehttp.Transport{Delay: panickingDelay{}},
			func(r *ctxtest.Registry) context.Context { return r }},
		{"context done", &hedgehttp.Transport{},
			func(r *ctxtest.Registry) context.Context { return doneRegistry{r} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := &ctxtest.Registry{}
			tt.tr.Base = roundTripFunc(func(*http.Request) (*http.Response, error) {
				t.Error("Base called")
				return nil, errors.New("unreachable")
			})
			req, _ := http.NewRequestWithContext(tt.ctx(reg), http.MethodGet, "http://upstream.test/", nil)
			func() {
				defer func() { recover() }()
				if _, err := tt.tr.RoundTrip(req); err == nil {
					t.Error("RoundTrip succeeded")
				}
			}()
			if n := reg.Live(); n != 0 {
				t.Errorf("%d registrations left on the request's context, want 0", n)
			}
		})
	}
}

// doneRegistry is a Registry that is already done.
type doneRegistry struct{ *ctxtest.Registry }

func (doneRegistry) Done() <-chan struct{} { return closedChan }
func (doneRegistry) Err() error            { return context.Canceled }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// panickingDelay panics when asked for a delay, as a Keyed's Key might.
type panickingDelay struct{}

func (panickingDelay) Next(context.Context, int) time.Duration { panic("delay bug") }

// The fast path, a response long before the hedge is due, costs seven
// allocations beside Base's own: hedge.Do's three (its call, its step
// function, its timer), the call, the copy of the request's header, and
// the primary's cancellable request context (two). A request context that
// can be cancelled adds hedge.Do's link to it (two), and a header with
// an entry makes its copy cost two more. Ties cost no allocation but one:
// TieHeader's place in the copy of a header that had no entry (a map's
// first group); the copy of one with entries has room for it, and the
// hook by which the primary hears its start lives in the call. With the
// routes' own delay, hedge.Do arms no timer for an upstream that answers
// at once, as this one does: one allocation fewer, the first attempt sent
// from a goroutine of its own or, with Inline, from the caller's.
func TestFastPathAllocations(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tt := range []struct {
		name        string
		ctx         context.Context
		disableTies bool
		accept      bool // the request has a header entry of its own
		own         bool // the routes' own delay rather than a fixed one
		inline      bool
		want        float64
	}{
		{"background", context.Background(), false, false, false, false, 8},
		{"background/Accept", context.Background(), false, true, false, false, 9},
		{"cancellable", ctx, false, false, false, false, 10},
		{"background/DisableTies", context.Background(), true, false, false, false, 7},
		{"background/Accept/DisableTies", context.Background(), true, true, false, false, 9},
		{"cancellable/DisableTies", ctx, true, false, false, false, 9},
		{"background/routes' own delay", context.Background(), false, false, true, false, 7},
		{"background/Inline", context.Background(), false, false, true, true, 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(tt.ctx, http.MethodGet, "http://upstream.test/", nil)
			if tt.accept {
				req.Header.Set("Accept", "text/plain")
			}
			tr := &hedgehttp.Transport{Base: memory{}, Inline: tt.inline, DisableTies: tt.disableTies}
			if !tt.own {
				tr.Delay = hedge.Fixed(time.Hour)
			}
			send := func(rt http.RoundTripper) func() {
				return func() {
					resp, err := rt.RoundTrip(req)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			send(tr)() // the route and its delay are made once
			base := testing.AllocsPerRun(1000, send(memory{}))
			if got := testing.AllocsPerRun(1000, send(tr)) - base; got > tt.want {
				t.Errorf("%v allocations per request beside Base's %v, want at most %v", got, base, tt.want)
			}
		})
	}
}
