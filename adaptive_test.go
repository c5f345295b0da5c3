package hedge_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// Auto makes a Policy whose Delay and Budget are one fresh Adaptive, and
// leaves every other field zero.
func TestAuto(t *testing.T) {
	p, q := hedge.Auto[int](), hedge.Auto[int]()
	a, ok := p.Delay.(*hedge.Adaptive)
	if !ok || p.Budget != hedge.Budget(a) {
		t.Fatalf("Auto: Delay %T, Budget %T; want one *Adaptive in both", p.Delay, p.Budget)
	}
	if q.Delay == p.Delay {
		t.Error("two Autos share an Adaptive")
	}
	p.Delay, p.Budget = nil, nil
	if p.MaxAttempts != 0 || p.Timeout != 0 || p.Classify != nil || p.Discard != nil || p.Observer != nil || p.Clock != nil {
		t.Errorf("Auto set more than Delay and Budget: %+v", p)
	}
}

// Do reports an Adaptive's bad settings, whether it is the Policy's Delay
// or only its Budget, as ErrInvalidPolicy without calling fn; so is a
// MaxAttempts that would cut its plans.
func TestAdaptiveBadSettings(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tt := range []struct {
		name string
		a    func() *hedge.Adaptive
		max  int
		ok   bool
	}{
		{"zero", func() *hedge.Adaptive { return &hedge.Adaptive{} }, 0, true},
		{"Load 2", func() *hedge.Adaptive { return &hedge.Adaptive{Load: 2} }, 0, true},
		{"MaxAttempts 1", func() *hedge.Adaptive { return &hedge.Adaptive{} }, 1, true},
		{"MaxAttempts 3", func() *hedge.Adaptive { return &hedge.Adaptive{} }, 3, true},
		{"MaxAttempts 2 cuts a plan of two hedges", func() *hedge.Adaptive { return &hedge.Adaptive{} }, 2, false},
		{"negative Load", func() *hedge.Adaptive { return &hedge.Adaptive{Load: -0.1} }, 0, false},
		{"Load above 2", func() *hedge.Adaptive { return &hedge.Adaptive{Load: 2.001} }, 0, false},
		{"NaN Load", func() *hedge.Adaptive { return &hedge.Adaptive{Load: nan} }, 0, false},
		{"infinite Load", func() *hedge.Adaptive { return &hedge.Adaptive{Load: inf} }, 0, false},
		{"negative MaxKeys", func() *hedge.Adaptive { return &hedge.Adaptive{MaxKeys: -1} }, 0, false},
		{"MaxAttempts 2 with MaxHedges 1", func() *hedge.Adaptive { return &hedge.Adaptive{MaxHedges: 1} }, 2, true},
		{"negative MaxHedges", func() *hedge.Adaptive { return &hedge.Adaptive{MaxHedges: -1} }, 0, false},
		{"MaxHedges above 2", func() *hedge.Adaptive { return &hedge.Adaptive{MaxHedges: 3} }, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ran := false
			fn := func(context.Context) (int, error) { ran = true; return 1, nil }
			a := tt.a()
			_, err := hedge.Do(context.Background(), hedge.Policy[int]{Delay: a, Budget: a, MaxAttempts: tt.max}, fn)
			if tt.ok != (err == nil) || (err != nil && (!errors.Is(err, hedge.ErrInvalidPolicy) || ran)) {
				t.Errorf("as Delay and Budget: %v, fn ran: %t", err, ran)
			}
			if tt.max != 0 {
				return // MaxAttempts is the Delay's business
			}
			ran = false
			_, err = hedge.Do(context.Background(), hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Budget: a}, fn)
			if tt.ok != (err == nil) || (err != nil && (!errors.Is(err, hedge.ErrInvalidPolicy) || ran)) {
				t.Errorf("as Budget: %v, fn ran: %t", err, ran)
			}
			if !tt.ok { // its hooks, called directly, never hedge and never panic
				ctx := context.Background()
				a.Learn(ctx, time.Second, true)
				a.Done(ctx, 1, hedge.Accept)
				a.Release(ctx, 1)
				if !a.Allow(ctx, 0) || a.Allow(ctx, 1) || a.Next(ctx, 0) >= 0 || a.Plan(ctx).Delay >= 0 {
					t.Error("bad settings: want the primary granted and no hedge")
				}
			}
		})
	}
}

// Through Do, an Adaptive's Key runs once per call, however many attempts
// and hooks the call has.
func TestAdaptiveLooksTheKeyUpOncePerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lookups atomic.Int64
		a := &hedge.Adaptive{Key: func(ctx context.Context) string { lookups.Add(1); return routeOf(ctx) }}
		p := hedge.Policy[int]{Delay: a, Budget: a, Timeout: time.Minute}
		ctx := context.WithValue(t.Context(), routeCtxKey{}, "/a")
		fast := func(context.Context) (int, error) { return 1, nil }
		slow := func(ctx context.Context) (int, error) { return 1, lab.Wait(ctx, 20*time.Second) }
		for _, fn := range []func(context.Context) (int, error){fast, slow} {
			lookups.Store(0)
			hedge.Do(ctx, p, fn)
			synctest.Wait() // the loser has returned, and with it its Done
			if n := lookups.Load(); n != 1 {
				t.Errorf("Key ran %d times in one call, want 1", n)
			}
		}
	})
}

// settle makes ctx's key of a know the 90/10 upstream: 500 primaries to
// plan on, and 250 that match the plan, after which it may hedge.
func settle(a *hedge.Adaptive, ctx context.Context) {
	for i := range 750 {
		a.Learn(ctx, lab.FastSlow.Latency(i, 0), true)
	}
}

// save makes 1,000 calls of ctx's key that send no hedge: a settled key
// saves all that its bound may hold.
func save(a *hedge.Adaptive, ctx context.Context) {
	for range 1000 {
		a.Allow(ctx, 0)
	}
}

// savedPlan saves as save does and returns the plan of ctx's key, which
// must send hedges.
func savedPlan(t *testing.T, a *hedge.Adaptive, ctx context.Context) hedge.Plan {
	t.Helper()
	save(a, ctx)
	plan := a.Plan(ctx)
	if plan.Hedges == 0 {
		t.Fatalf("plan %+v, want hedges", plan)
	}
	return plan
}

// The bound: a settled key saves Load per call, up to 1,000 calls' worth;
// an extra attempt takes a whole attempt or is refused, and a release
// gives it back. Keys have bounds of their own, up to MaxKeys; keys past
// it share one.
func TestAdaptiveBound(t *testing.T) {
	// A clock that stands still: calls that come all at once are no
	// surge.
	a := &hedge.Adaptive{Key: routeOf, MaxKeys: 2, Clock: clock.NewMock()}
	for _, r := range []string{"/a", "/b", "/c"} {
		settle(a, onRoute(r))
	}
	// hedges makes calls of route, quiet first, and then asking for a hedge
	// each, which wins; it returns how many it granted.
	hedges := func(route string, quiet, asking int) int {
		ctx, granted := onRoute(route), 0
		for range quiet {
			a.Allow(ctx, 0)
		}
		for range asking {
			a.Allow(ctx, 0)
			if a.Allow(ctx, 1) {
				granted++
				a.Done(ctx, 1, hedge.Accept)
			}
		}
		return granted
	}
	// 0.1 per call: the 10th call pays for the first hedge.
	if got := hedges("/a", 0, 200); got != 20 {
		t.Errorf("/a: %d hedges in 200 calls, want 20", got)
	}
	// 1,000 quiet calls save 100, no more: 100 + 19.9.
	if got := hedges("/a", 2000, 200); got != 119 {
		t.Errorf("/a: %d hedges in 200 calls after 2,000 quiet ones, want 119", got)
	}
	ctx := onRoute("/a")
	a.Allow(ctx, 0) // 0.9 left, and 0.1: one attempt
	granted := a.Allow(ctx, 1)
	a.Release(ctx, 1)
	if !granted || !a.Allow(ctx, 1) || a.Allow(ctx, 1) {
		t.Error("/a: a released grant is not granted again")
	}
	// /b has a bound of its own; /c and /d share the overflow's, which
	// /c settled.
	if got := hedges("/b", 10, 1); got != 1 {
		t.Errorf("/b: %d hedges, want 1", got)
	}
	if got := hedges("/c", 0, 100) + hedges("/d", 0, 100); got != 20 {
		t.Errorf("/c and /d past MaxKeys: %d hedges in 200 calls, want 20", got)
	}
}

// A key that does not know its upstream yet saves nothing: a cold key
// cannot burst.
func TestAdaptiveBoundSavesOnlyWhenSettled(t *testing.T) {
	a := &hedge.Adaptive{Clock: clock.NewMock()}
	ctx := context.Background()
	for range 2000 {
		a.Allow(ctx, 0)
	}
	if a.Allow(ctx, 1) {
		t.Error("a key that never learned granted a hedge")
	}
	settle(a, ctx)
	for range 9 {
		a.Allow(ctx, 0)
	}
	if a.Allow(ctx, 1) {
		t.Error("9 calls after settling paid for a hedge")
	}
	a.Allow(ctx, 0)
	if !a.Allow(ctx, 1) {
		t.Error("10 calls after settling did not pay for a hedge")
	}
}

// The bound is exact under contention: 64 goroutines that race to call
// and hedge get exactly what the calls saved.
func TestAdaptiveBoundContention(t *testing.T) {
	for round := range 50 {
		a := &hedge.Adaptive{Clock: clock.NewMock()}
		ctx := context.Background()
		settle(a, ctx)
		var granted atomic.Int64
		budgetRace(budgetRacers, func(int) {
			for range 50 {
				a.Allow(ctx, 0)
				if a.Allow(ctx, 1) {
					granted.Add(1)
					a.Done(ctx, 1, hedge.Accept)
				}
			}
		})
		for range 10 { // what the last calls saved and no hedge took
			if a.Allow(ctx, 1) {
				granted.Add(1)
			}
		}
		// 64 × 50 calls at 0.1: 320 attempts.
		if g := granted.Load(); g != 320 {
			t.Fatalf("round %d: %d granted, want 320", round, g)
		}
	}
}

// A hedge that loses earns nothing: once a key's hedges have lost their
// credit of 10, they go on only as probes, one per hundred calls.
func TestAdaptiveWinRate(t *testing.T) {
	a := &hedge.Adaptive{Load: 1, Clock: clock.NewMock()}
	ctx := context.Background()
	settle(a, ctx)
	granted := 0
	for range 1000 {
		a.Allow(ctx, 0)
		if a.Allow(ctx, 1) {
			granted++
			a.Done(ctx, 1, hedge.Canceled)
		}
	}
	if granted != 10+9 {
		t.Errorf("%d hedges in 1,000 calls, want 19", granted)
	}
}

// A hedge that a server sheds (it fails at once, retryable) is no lost
// race, but a sign that the server has no room: the key schedules no
// hedge until 250 primaries in a row have matched its plan again, and the
// shed hedge's credit comes back, so that one shed hedge after another,
// each after its key settled again, are all granted.
func TestAdaptiveShedHedges(t *testing.T) {
	a := &hedge.Adaptive{Load: 1, Clock: clock.NewMock()}
	ctx := context.Background()
	settle(a, ctx)
	save(a, ctx)
	for i := range 30 { // three times the win rate's credit
		a.Allow(ctx, 0)
		if !a.Allow(ctx, 1) {
			t.Fatalf("shed hedge %d refused", i)
		}
		a.Done(ctx, 1, hedge.Retryable)
		if d := a.Next(ctx, 0); d >= 0 {
			t.Fatalf("after shed hedge %d: Next = %v, want no hedge", i, d)
		}
		learn90(a, 750, 1000, 1)
		if d, plan := a.Next(ctx, 0), a.Plan(ctx); d != plan.Delay || plan.Hedges == 0 {
			t.Fatalf("250 primaries after shed hedge %d: Next = %v, want the plan's %v", i, d, plan.Delay)
		}
	}
}

// A hung upstream opens a key's breaker: its primaries, cut off by the
// deadline, are failures. After 100 of them, OnOpen names the key, while
// another key goes on as before.
func TestAdaptiveBreakerOpensOnAHungUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o opens
		a := &hedge.Adaptive{Key: routeOf, OnOpen: o.onOpen}
		p := hedge.Policy[int]{Delay: a, Budget: a, Timeout: 100 * ms}
		fine := onRoute("/fine")
		hang := func(ctx context.Context) (int, error) { return 0, lab.Wait(ctx, time.Hour) }
		for range 100 {
			if _, err := hedge.Do(context.WithValue(t.Context(), routeCtxKey{}, "/hung"), p, hang); err != context.DeadlineExceeded {
				t.Fatalf("Do: %v, want DeadlineExceeded", err)
			}
			synctest.Wait() // the primary has returned, and told the breaker
		}
		if diff := cmp.Diff([]string{"/hung"}, o.keys); diff != "" {
			t.Errorf("OnOpen calls (-want +got)\n%s", diff)
		}
		// /fine knows its upstream, and the breaker of /hung is not its.
		settle(a, fine)
		for range 10 {
			a.Allow(fine, 0)
		}
		if !a.Allow(fine, 1) {
			t.Error("/fine: a retry refused")
		}
	})
}

// On the 90/10 upstream a bound of 0.3 affords the plan of two hedges,
// which MaxHedges 1 caps at one.
func TestAdaptiveMaxHedges(t *testing.T) {
	for _, tt := range []struct{ max, want int }{{0, 2}, {1, 1}, {2, 2}} {
		a := &hedge.Adaptive{Load: 0.3, MaxHedges: tt.max, Clock: clock.NewMock()}
		learn90(a, 0, 3000, 1)
		if plan := a.Plan(context.Background()); plan.Hedges != tt.want {
			t.Errorf("MaxHedges %d: plan %+v, want %d hedges", tt.max, plan, tt.want)
		}
	}
}

// Through Do on the 90/10 upstream, one call after another: no hedge
// goes out before the first plan (after 250 calls) has held for 250 more.
// A new key plans within 0.8 × Load until its bound has saved up half of
// what it may, then the plan hedges once just past the fast mode (Load
// 0.1 cannot afford two hedges), and the calls spend Load.
func TestAdaptiveLearnsThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.Auto[int]()
		var stats hedge.Stats
		p.Observer = &stats
		calls := func(from, to int) { calls90(t, p, from, to) }
		calls(0, 500)
		if s := stats.Snapshot(); s.Attempts != 500 {
			t.Errorf("the first 500 calls: %d attempts, want no hedge before the plan is known to hold", s.Attempts)
		}
		calls(500, 8000)
		plan := p.Delay.(*hedge.Adaptive).Plan(context.Background())
		if plan.Hedges != 1 || plan.Delay < 45*ms || plan.Delay > 450*ms {
			t.Errorf("after 8,000 calls: plan %+v, want one hedge between the modes", plan)
		}
		stats = hedge.Stats{}
		calls(8000, 10000)
		if s := stats.Snapshot(); s.Amplification() > 1.1 || s.Amplification() < 1.05 || s.WinRate() < 0.6 {
			t.Errorf("calls 8,000 to 10,000: %.3f attempts per call, hedges won %.2f; want 1.05 to 1.1, and most hedges won",
				s.Amplification(), s.WinRate())
		}
	})
}

// calls90 makes calls [from, to) of the 90/10 upstream through p, one
// after another, in a synctest bubble.
func calls90(t *testing.T, p hedge.Policy[int], from, to int) {
	for i := from; i < to; i++ {
		hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			return i, lab.Wait(ctx, lab.FastSlow.Latency(i, hedge.Attempt(ctx)))
		})
		synctest.Wait()
	}
}

// learn90 feeds a the primaries' latencies of calls [from, to) of the
// 90/10 upstream, each times factor.
func learn90(a *hedge.Adaptive, from, to int, factor float64) {
	for i := from; i < to; i++ {
		a.Learn(context.Background(), time.Duration(factor*float64(lab.FastSlow.Latency(i, 0))), true)
	}
}

// When most primaries turn slower than the plan's p75 and stay so, as in
// an overload or after a new build, the key stops hedging at once; after
// 150 such primaries it forgets what it learned, plans again from the 250
// that follow, and hedges once 250 more match that plan. A burst of slow
// calls that passes holds hedges back until 250 primaries match the plan
// again, and forgets nothing.
func TestAdaptiveReplansWhenTheUpstreamChanges(t *testing.T) {
	ctx := context.Background()
	a := &hedge.Adaptive{Clock: clock.NewMock()}
	learn90(a, 0, 1000, 1)
	save(a, ctx)
	before := a.Plan(ctx)
	if before.Hedges != 1 || a.Next(ctx, 0) != before.Delay {
		t.Fatalf("after 1,000 primaries: plan %+v, Next %v; want one hedge", before, a.Next(ctx, 0))
	}

	learn90(a, 1000, 1080, 3)
	if d := a.Next(ctx, 0); d >= 0 {
		t.Errorf("after 80 primaries three times slower: Next = %v, want no hedge", d)
	}
	learn90(a, 1080, 1300, 1)
	if d := a.Next(ctx, 0); d >= 0 {
		t.Errorf("220 primaries after the burst: Next = %v, want no hedge yet", d)
	}
	learn90(a, 1300, 1400, 1)
	if p := a.Plan(ctx); a.Next(ctx, 0) != p.Delay || p.Hedges != 1 {
		t.Errorf("320 primaries after the burst: Next = %v, plan %+v; want it to hedge as planned", a.Next(ctx, 0), p)
	}

	learn90(a, 1400, 1700, 3) // slower for good
	if p := a.Plan(ctx); p.Hedges != 0 {
		t.Errorf("300 primaries into the change: plan %+v, want none while it learns afresh", p)
	}
	learn90(a, 1700, 1950, 3)
	after := a.Plan(ctx)
	if after.Hedges < 1 || after.Delay < 2*before.Delay || a.Next(ctx, 0) >= 0 {
		t.Errorf("550 primaries into the change: plan %+v, Next %v; want hedges about three times later than %v, not sent yet",
			after, a.Next(ctx, 0), before.Delay)
	}
	learn90(a, 1950, 2200, 3)
	save(a, ctx) // what it saved went with what it forgot
	if d := a.Next(ctx, 0); d != a.Plan(ctx).Delay {
		t.Errorf("800 primaries into the change: Next = %v, want the new plan's %v", d, a.Plan(ctx).Delay)
	}
}

// A key that forgets because its calls turned faster, as when a brownout
// or an overload has passed, keeps 50 calls' worth of what it saved: five
// hedges at Load 0.1. One whose calls turned slower keeps nothing, until
// they turn faster again: then it keeps 50 calls' worth of what it had
// set aside.
func TestAdaptiveForgetKeepsLittleWhenFaster(t *testing.T) {
	for _, tc := range []struct {
		name    string
		factors []float64 // of 300 primaries each
		want    int
	}{
		{"faster", []float64{0.05}, 5},
		{"slower", []float64{3}, 0},
		{"slower, then faster", []float64{3, 3, 0.1}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &hedge.Adaptive{Clock: clock.NewMock()}
			ctx := context.Background()
			learn90(a, 0, 1000, 1)
			savedPlan(t, a, ctx) // a full bound: 100 hedges' worth
			for i, f := range tc.factors {
				learn90(a, 1000+300*i, 1300+300*i, f)
			}
			if p := a.Plan(ctx); p.Hedges != 0 {
				t.Fatalf("primaries %v times as long: plan %+v, want none while it learns afresh", tc.factors, p)
			}
			granted := 0
			for a.Allow(ctx, 1) && granted < 100 {
				a.Done(ctx, 1, hedge.Accept)
				granted++
			}
			if granted != tc.want {
				t.Errorf("after it forgot: %d hedges granted, want %d", granted, tc.want)
			}
		})
	}
}
