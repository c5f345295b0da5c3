package hedge

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// run() skips fn for an attempt cancelled before it ran and returns its
// permit; with no Budget there is none to return, and nothing panics.
func TestNoBudgetNoDone(t *testing.T) {
	c := &call[int]{decided: true, inflight: 1}
	c.primary.parent = context.Background()
	a := &attemptCtx{parent: context.Background(), n: 1}
	a.cancel(context.Canceled, ErrSuperseded) // claimed, then the call was decided
	c.run(a, false)
	if c.panicked != nil || c.inflight != 0 {
		t.Errorf("skipping a cancelled attempt with no Budget: panicked %v, %d in flight", c.panicked, c.inflight)
	}
}

// replan against a brute-force search of every (delay bucket, hedges)
// within the load budget.
func TestReplanMatchesBruteForce(t *testing.T) {
	worst := 0.0
	for seed := range 40 {
		r := rand.New(rand.NewPCG(uint64(seed), 77))
		var done histogram
		sigma := 0.2 + 0.1*float64(seed%10)
		for range 4000 {
			done.add(time.Duration(math.Exp(r.NormFloat64()*sigma) * float64(30*time.Millisecond)))
		}
		s := newSurvival([]*histogram{&done}, nil)
		for _, load := range []float64{0.05, 0.1, 0.2} {
			st := &plannerState{load: load, target: 0.99, maxHedges: 2, bounds: bounds{time.Millisecond, 10 * time.Second, 10 * time.Second}}
			got := st.replan(s)
			q := 1 - (1-st.target)*margin
			best, _ := s.quantile(q, 0, 0)
			for h := 1; h <= 2; h++ {
				for i := bucketOf(st.floor); i <= bucketOf(st.ceiling); i++ {
					d := st.clamp(bucketMid(i))
					if s.extra(d, h) > load {
						continue
					}
					if l, _ := s.quantile(q, d, h); l < best {
						best = l
					}
				}
			}
			if rel := float64(got.Latency)/float64(best) - 1; rel > worst {
				worst = rel
				t.Logf("sigma %.1f load %.2f: replan %+v, brute-force best latency %v (+%.1f%%)", sigma, load, got, best, 100*rel)
			}
		}
	}
	if worst > 0.03 {
		t.Errorf("replan up to %.1f%% above the best plan in budget", 100*worst)
	}
}
