package hedge_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// routeCtxKey keys a call's context by its route: the breaker's tests and
// examples give every route its own breaker. An HTTP client would key by
// hedgehttp.Route, a gRPC client by the full method.
type routeCtxKey struct{}

func onRoute(path string) context.Context {
	return context.WithValue(context.Background(), routeCtxKey{}, path)
}

func routeOf(ctx context.Context) string { s, _ := ctx.Value(routeCtxKey{}).(string); return s }

// opens counts OnOpen calls per key.
type opens struct {
	mu   sync.Mutex
	keys []string
}

func (o *opens) onOpen(key string) {
	o.mu.Lock()
	o.keys = append(o.keys, key)
	o.mu.Unlock()
}

func (o *opens) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.keys)
}

// Each case reports a sequence of outcomes to a fresh breaker: 'a', 'r',
// 't' and 'c' are a primary's Accept, Retryable, Terminal and Canceled;
// 'H' is a hedge's Retryable; '.' lets a second pass. It must open exactly
// at the outcome the rule names, and nowhere else.
func TestBreakerOpens(t *testing.T) {
	tests := []struct {
		name      string
		samples   int
		threshold float64
		outcomes  string
		want      int // the index of the outcome that opens it; -1: none
	}{
		{"every primary fails from the start: the ring fills first", 10, 0.5,
			"rrrrrrrrrr", 9},
		{"a ring of successes, then every primary fails: at half of the ring", 10, 0.5,
			"aaaaaaaaaa" + "rrrrr", 14},
		{"a step from 0% to 60% failures: within the ring's 10 samples", 10, 0.5,
			"aaaaaaaaaa" + "rrararrara", 16},
		{"40% failures never open it", 10, 0.5,
			"rraaa" + "rraaa" + "rraaa" + "rraaa" + "rraaa" + "rraaa", -1},
		{"Terminal is a failure", 10, 0.5,
			"aaaaaaaaaa" + "ttttt", 14},
		{"cancelled primaries and failed hedges do not count", 10, 0.5,
			"rrrrrrrrr" + "ccccc" + "HHHHH" + "r", 19},
		{"outcomes older than the window do not count", 10, 0.5,
			"rrrrrrrrr" + "..........." + "r" + "rrrrrrrrr", 29},
		{"an outcome exactly a window old still counts", 10, 0.5,
			"rrrrrrrrr" + ".........." + "r", 19},
		{"threshold 1: every one of the ring must fail", 10, 1,
			"aaaaaaaaaa" + "rrrrrrrrr" + "r", 19},
		{"the threshold is used to three decimals: 0.3339 opens at 4 of 12", 12, 0.3339,
			"aaaaaaaaaaaa" + "rrrr", 15},
		{"one sample", 1, 0.5,
			"aaar", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got []int
				i := 0
				b := &hedge.Breaker{
					Samples: tt.samples, Threshold: tt.threshold, Window: 10 * time.Second,
					OnOpen: func(string) { got = append(got, i) },
				}
				ctx := context.Background()
				for ; i < len(tt.outcomes); i++ {
					switch tt.outcomes[i] {
					case 'a':
						b.Done(ctx, 0, hedge.Accept)
					case 'r':
						b.Done(ctx, 0, hedge.Retryable)
					case 't':
						b.Done(ctx, 0, hedge.Terminal)
					case 'c':
						b.Done(ctx, 0, hedge.Canceled)
					case 'H':
						b.Done(ctx, 1, hedge.Retryable)
					case '.':
						time.Sleep(time.Second)
					}
					if open := !b.Allow(ctx, 1); open != (len(got) > 0) {
						t.Fatalf("after outcome %d: hedge refused %t, OnOpen calls %v", i, open, got)
					}
				}
				var want []int
				if tt.want >= 0 {
					want = []int{tt.want}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("outcomes that opened it (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// While open, the breaker refuses hedges only: every primary is granted,
// and neither primaries' nor hedges' outcomes change its course. It turns
// half-open exactly when the cooldown is over, by the Clock it was given.
func TestBreakerOpenRefusesOnlyHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // Mock.Add yields with a sleep
		mock := clock.NewMock()
		var o opens
		b := &hedge.Breaker{Samples: 4, Cooldown: 5 * time.Second, Clock: mock, OnOpen: o.onOpen}
		ctx := context.Background()
		for range 4 {
			b.Done(ctx, 0, hedge.Retryable)
		}
		var primaries, hedges int
		for range 100 {
			if b.Allow(ctx, 0) {
				primaries++
			}
			if b.Allow(ctx, 1) {
				hedges++
			}
			b.Done(ctx, 0, hedge.Accept)
			b.Done(ctx, 0, hedge.Retryable)
			b.Done(ctx, 1, hedge.Accept)
		}
		if primaries != 100 || hedges != 0 || o.count() != 1 {
			t.Errorf("while open: %d of 100 primaries and %d of 100 hedges granted, %d openings; want 100, 0, 1", primaries, hedges, o.count())
		}
		mock.Add(5*time.Second - 1)
		if s, granted := b.State(ctx), b.Allow(ctx, 1); s != hedge.BreakerOpen || granted {
			t.Errorf("1ns before the cooldown's end: %v, a hedge granted: %t; want open and refused", s, granted)
		}
		mock.Add(1)
		if s := b.State(ctx); s != hedge.BreakerHalfOpen {
			t.Errorf("at the cooldown's end: %v, want half-open", s)
		}
		if !b.Allow(ctx, 1) {
			t.Error("at the cooldown's end, the trial hedge was refused")
		}
	})
}

// A half-open breaker grants Trials trial hedges at a time; a cancelled or
// released trial frees its slot, and when Trials trials have been
// accepted it closes with a fresh ring, so that the failures that opened
// it do not open it again.
func TestBreakerHalfOpenCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o opens
		b := &hedge.Breaker{Samples: 4, Cooldown: time.Second, Trials: 3, OnOpen: o.onOpen}
		ctx := context.Background()
		for range 4 {
			b.Done(ctx, 0, hedge.Retryable)
		}
		time.Sleep(time.Second)
		var got []bool
		ask := func() { got = append(got, b.Allow(ctx, 1)) }
		ask()
		ask()
		ask()
		ask()                           // refused: three trials out
		b.Done(ctx, 1, hedge.Accept)    // one passed
		ask()                           // refused: two out, one passed
		b.Done(ctx, 1, hedge.Canceled)  // a loser: its slot is free
		ask()                           // granted
		b.Release(ctx, 1)               // never started: its slot is free
		b.Done(ctx, 0, hedge.Retryable) // a primary: does not count while half-open
		ask()                           // granted
		b.Done(ctx, 1, hedge.Accept)
		if s := b.State(ctx); s != hedge.BreakerHalfOpen {
			t.Errorf("after two accepted trials of three: %v, want half-open", s)
		}
		b.Done(ctx, 1, hedge.Accept)
		if s := b.State(ctx); s != hedge.BreakerClosed {
			t.Errorf("after three accepted trials: %v, want closed", s)
		}
		ask() // closed: granted
		ask()
		if diff := cmp.Diff([]bool{true, true, true, false, false, true, true, true, true}, got); diff != "" {
			t.Errorf("hedges granted (-want +got)\n%s", diff)
		}
		// A fresh ring: three failures do not open it, the fourth does.
		for range 3 {
			b.Done(ctx, 0, hedge.Retryable)
		}
		if o.count() != 1 || !b.Allow(ctx, 1) {
			t.Errorf("3 failures after closing: %d openings, want still 1 and closed", o.count())
		}
		b.Done(ctx, 0, hedge.Retryable)
		if o.count() != 2 || b.Allow(ctx, 1) {
			t.Errorf("4 failures after closing: %d openings, want 2 and open", o.count())
		}
	})
}

// A failed trial opens the breaker again, calls OnOpen once more, and
// restarts the cooldown from the failure. Outcomes of hedges that were
// granted before it opened, and return while no trial is out, are not
// taken for trials.
func TestBreakerFailedTrialReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o opens
		b := &hedge.Breaker{Key: routeOf, Samples: 2, Cooldown: 4 * time.Second, Trials: 2, OnOpen: o.onOpen}
		ctx := onRoute("/a")
		start := time.Now()
		if !b.Allow(ctx, 1) { // a hedge granted while closed, still out
			t.Fatal("closed breaker refused a hedge")
		}
		b.Done(ctx, 0, hedge.Retryable)
		b.Done(ctx, 0, hedge.Terminal)
		time.Sleep(4 * time.Second)
		if !b.Allow(ctx, 1) {
			t.Fatal("the first trial was refused")
		}
		b.Done(ctx, 1, hedge.Accept)    // the first trial passes
		b.Done(ctx, 1, hedge.Retryable) // the old hedge, while no trial is out: ignored
		if s := b.State(ctx); s != hedge.BreakerHalfOpen {
			t.Fatalf("the old hedge's failure was taken for a trial's: %v, want half-open", s)
		}
		if !b.Allow(ctx, 1) || b.Allow(ctx, 1) {
			t.Fatal("want the second trial granted, and no third")
		}
		time.Sleep(time.Second)
		b.Done(ctx, 1, hedge.Retryable) // the second trial fails: open again
		b.Done(ctx, 1, hedge.Accept)    // a stray outcome while open: ignored
		if diff := cmp.Diff([]string{"/a", "/a"}, o.keys); diff != "" {
			t.Errorf("OnOpen calls (-want +got)\n%s", diff)
		}
		for _, at := range []time.Duration{9*time.Second - 1, 9 * time.Second} {
			time.Sleep(time.Until(start.Add(at)))
			if got, want := b.State(ctx), map[bool]hedge.BreakerState{false: hedge.BreakerOpen, true: hedge.BreakerHalfOpen}[at == 9*time.Second]; got != want {
				t.Errorf("at %v: %v, want %v (reopened at 5s for 4s)", at, got, want)
			}
		}
		if !b.Allow(ctx, 1) {
			t.Error("the second cooldown is over and the trial was refused")
		}
	})
}

// Keys have breakers of their own, up to MaxKeys; keys past it share the
// overflow breaker.
func TestBreakerKeys(t *testing.T) {
	var o opens
	b := &hedge.Breaker{Key: routeOf, Samples: 2, MaxKeys: 2, OnOpen: o.onOpen}
	fail := func(path string) {
		b.Done(onRoute(path), 0, hedge.Retryable)
		b.Done(onRoute(path), 0, hedge.Retryable)
	}
	hedges := func() map[string]bool {
		m := map[string]bool{}
		for _, p := range []string{"/a", "/b", "/c", "/d"} {
			m[p] = b.Allow(onRoute(p), 1)
		}
		return m
	}
	if diff := cmp.Diff(map[string]bool{"/a": true, "/b": true, "/c": true, "/d": true}, hedges()); diff != "" {
		t.Errorf("before any failure (-want +got)\n%s", diff)
	}
	fail("/a")
	if diff := cmp.Diff(map[string]bool{"/a": false, "/b": true, "/c": true, "/d": true}, hedges()); diff != "" {
		t.Errorf("/a failing (-want +got)\n%s", diff)
	}
	fail("/d") // /c and /d came third and fourth: they share one breaker
	if diff := cmp.Diff(map[string]bool{"/a": false, "/b": true, "/c": false, "/d": false}, hedges()); diff != "" {
		t.Errorf("/a and /d failing (-want +got)\n%s", diff)
	}
	if s := b.State(onRoute("/e")); s != hedge.BreakerOpen {
		t.Errorf("a new key past MaxKeys: %v, want the overflow breaker's state, open", s)
	}
	if diff := cmp.Diff([]string{"/a", "/d"}, o.keys); diff != "" {
		t.Errorf("OnOpen calls (-want +got)\n%s", diff)
	}

	one := &hedge.Breaker{Samples: 2} // no Key: one breaker
	one.Done(onRoute("/a"), 0, hedge.Retryable)
	one.Done(onRoute("/b"), 0, hedge.Retryable)
	if one.Allow(onRoute("/c"), 1) {
		t.Error("without Key, two failures on two paths did not open the one breaker")
	}
}

// Exactly one OnOpen per opening, however many goroutines report the
// failure that opens it, and exactly Trials trials, however many ask.
func TestBudgetContentionBreaker(t *testing.T) {
	t.Run("64 goroutines fail at once: one opening", func(t *testing.T) {
		for round := range 200 {
			var o opens
			b := &hedge.Breaker{Samples: budgetRacers / 2, OnOpen: o.onOpen}
			budgetRace(budgetRacers, func(int) { b.Done(context.Background(), 0, hedge.Retryable) })
			if n := o.count(); n != 1 || b.Allow(context.Background(), 1) {
				t.Fatalf("round %d: %d OnOpen calls, want 1 and the breaker open", round, n)
			}
		}
	})
	t.Run("64 goroutines race for 8 trials, then fail at once: one reopening", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			for round := range 200 {
				var o opens
				b := &hedge.Breaker{Samples: 1, Cooldown: time.Second, Trials: 8, OnOpen: o.onOpen}
				b.Done(context.Background(), 0, hedge.Retryable)
				time.Sleep(time.Second)
				var granted atomic.Int64
				budgetRace(budgetRacers, func(int) {
					if b.Allow(context.Background(), 1) {
						granted.Add(1)
					}
				})
				if g := granted.Load(); g != 8 {
					t.Fatalf("round %d: %d trials granted, want 8", round, g)
				}
				budgetRace(8, func(int) { b.Done(context.Background(), 1, hedge.Retryable) })
				if n := o.count(); n != 2 || b.State(context.Background()) != hedge.BreakerOpen {
					t.Fatalf("round %d: %d OnOpen calls after 8 failed trials, want 2 and the breaker open", round, n)
				}
			}
		})
	})
	t.Run("64 trials accepted at once: closed, with a fresh ring", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var o opens
			b := &hedge.Breaker{Samples: budgetRacers, Cooldown: time.Second, Trials: budgetRacers, OnOpen: o.onOpen}
			budgetRace(budgetRacers, func(int) { b.Done(context.Background(), 0, hedge.Retryable) })
			time.Sleep(time.Second)
			budgetRace(budgetRacers, func(int) {
				if b.Allow(context.Background(), 1) {
					b.Done(context.Background(), 1, hedge.Accept)
				}
			})
			if s := b.State(context.Background()); s != hedge.BreakerClosed {
				t.Fatalf("after 64 accepted trials: %v, want closed", s)
			}
			budgetRace(budgetRacers-1, func(int) { b.Done(context.Background(), 0, hedge.Retryable) })
			if o.count() != 1 {
				t.Fatalf("63 failures after closing opened it: the ring was not fresh")
			}
		})
	})
}

// The closed breaker's path, taken by every call, allocates nothing.
func TestBreakerAllocations(t *testing.T) {
	b := &hedge.Breaker{Key: routeOf}
	ctx := onRoute("/a")
	n := testing.AllocsPerRun(1000, func() {
		b.Allow(ctx, 0)
		if b.Allow(ctx, 1) {
			b.Done(ctx, 1, hedge.Canceled)
		}
		b.Done(ctx, 0, hedge.Accept)
	})
	if n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}

// Through the real Do: one route's attempts start failing, so after a few
// calls its hedges stop while the other route keeps hedging; once the
// cooldown is over and the route has healed, a trial hedge closes its
// breaker and it hedges again.
func TestBreakerThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o opens
		b := &hedge.Breaker{Key: routeOf, Samples: 4, Cooldown: time.Second, OnOpen: o.onOpen}
		type call struct {
			Attempts, Refusals int
			Took               time.Duration
		}
		var failing, flakySlow atomic.Bool
		// /flaky answers in 5ms, or fails in 5ms while failing is set.
		// /slow's primary answers in 50ms, and so does /flaky's while
		// flakySlow is set; hedges answer in 5ms.
		fn := func(ctx context.Context) (int, error) {
			slow := hedge.Attempt(ctx) == 0 && (routeOf(ctx) == "/slow" || flakySlow.Load())
			d := 5 * ms
			if slow {
				d = 50 * ms
			}
			if err := lab.Wait(ctx, d); err != nil {
				return 0, err
			}
			if routeOf(ctx) == "/flaky" && failing.Load() {
				return 0, errBusy
			}
			return hedge.Attempt(ctx), nil
		}
		do := func(path string) call {
			var r hedge.Report
			p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: b, Observer: observerFunc(func(got hedge.Report) { r = got })}
			start := time.Now()
			// routeOf reads the path from the caller's ctx, which Do hands
			// to the budget; attempts' contexts derive from it.
			hedge.Do(context.WithValue(t.Context(), routeCtxKey{}, path), p, fn)
			took := time.Since(start)
			synctest.Wait() // the loser has returned, and with it its Done
			return call{r.Attempts, r.BudgetRefusals, took}
		}
		var flaky, slow []call
		for range 4 {
			flaky, slow = append(flaky, do("/flaky")), append(slow, do("/slow"))
		}
		failing.Store(true)
		for range 4 {
			flaky, slow = append(flaky, do("/flaky")), append(slow, do("/slow"))
		}
		healthy, hedged := call{1, 0, 5 * ms}, call{2, 0, 15 * ms}
		retried, refused := call{2, 0, 10 * ms}, call{1, 1, 5 * ms}
		// The ring of 4 holds 4 successes; the second failure makes 2 of
		// 4, and opens it before that call asks for its retry.
		if diff := cmp.Diff([]call{healthy, healthy, healthy, healthy, retried, refused, refused, refused}, flaky); diff != "" {
			t.Errorf("/flaky (-want +got)\n%s", diff)
		}
		if diff := cmp.Diff([]call{hedged, hedged, hedged, hedged, hedged, hedged, hedged, hedged}, slow); diff != "" {
			t.Errorf("/slow (-want +got)\n%s", diff)
		}
		if diff := cmp.Diff([]string{"/flaky"}, o.keys); diff != "" {
			t.Errorf("OnOpen calls (-want +got)\n%s", diff)
		}

		// The route heals but its primaries turn slow. After the cooldown,
		// the first hedge is the trial: it wins, and its answer closes the
		// breaker. /slow's hedges are no trials of /flaky's.
		time.Sleep(time.Second)
		failing.Store(false)
		flakySlow.Store(true)
		if got := do("/slow"); got != hedged {
			t.Errorf("/slow after the cooldown: %+v, want %+v", got, hedged)
		}
		if s := b.State(onRoute("/flaky")); s != hedge.BreakerHalfOpen {
			t.Fatalf("after the cooldown: %v, want half-open", s)
		}
		if got := do("/flaky"); got != hedged {
			t.Errorf("/flaky's trial: %+v, want %+v", got, hedged)
		}
		if s := b.State(onRoute("/flaky")); s != hedge.BreakerClosed {
			t.Errorf("after the trial won: %v, want closed", s)
		}
		if got := do("/flaky"); got != hedged {
			t.Errorf("/flaky, closed again: %+v, want %+v", got, hedged)
		}
	})
}
