package hedge_test

import (
	"cmp"
	"context"
	"flag"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

var autoLoad = flag.Float64("lab.autoload", 0, "TestAutoJudge: judge an Adaptive of this Load, against oracles of the same budget, and log its misses instead of asserting them; 0 judges Auto")

// autoContender is the production setup as a row of the judge: Auto's
// policy, made afresh for each run; with -lab.autoload, an Adaptive of
// that Load in both fields.
func autoContender() lab.Contender {
	if *autoLoad == 0 {
		return lab.Contender{Name: "Auto", Policy: func() hedge.Policy[int] { return hedge.Auto[int]() }}
	}
	return lab.Contender{Name: "Adaptive", Policy: func() hedge.Policy[int] {
		a := &hedge.Adaptive{Load: *autoLoad}
		return hedge.Policy[int]{Delay: a, Budget: a}
	}}
}

// autoMisses are the verdicts Auto misses with -lab.full on seeds 0 to
// 3: the seeds of each, by its criterion and scenario. TestAutoJudge
// fails on a miss not listed, and, with -lab.full, on one listed that it
// meets. Why they miss:
//
//   - overload queue, overload p99: where started work runs on, every
//     hedge that runs in the overload adds work that a queue which never
//     empties at ρ 1.1 keeps until the overload ends. Even an Auto that
//     sends no hedge from the overload's first call on misses three of
//     the eight, by up to 1.06× (TestOverloadNeedsForesight), and the
//     best fixed plan misses all; Auto sends none after about 30 calls of
//     it. The one where cancelled work stops misses by 0.1 %.
//   - brownout of stragglers where started work runs on, seed 0: the win
//     rate of hedges there sits near the third it asks for, and as calls
//     outlast the delay more often than planned, the key takes the plan
//     for stale and holds its hedges until the plan moves. Seen from the
//     client, it looks as steady heavy-tailed service at ρ 0.9 does, where
//     holding them is what keeps p99 within 1.05× of no hedging: calls ask
//     for hedges twice as often as planned, four hedges in ten win, and
//     about a third of the primaries are slower than the plan's p75 (the
//     two told apart only by the servers' utilisation). Hedging those
//     calls at twice the delay instead meets this one (1.13×) and misses
//     steady stragglers at ρ 0.9 on seed 3 (1.07× no hedging); at three
//     times, a recovery on seed 3 (1.18×).
var autoMisses = map[string][]uint64{
	"overload queue 90/10 ρ0.5, ρ1.1 in block 2, cancel queued only":        {0, 1, 2, 3},
	"overload queue stragglers ρ0.5, ρ1.1 in block 2, cancel queued only":   {0, 1, 2, 3},
	"overload queue 90/10 ρ0.5, ρ1.1 in block 2, cancel running":            {2},
	"overload p99 90/10 ρ0.5, ρ1.1 in block 2, cancel queued only":          {1},
	"overload p99 stragglers ρ0.5, ρ1.1 in block 2, cancel queued only":     {1},
	"brownout stragglers ρ0.5, replica 0 ×5 in block 2, cancel queued only": {0},
}

// TestAutoJudge judges the production setup, Auto, by every target of
// lab.Criteria against the best fixed plan with the same budget, Load
// 0.1, per seed. On seeds 0 to 3 it asserts that it misses exactly the
// verdicts of autoMisses (a quick look judges a few scenarios, against
// coarser oracles, and asserts only that it misses no other); on other
// seeds it logs its misses. Run it with -v to see the table; -lab.full
// judges every scenario, -lab.seed draws others, -lab.autoload judges
// another Load:
//
//	go test -run '^TestAutoJudge$' -v -lab.full -lab.seed 3 .
//	go test -run '^TestAutoJudge$' -v -lab.full -lab.autoload 0.15 .
func TestAutoJudge(t *testing.T) {
	if testing.Short() {
		t.Skip("the judge runs the load lab")
	}
	c := autoContender()
	vs := lab.Judge(t, c, judgeConfig(cmp.Or(*autoLoad, 0.1)))
	t.Log("\n" + lab.VerdictTable(c.Name, vs))
	assert := *autoLoad == 0 && *labSeed <= 3
	misses := 0
	for _, v := range vs {
		listed := slices.Contains(autoMisses[v.Criterion+" "+v.Scenario], *labSeed)
		if !v.Pass {
			misses++
		}
		switch {
		case !v.Pass && !listed && assert:
			t.Errorf("%s, %s: %s against %s, %.3f over %.2f (%s)", v.Criterion, v.Scenario,
				v.Contender, v.Reference, v.Figure, v.Limit, target(v.Criterion))
		case v.Pass && listed && assert && *labFull:
			t.Errorf("%s, %s: met (%.3f, limit %.2f), but autoMisses lists it", v.Criterion, v.Scenario, v.Figure, v.Limit)
		}
	}
	t.Logf("%s missed %d of %d verdicts", c.Name, misses, len(vs))
}

// overloadScenarios are the step overloads the judge runs where started
// work runs on, on seed.
func overloadScenarios(seed uint64) []lab.Load {
	var ls []lab.Load
	for _, up := range []lab.Upstream{lab.FastSlow, lab.Stragglers} {
		ls = append(ls, lab.Load{Service: up, Rho: 0.5, Cancel: lab.CancelQueued, Seed: seed,
			Overload: lab.Overload{Rho: 1.1, Period: lab.Period{From: 3000, To: 4000}}})
	}
	return ls
}

// TestOverloadNeedsForesight shows, with -lab.full, that the judge's
// targets for a step overload where started work runs on (the servers'
// mean queue and p99 while it lasts no longer than without hedging) ask
// for foresight: on seeds 0 to 3, Auto with every hedge refused from the
// overload's first call on, which no policy can tell from the calls
// before it, still has a longer queue than no hedging on some, and the
// best fixed plan with the same budget on every one. The logged table is
// docs/lab.md's.
func TestOverloadNeedsForesight(t *testing.T) {
	if !*labFull {
		t.Skip("with -lab.full: the load lab on four seeds")
	}
	var over, fixedOver int
	for seed := range uint64(4) {
		for _, l := range overloadScenarios(seed) {
			none, err := lab.RunPlan(l, lab.FixedPlan{})
			if err != nil {
				t.Fatal(err)
			}
			grid, err := lab.RunGrid(l, lab.FullGrid)
			if err != nil {
				t.Fatal(err)
			}
			best, _ := lab.Best(grid, 0.1, lab.Whole)
			row := lab.RunLoad(t, l, foresightContender(l.Overload.From))
			// The overload's block and the one after, as the judge measures.
			ratio := func(r lab.LoadRow) float64 {
				return max(r.Blocks[1].Queue/none.Blocks[1].Queue, r.Blocks[2].Queue/none.Blocks[2].Queue)
			}
			q, fq := ratio(row), ratio(best.LoadRow)
			if q > 1 {
				over++
			}
			if fq > 1 {
				fixedOver++
			}
			name := "90/10"
			if l.Service.Name == lab.Stragglers.Name {
				name = "stragglers"
			}
			t.Logf("%-10s seed %d: queue against no hedging: stopped at the onset %.4f, %s %.3f; p99 in it %.4f and %.3f",
				name, seed, q, best.Name, fq,
				float64(row.Blocks[1].P99)/float64(none.Blocks[1].P99), float64(best.Blocks[1].P99)/float64(none.Blocks[1].P99))
		}
	}
	t.Logf("a longer queue than no hedging: %d of 8 stopped at the onset, %d of 8 for the best fixed plan", over, fixedOver)
	if over == 0 || fixedOver < 8 {
		t.Errorf("longer queues than no hedging: %d of 8 stopped at the onset, %d of 8 for the best fixed plan; the targets are within reach", over, fixedOver)
	}
}

// foresightContender is Auto, but every extra attempt asked for once
// call from has arrived is refused.
func foresightContender(from int) lab.Contender {
	return lab.Contender{Name: "Auto, stopped at the onset", Policy: func() hedge.Policy[int] {
		f := &foresight{a: &hedge.Adaptive{}, from: int64(from)}
		return hedge.Policy[int]{Delay: f, Budget: f, MaxAttempts: 3}
	}}
}

// foresight passes every hook on to an Adaptive, but refuses every extra
// attempt once the call numbered from (from 0) has arrived.
type foresight struct {
	a     *hedge.Adaptive
	from  int64
	calls atomic.Int64
}

func (f *foresight) Next(ctx context.Context, k int) time.Duration { return f.a.Next(ctx, k) }

func (f *foresight) Learn(ctx context.Context, primary time.Duration, complete bool) {
	f.a.Learn(ctx, primary, complete)
}

func (f *foresight) Allow(ctx context.Context, k int) bool {
	if k < 1 {
		f.calls.Add(1)
	} else if f.calls.Load() > f.from {
		return false
	}
	return f.a.Allow(ctx, k)
}

func (f *foresight) Done(ctx context.Context, k int, o hedge.Outcome) { f.a.Done(ctx, k, o) }
func (f *foresight) Release(ctx context.Context, k int)               { f.a.Release(ctx, k) }

// TestSharpStepIsLuck shows, with -lab.full, what decides the sharp
// target on 90/10 in the three scenarios where Auto misses it on seeds 5
// and 6 and meets it on 0 to 4 and 7. One call in ten is slow, so one
// hedge of every slow call, what Load 0.1 can pay for, leaves about one
// call in a hundred with two slow attempts: p99 sits on that step. On
// seeds 3 to 6 the best fixed plan in hindsight with the same budget is
// that hedge, after the fast calls end, at about the same spend; the
// draws leave it above the step on some seeds (450–465ms, where Auto is
// within 1.2× of it) and below on others (93–199ms). Auto plans for
// p99.2 (margin in planner.go), which one hedge cannot reach here and
// two cannot pay for; the plans tie there, and about a third of its
// plans take the cheaper, later hedge, which leaves it above the step.
func TestSharpStepIsLuck(t *testing.T) {
	if !*labFull {
		t.Skip("with -lab.full: the load lab on four seeds")
	}
	for _, tt := range []struct {
		rho    float64
		cancel lab.Cancel
		below  []uint64 // the seeds of 3 to 6 whose draws put the plan below the step
	}{
		{0.3, lab.CancelRunning, []uint64{5, 6}},
		{0.3, lab.CancelQueued, []uint64{5}},
		{0.5, lab.CancelRunning, []uint64{5, 6}},
	} {
		for seed := uint64(3); seed <= 6; seed++ {
			l := lab.Load{Service: lab.FastSlow, Rho: tt.rho, Cancel: tt.cancel, Seed: seed}
			grid, err := lab.RunGrid(l, lab.FullGrid)
			if err != nil {
				t.Fatal(err)
			}
			best, ok := lab.Best(grid, 0.1, lab.Whole)
			if !ok {
				t.Fatalf("ρ %v, %v, seed %d: no plan within the budget", tt.rho, tt.cancel, seed)
			}
			t.Logf("ρ %v, %v, seed %d: the best fixed plan, %s: p99 %v, %.3f attempts per call",
				tt.rho, tt.cancel, seed, best.Plan, best.P99, best.Amp)
			if best.Plan.Hedges != 1 || best.Plan.Delay < 40*time.Millisecond || best.Plan.Delay > 200*time.Millisecond {
				t.Errorf("ρ %v, %v, seed %d: the best fixed plan is %s, not one hedge after the fast calls", tt.rho, tt.cancel, seed, best.Plan)
			}
			if below := slices.Contains(tt.below, seed); below != (best.P99 < 250*time.Millisecond) {
				t.Errorf("ρ %v, %v, seed %d: the best fixed plan's p99 is %v: on the other side of the step", tt.rho, tt.cancel, seed, best.P99)
			}
		}
	}
}
