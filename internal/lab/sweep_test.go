package lab

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// Sweep runs its runs in parallel, and each row is still the one RunLoad
// gives alone, in Sweep's order: load by load, contenders in order.
func TestSweepMatchesRunLoad(t *testing.T) {
	contenders := []Contender{
		{Name: "no hedging", Policy: func() hedge.Policy[int] { return hedge.Policy[int]{MaxAttempts: 1} }},
		{Name: "Percentile", Policy: func() hedge.Policy[int] {
			return hedge.Policy[int]{Delay: &hedge.Percentile{Quantile: 0.9, Window: 200}}
		}},
		{Name: "Planner", Policy: func() hedge.Policy[int] {
			return hedge.Policy[int]{Delay: &hedge.Planner{Load: 0.15, Window: 200}}
		}},
	}
	base := Load{Cancel: CancelQueued, Warm: 300, Calls: 600, Block: 200}
	rhos := []float64{0.5, 0.9}
	got := Sweep(t, base, rhos, contenders)

	var want []LoadRow
	for _, rho := range rhos {
		l := base
		l.Rho = rho
		for _, c := range contenders {
			want = append(want, RunLoad(t, l, c))
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Sweep's rows differ from RunLoad's one by one (-want +got):\n%s", diff)
	}
}
