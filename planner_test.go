package hedge_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// draw9010 returns n latencies: 90 % uniform in 20–45ms, 10 % in
// 450–600ms.
func draw9010(n int, seed uint64) []time.Duration {
	r := rand.New(rand.NewPCG(seed, 9010))
	out := make([]time.Duration, n)
	for i := range out {
		if r.Float64() < 0.9 {
			out[i] = 20*ms + time.Duration(r.Int64N(int64(25*ms)))
		} else {
			out[i] = 450*ms + time.Duration(r.Int64N(int64(150*ms)))
		}
	}
	return out
}

func TestPlannerFindsTwoHedges(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Planner{Load: 0.15, Window: 4000}
	for _, d := range draw9010(4000, 1) {
		p.Learn(ctx, d, true)
	}
	plan := p.Plan()
	t.Logf("plan: %+v", plan)
	if plan.Hedges != 2 || plan.Delay < 40*ms || plan.Delay > 60*ms {
		t.Errorf("plan %+v: want two hedges about 45ms apart", plan)
	}
	if plan.Latency > 130*ms || plan.Load > 0.15 {
		t.Errorf("plan %+v: want p99 near 110ms within 15%% extra load", plan)
	}
	if p.Next(ctx, 0) != plan.Delay || p.Next(ctx, 1) != plan.Delay || p.Next(ctx, 2) != -1 {
		t.Errorf("Next does not follow the plan %+v", plan)
	}
}

// The Planner counts the attempts Do starts: a call adds Load to what its
// plans may spend, an extra attempt spends one. With Load 0.1 it starts
// 0.2 × 0.1 × 1,000 = 20 attempts ahead, and each call that hedges
// spends 0.9 more. When less than one attempt is left, it schedules no
// hedge until calls have paid for one.
// A Keyed of Planners counts each key's attempts the same way.
func TestPlannerSpendsWhatItPlans(t *testing.T) {
	newPlanner := func(string) hedge.Delay { return &hedge.Planner{Load: 0.1, Initial: 10 * ms} }
	for name, delay := range map[string]func() hedge.Delay{
		"Planner": func() hedge.Delay { return newPlanner("") },
		"Keyed":   func() hedge.Delay { return &hedge.Keyed{New: newPlanner} },
	} {
		t.Run(name, func(t *testing.T) { plannerSpends(t, delay()) })
	}
}

func plannerSpends(t *testing.T, delay hedge.Delay) {
	synctest.Test(t, func(t *testing.T) {
		var got []int
		p := hedge.Policy[int]{
			Delay: delay, Timeout: 50 * ms,
			Observer: observerFunc(func(r hedge.Report) { got = append(got, r.Attempts) }),
		}
		for range 31 {
			hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				if hedge.Attempt(ctx) == 0 {
					<-ctx.Done() // a slow primary: every call wants its hedge
					return 0, ctx.Err()
				}
				return 1, nil
			})
		}
		// The first call finds the credit full and spends 1; the next 21
		// spend 0.9 each, leaving 0.1. The 23rd call's deposit makes 0.2:
		// no hedge, nor for the seven after it, until the 31st call's
		// deposit makes 1.
		want := make([]int, 31)
		for i := range want {
			want[i] = 2
			if i >= 22 && i < 30 {
				want[i] = 1
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("attempts of 31 calls (-want +got):\n%s", diff)
		}
	})
}

// With too little budget for two hedges, one hedge cannot move p99 off the
// slow mode, and the planner says so.
func TestPlannerWithinATightBudget(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Planner{Load: 0.05, Window: 4000}
	for _, d := range draw9010(4000, 2) {
		p.Learn(ctx, d, true)
	}
	plan := p.Plan()
	t.Logf("plan: %+v", plan)
	if plan.Load > 0.05 || plan.Latency < 400*ms {
		t.Errorf("plan %+v: want at most 5%% extra load and p99 left in the slow mode", plan)
	}
}

// Learning from primaries that lost (lower bounds) as well as from those
// that answered, the planner keeps its plan while hedging.
func TestPlannerLearnsThroughCensoring(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Planner{Load: 0.15, Window: 2000}
	for _, d := range draw9010(2000, 3) { // warm-up: no hedging, every latency seen
		p.Learn(ctx, d, true)
	}
	first := p.Plan()
	// Now hedged: a primary slower than the plan's delay loses to a
	// hedge about 30ms after it, and only that lower bound is seen.
	for _, d := range draw9010(8000, 4) {
		plan := p.Plan()
		if cut := plan.Delay + 30*ms; plan.Hedges > 0 && d > cut {
			p.Learn(ctx, cut, false)
		} else {
			p.Learn(ctx, d, true)
		}
	}
	last := p.Plan()
	t.Logf("plans: first %+v, last %+v", first, last)
	if last.Hedges != 2 || math.Abs(float64(last.Delay-first.Delay)) > float64(10*ms) {
		t.Errorf("plan drifted from %+v to %+v", first, last)
	}
}

func TestPlannerBadInput(t *testing.T) {
	for _, p := range []*hedge.Planner{
		{Target: 1}, {Target: math.NaN()}, {Load: -1}, {Load: 3}, {MaxHedges: -1},
		{MaxHedges: hedge.MaxAttemptsLimit}, {Window: 1}, {Floor: time.Second, Ceiling: ms},
	} {
		_, err := hedge.Do(context.Background(), hedge.Policy[int]{Delay: p}, func(context.Context) (int, error) {
			t.Fatal("fn called")
			return 0, nil
		})
		if !errors.Is(err, hedge.ErrInvalidPolicy) {
			t.Errorf("%+v: Do = %v, want ErrInvalidPolicy", p, err)
		}
	}
}

// When every latency triples, the plan made for the old upstream would
// hedge nearly every call twice, until the next plans. The planner counts
// what it spends, so even the first window after the slowdown stays
// within 1.2 × Load (it ran at 1.96 attempts per call before it counted),
// and it replans from what it sees.
func TestPlannerStaysWithinBudgetWhenTheUpstreamSlows(t *testing.T) {
	const window, before, after = 1000, 3000, 5000
	synctest.Test(t, func(t *testing.T) {
		planner := &hedge.Planner{Load: 0.15, Window: window}
		attempts := make([]int, 0, before+after)
		p := hedge.Policy[int]{Delay: planner, MaxAttempts: 3,
			Observer: observerFunc(func(r hedge.Report) { attempts = append(attempts, r.Attempts) })}
		for i := range before + after {
			slow := time.Duration(1)
			if i >= before {
				slow = 3
			}
			hedge.Do(t.Context(), p, fastSlowCall(i, slow))
		}
		amp := func(from, to int) float64 {
			n := 0
			for _, a := range attempts[from:to] {
				n += a
			}
			return float64(n) / float64(to-from)
		}
		t.Logf("amplification: before %.3f, first window after %.3f, from the third window on %.3f; plan %+v",
			amp(before-window, before), amp(before, before+window), amp(before+2*window, before+after), planner.Plan())
		if a := amp(before, before+window); a > 1+1.2*0.15 {
			t.Errorf("amplification %.3f in the first window after the slowdown, want at most 1.18", a)
		}
		if a := amp(before+2*window, before+after); a > 1.15+0.02 {
			t.Errorf("amplification %.3f two windows after the slowdown, budget 1.15", a)
		}
		if plan := planner.Plan(); plan.Delay < 3*40*ms {
			t.Errorf("plan %+v did not follow the slowdown", plan)
		}
	})
}

// What the planner predicts for a plan is what the real Do does with it:
// replaying the plan as a fixed delay through Do in virtual time gives the
// hedge rate, win rate and load it expected.
func TestPlannerPredictsDo(t *testing.T) {
	ctx := context.Background()
	planner := &hedge.Planner{Load: 0.15, Window: 5000}
	for i := range 5000 {
		planner.Learn(ctx, lab.FastSlow.Latency(i, 0), true)
	}
	for _, plan := range []hedge.Plan{planner.Replan(), planner.Curve(1)[bucketNear(planner.Curve(1), 60*ms)]} {
		synctest.Test(t, func(t *testing.T) {
			var stats hedge.Stats
			p := hedge.Policy[int]{Delay: hedge.Fixed(plan.Delay), MaxAttempts: 1 + plan.Hedges, Observer: &stats}
			for i := 5000; i < 10000; i++ {
				hedge.Do(t.Context(), p, fastSlowCall(i, 1))
			}
			s := stats.Snapshot()
			got := [3]float64{s.Amplification() - 1, s.HedgeRate(), s.WinRate()}
			want := [3]float64{plan.Load, plan.HedgeRate, plan.WinRate}
			for i, name := range []string{"load", "hedge rate", "win rate"} {
				if math.Abs(got[i]-want[i]) > 0.02 {
					t.Errorf("%d hedges every %v: %s %.3f through Do, planner expected %.3f", plan.Hedges, plan.Delay, name, got[i], want[i])
				}
			}
		})
	}
}

// bucketNear returns the index of the plan in curve whose delay is nearest d.
func bucketNear(curve []hedge.Plan, d time.Duration) int {
	best := 0
	for i, p := range curve {
		if (p.Delay - d).Abs() < (curve[best].Delay - d).Abs() {
			best = i
		}
	}
	return best
}

func TestPlannerCurve(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Planner{Floor: 10 * ms, Ceiling: time.Second}
	if p.Curve(1) != nil && len(p.Curve(1)) > 0 && p.Curve(0) != nil {
		t.Error("Curve(0) should be empty")
	}
	for _, d := range draw9010(4000, 5) {
		p.Learn(ctx, d, true)
	}
	curve := p.Curve(1)
	if curve[0].Delay != 10*ms || curve[len(curve)-1].Delay != time.Second {
		t.Errorf("curve spans %v to %v, want Floor to Ceiling", curve[0].Delay, curve[len(curve)-1].Delay)
	}
	for i := 1; i < len(curve); i++ {
		if curve[i].Load > curve[i-1].Load+1e-9 {
			t.Fatalf("load rises with the delay: %+v then %+v", curve[i-1], curve[i])
		}
	}
	// At 50ms the hedged calls are the 10 % slow ones; a hedge loses only
	// when it is slow too and the primary answers first (about 70 % of
	// those): a win rate near 0.9 + 0.1 × 0.3.
	at50 := curve[bucketNear(curve, 50*ms)]
	if math.Abs(at50.HedgeRate-0.1) > 0.02 || math.Abs(at50.WinRate-0.93) > 0.02 {
		t.Errorf("one hedge at 50ms: %+v, want hedge rate 0.1 and win rate 0.93", at50)
	}
}

// fastSlowCall is call i to the 90/10 upstream, every latency scaled by
// scale, each attempt drawing its own.
func fastSlowCall(i int, scale time.Duration) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		if err := lab.Wait(ctx, scale*lab.FastSlow.Latency(i, hedge.Attempt(ctx))); err != nil {
			return 0, err
		}
		return i, nil
	}
}
