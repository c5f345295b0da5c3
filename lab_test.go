package hedge_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// The tail lab: adaptive delays against the best fixed plan chosen in
// hindsight, in virtual time. Every attempt's latency is a pure function
// of (call, attempt), so every policy, and the oracle, meets the same
// upstream. Run with -v to see the table:
//
//	go test -run TestTailLab -v .

// upstream draws the latency of attempt k of call i.
type upstream struct {
	name string
	draw func(r *rand.Rand) time.Duration
}

func (p upstream) latency(i, k int) time.Duration {
	return p.draw(rand.New(rand.NewPCG(uint64(i), uint64(k)+1)))
}

var (
	fastSlow = upstream{"90% 20–45ms, 10% 450–600ms", func(r *rand.Rand) time.Duration {
		if r.Float64() < 0.9 {
			return 20*ms + time.Duration(r.Int64N(int64(25*ms)))
		}
		return 450*ms + time.Duration(r.Int64N(int64(150*ms)))
	}}
	lognormal = upstream{"lognormal(0, 0.35)s, 5% 6–10s", func(r *rand.Rand) time.Duration {
		if r.Float64() < 0.05 {
			return 6*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
		}
		return time.Duration(math.Exp(0.35*r.NormFloat64()) * float64(time.Second))
	}}
)

const (
	labWarm  = 1000 // calls before measuring
	labCalls = 4000 // calls measured
)

type labRow struct {
	name          string
	p50, p95, p99 time.Duration
	amp           float64
}

func (r labRow) String() string {
	return fmt.Sprintf("%-34s %9v %9v %9v %6.3fx", r.name, r.p50.Round(time.Millisecond),
		r.p95.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.amp)
}

func nearestRank(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(math.Ceil(q*float64(len(sorted))-1e-9))-1]
}

func summarize(name string, lat []time.Duration, attempts int) labRow {
	s := slices.Sorted(slices.Values(lat))
	return labRow{name, nearestRank(s, 0.5), nearestRank(s, 0.95), nearestRank(s, 0.99),
		float64(attempts) / float64(len(lat))}
}

// runLab drives labWarm+labCalls sequential calls through Do and
// summarizes the measured ones.
func runLab(t *testing.T, name string, prof upstream, p hedge.Policy[int]) labRow {
	var row labRow
	synctest.Test(t, func(t *testing.T) {
		var lat []time.Duration
		attempts := 0
		p.Observer = observerFunc(func(r hedge.Report) { attempts += r.Attempts })
		for i := range labWarm + labCalls {
			if i == labWarm {
				attempts = 0
			}
			start := time.Now()
			_, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				select {
				case <-time.After(prof.latency(i, hedge.Attempt(ctx))):
					return i, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if i >= labWarm {
				lat = append(lat, time.Since(start))
			}
		}
		row = summarize(name, lat, attempts)
	})
	return row
}

// fixedPlan computes, without Do, what h hedges every d do to the
// measured calls: the rules of Do for attempts that all succeed.
func fixedPlan(prof upstream, d time.Duration, h int) labRow {
	lat := make([]time.Duration, 0, labCalls)
	attempts := 0
	for i := labWarm; i < labWarm+labCalls; i++ {
		done := prof.latency(i, 0)
		attempts++
		for k := 1; k <= h && done > time.Duration(k)*d; k++ {
			attempts++
			done = min(done, time.Duration(k)*d+prof.latency(i, k))
		}
		lat = append(lat, done)
	}
	return summarize(fmt.Sprintf("fixed %v ×%d", d.Round(100*time.Microsecond), h), lat, attempts)
}

// oracle returns the fixed plan with the least p99 whose amplification is
// at most amp: the best fixed delay chosen in hindsight.
func oracle(prof upstream, amp float64) labRow {
	best := labRow{p99: math.MaxInt64}
	for h := 1; h <= 2; h++ {
		for x := math.Log(float64(5 * ms)); x <= math.Log(float64(12*time.Second)); x += 0.02 {
			r := fixedPlan(prof, time.Duration(math.Exp(x)), h)
			if r.amp <= amp && r.p99 < best.p99 {
				best = r
			}
		}
	}
	best.name = "oracle: " + best.name
	return best
}

func TestTailLab(t *testing.T) {
	if testing.Short() {
		t.Skip("the lab runs 20,000 calls")
	}
	for _, prof := range []upstream{fastSlow, lognormal} {
		t.Run(strings.Fields(prof.name)[0], func(t *testing.T) {
			none := runLab(t, "no hedging", prof, hedge.Policy[int]{MaxAttempts: 1})
			pct := runLab(t, "Percentile{Quantile: 0.85}", prof,
				hedge.Policy[int]{Delay: &hedge.Percentile{Quantile: 0.85}, MaxAttempts: 3})
			plan := runLab(t, "Planner{Load: 0.15}", prof,
				hedge.Policy[int]{Delay: &hedge.Planner{Load: 0.15}, MaxAttempts: 3})
			pctOracle, planOracle := oracle(prof, pct.amp), oracle(prof, plan.amp)
			var b strings.Builder
			fmt.Fprintf(&b, "%s, %d calls after %d to warm up\n", prof.name, labCalls, labWarm)
			fmt.Fprintf(&b, "%-34s %9s %9s %9s %7s\n", "", "p50", "p95", "p99", "amp")
			for _, r := range []labRow{none, pct, pctOracle, plan, planOracle} {
				fmt.Fprintln(&b, r)
			}
			t.Log("\n" + b.String())
			// The planner is the oracle computed in-process: it should land
			// near the hindsight optimum at the load it spent.
			if float64(plan.p99) > 1.25*float64(planOracle.p99) {
				t.Errorf("planner p99 %v, hindsight oracle at %.3fx: %v", plan.p99, plan.amp, planOracle.p99)
			}
			if plan.amp > 1.15+0.02 {
				t.Errorf("planner spent %.3fx, budget 1.15x", plan.amp)
			}
		})
	}
}
