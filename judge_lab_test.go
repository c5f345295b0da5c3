package hedge_test

import (
	"slices"
	"testing"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// The judge of a default policy: lab.Judge runs a contender through the
// load lab's scenarios (90/10, straggling and heavy-tailed service; a
// brownout of one replica, a step overload, a shift of the whole
// distribution; slowness that hedges cannot beat; servers that shed) and
// checks each target of a default, per seed, against the best fixed plan
// with the same budget, run on the same draws through the same queues.
// Run with -v to see the verdicts; -lab.full judges every scenario in
// both cancellation modes on the oracle's whole grid (about two minutes
// on two cores, and more than the default ten under -race on a busy
// machine), and -lab.seed draws other arrivals, routes and service times:
//
//	go test -run '^TestDefaultJudge$' -v -lab.full -timeout 1h .
//	go test -run '^TestDefaultJudge$' -v -lab.full -timeout 1h -lab.seed 3 .
//
// A new default is judged by one call of judgeDefault, which fails the
// test once for each target it misses.

// judgeConfig is the judge's setting for a contender allowed budget extra
// attempts per call, on the lab's flags.
func judgeConfig(budget float64) lab.JudgeConfig {
	return lab.JudgeConfig{Budget: budget, Seed: *labSeed, Full: *labFull}
}

// judgeDefault judges c, a contender for the default policy allowed
// budget extra attempts per call (its ratio, or its Planner's Load), by
// every criterion of lab.Criteria, logs the verdicts, and fails t once for
// each verdict it missed, with the criterion, the scenario and the
// figures.
func judgeDefault(t *testing.T, c lab.Contender, budget float64) {
	t.Helper()
	vs := lab.Judge(t, c, judgeConfig(budget))
	t.Log("\n" + lab.VerdictTable(c.Name, vs))
	for _, v := range vs {
		if !v.Pass {
			t.Errorf("%s, %s: %s against %s, %.3f over %.2f (%s)", v.Criterion, v.Scenario,
				v.Contender, v.Reference, v.Figure, v.Limit, target(v.Criterion))
		}
	}
}

// target is the text of the criterion named name.
func target(name string) string {
	for _, c := range lab.Criteria() {
		if c.Name == name {
			return c.Target
		}
	}
	return name
}

// TestDefaultJudge judges the policies that came before Auto: the
// production recipe the README gave until then (Percentile{0.9} with the
// production budget, whose ratio is 0.2) and, with -lab.full, a Planner
// with a Load of 0.1 and no budget. It asserts only the criteria each
// meets in every scenario the run judges on seeds 0 to 3; the tables show
// the rest. (Both miss "steady" at ρ 0.9 and 0.95 with cancel queued only
// on seeds 2 and 3, which a quick look does not run, and the recipe
// misses "cannot win" at ρ 0.9 on seed 3.) A contender listed without
// holds is judged by every criterion, as judgeDefault judges: that is how
// a new default joins.
func TestDefaultJudge(t *testing.T) {
	if testing.Short() {
		t.Skip("the judge runs the load lab")
	}
	for _, tc := range []struct {
		c      lab.Contender
		budget float64
		// The criteria asserted in a quick look and with -lab.full; both
		// nil: every one.
		holds, holdsFull []string
		full             bool // judged only with -lab.full, to keep the default run short
	}{{
		c: lab.Contender{Name: "production recipe", Policy: func() hedge.Policy[int] {
			return hedge.Policy[int]{Delay: &hedge.Percentile{Quantile: 0.9}, Budget: loadBudget()}
		}},
		budget:    loadRatio,
		holds:     []string{"independent", "steady", "cannot win"},
		holdsFull: []string{"independent", "shed"},
	}, {
		c: lab.Contender{Name: "Planner{Load: 0.1}", Policy: func() hedge.Policy[int] {
			return hedge.Policy[int]{Delay: &hedge.Planner{Load: 0.1}}
		}},
		budget:    0.1,
		holdsFull: []string{"independent", "shed"},
		full:      true,
	}} {
		if tc.full && !*labFull {
			continue
		}
		t.Run(tc.c.Name, func(t *testing.T) {
			if tc.holds == nil && tc.holdsFull == nil {
				judgeDefault(t, tc.c, tc.budget)
				return
			}
			holds := tc.holds
			if *labFull {
				holds = tc.holdsFull
			}
			vs := lab.Judge(t, tc.c, judgeConfig(tc.budget))
			t.Log("\n" + lab.VerdictTable(tc.c.Name, vs))
			for _, v := range vs {
				if slices.Contains(holds, v.Criterion) && !v.Pass {
					t.Errorf("%s, %s: %s against %s, %.3f over %.2f", v.Criterion, v.Scenario,
						v.Contender, v.Reference, v.Figure, v.Limit)
				}
			}
		})
	}
}
