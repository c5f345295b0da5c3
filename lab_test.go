package hedge_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// The tail lab: the learned delays against the best fixed plan chosen in
// hindsight, in virtual time, through the real Do. Run with -v to see the
// table:
//
//	go test -run TestTailLab -v .
//
// The benchmarks module runs the same lab for failsafe-go's quantile
// policy.

const (
	labWarm  = 1000 // calls before measuring
	labCalls = 4000 // calls measured
)

func hedger(p hedge.Policy[int]) lab.Hedger {
	return func(ctx context.Context, attempt func(context.Context) (int, error)) (int, error) {
		return hedge.Do(ctx, p, attempt)
	}
}

func TestTailLab(t *testing.T) {
	if testing.Short() {
		t.Skip("the lab runs 30,000 calls")
	}
	for _, up := range []lab.Upstream{lab.FastSlow, lab.Lognormal} {
		t.Run(strings.Fields(up.Name)[0], func(t *testing.T) {
			none := lab.Run(t, "no hedging", up, labWarm, labCalls, hedger(hedge.Policy[int]{MaxAttempts: 1}))
			pct := lab.Run(t, "Percentile{Quantile: 0.85}", up, labWarm, labCalls,
				hedger(hedge.Policy[int]{Delay: &hedge.Percentile{Quantile: 0.85}, MaxAttempts: 3}))
			plan := lab.Run(t, "Planner{Load: 0.15}", up, labWarm, labCalls,
				hedger(hedge.Policy[int]{Delay: &hedge.Planner{Load: 0.15}, MaxAttempts: 3}))
			pctOracle := lab.Oracle(up, labWarm, labCalls, pct.Amp)
			planOracle := lab.Oracle(up, labWarm, labCalls, plan.Amp)
			var b strings.Builder
			b.WriteString(up.Name + ", 4000 calls after 1000 to warm up\n" + lab.Header() + "\n")
			for _, r := range []lab.Row{none, pct, pctOracle, plan, planOracle} {
				b.WriteString(r.String() + "\n")
			}
			t.Log("\n" + b.String())
			// The planner is the oracle computed in-process: it should land
			// near the hindsight optimum at the load it spent.
			if float64(plan.P99) > 1.1*float64(planOracle.P99) {
				t.Errorf("planner p99 %v, hindsight oracle at %.3fx: %v", plan.P99, plan.Amp, planOracle.P99)
			}
			if plan.Amp > 1.15+0.02 {
				t.Errorf("planner spent %.3fx, budget 1.15x", plan.Amp)
			}
		})
	}
}
