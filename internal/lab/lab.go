// Package lab replays hedged calls in virtual time (testing/synctest)
// against upstreams with known latency distributions, and finds the best
// fixed plan in hindsight to compare with. Every attempt's latency is a
// pure function of (call, attempt), so every policy under test, and the
// oracle, meets the same upstream.
//
// The load lab (RunLoad) serves the calls from replicas with queues
// under open-loop load, where a hedge costs a worker or a place in a
// queue; RunPlan and RunGrid compute fixed plans on the same draws, and
// Judge checks a policy against the targets of a default, each against
// the best fixed plan with the same budget.
package lab

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sync/errgroup"
)

// Upstream draws the latency of attempt k of call i.
type Upstream struct {
	Name string
	Draw func(r *rand.Rand) time.Duration
}

// Latency is the latency of attempt k of call i.
func (u Upstream) Latency(i, k int) time.Duration {
	return u.Draw(rand.New(rand.NewPCG(uint64(i), uint64(k)+1)))
}

// The upstreams of the labs: two of two modes each (a fast bulk and a
// slow tail a tenth or a twentieth as common), and one whose tail is a
// continuum.
var (
	FastSlow = Upstream{"90% 20–45ms, 10% 450–600ms", func(r *rand.Rand) time.Duration {
		if r.Float64() < 0.9 {
			return 20*time.Millisecond + time.Duration(r.Int64N(int64(25*time.Millisecond)))
		}
		return 450*time.Millisecond + time.Duration(r.Int64N(int64(150*time.Millisecond)))
	}}
	Lognormal = Upstream{"lognormal(0, 0.35)s, 5% 6–10s", func(r *rand.Rand) time.Duration {
		if r.Float64() < 0.05 {
			return 6*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
		}
		return time.Duration(math.Exp(0.35*r.NormFloat64()) * float64(time.Second))
	}}
	// Stragglers is lognormal with a mean of 5ms and a standard deviation
	// of 2ms, where one request in twenty is a straggler ten times
	// slower: p99 about 13× p50. It is the upstream of the loopback
	// evaluation in the benchmarks module.
	Stragglers = Upstream{"lognormal 5±2ms, 5% 10× slower", func(r *rand.Rand) time.Duration {
		straggler := r.Float64() < 0.05
		d := float64(stragglersMedian) * math.Exp(stragglersSigma*r.NormFloat64())
		if straggler {
			d *= 10
		}
		return time.Duration(d)
	}}
	// HeavyTail is lognormal with a median of 5ms and σ 1.2: a mean of
	// 10.3ms and p99 16× p50, with no mode to tell slow requests apart.
	HeavyTail = Upstream{"lognormal median 5ms σ 1.2", func(r *rand.Rand) time.Duration {
		return time.Duration(float64(5*time.Millisecond) * math.Exp(1.2*r.NormFloat64()))
	}}
)

// The lognormal of Stragglers: σ² = ln(1 + (sd/mean)²), and the median is
// the mean over exp(σ²/2).
var (
	stragglersSigma  = math.Sqrt(math.Log1p(0.4 * 0.4))
	stragglersMedian = time.Duration(float64(5*time.Millisecond) / math.Exp(stragglersSigma*stragglersSigma/2))
)

// Wait is an upstream's work: it takes d, or less when ctx ends first, and
// then returns ctx's error.
func Wait(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Row is what one policy did to the measured calls.
type Row struct {
	Name          string
	P50, P95, P99 time.Duration
	Amp           float64 // attempts per call
}

// String formats the row under Header.
func (r Row) String() string {
	return fmt.Sprintf("%-34s %9v %9v %9v %6.3fx", r.Name, r.P50.Round(time.Millisecond),
		r.P95.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Amp)
}

// Header is the line above Rows.
func Header() string {
	return fmt.Sprintf("%-34s %9s %9s %9s %7s", "", "p50", "p95", "p99", "amp")
}

// Hedger makes one hedged call: it runs attempt, a call to the upstream,
// as its policy says, and returns what the call returned.
type Hedger func(ctx context.Context, attempt func(context.Context) (int, error)) (int, error)

// Run replays warm+calls sequential calls through hedger in a synctest
// bubble and summarizes the last calls of them. The upstream honours the
// attempt's context; each call's attempts are numbered in the order they
// start.
func Run(t *testing.T, name string, up Upstream, warm, calls int, hedger Hedger) Row {
	var row Row
	synctest.Test(t, func(t *testing.T) {
		var lat []time.Duration
		attempts := 0
		for i := range warm + calls {
			var mu sync.Mutex
			started := 0
			attempt := func(ctx context.Context) (int, error) {
				mu.Lock()
				k := started
				started++
				mu.Unlock()
				if err := Wait(ctx, up.Latency(i, k)); err != nil {
					return 0, err
				}
				return i, nil
			}
			start := time.Now()
			if _, err := hedger(t.Context(), attempt); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if i >= warm {
				lat = append(lat, time.Since(start))
				mu.Lock()
				attempts += started
				mu.Unlock()
			}
		}
		row = summarize(name, lat, attempts)
	})
	return row
}

func summarize(name string, lat []time.Duration, attempts int) Row {
	s := slices.Sorted(slices.Values(lat))
	return Row{name, NearestRank(s, 0.5), NearestRank(s, 0.95), NearestRank(s, 0.99),
		float64(attempts) / float64(len(lat))}
}

// NearestRank returns the q-quantile of sorted samples.
func NearestRank(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(max(int(math.Ceil(q*float64(len(sorted))-1e-9)), 1), len(sorted))-1]
}

// Fixed computes, without running anything, what h hedges every d do to
// calls [warm, warm+calls): the rules of hedge.Do for attempts that all
// succeed.
func Fixed(up Upstream, warm, calls int, d time.Duration, h int) Row {
	return latencies(up, warm, calls, h).fixed(d, h)
}

// latencyTable is the latency of the first attempts of calls [warm,
// warm+calls): attempt k of the i-th at i*attempts+k.
type latencyTable struct {
	attempts int
	lat      []time.Duration
}

func latencies(up Upstream, warm, calls, hedges int) latencyTable {
	t := latencyTable{hedges + 1, make([]time.Duration, calls*(hedges+1))}
	for i := range calls {
		for k := range t.attempts {
			t.lat[i*t.attempts+k] = up.Latency(warm+i, k)
		}
	}
	return t
}

// fixed is Fixed on the table's draws; h is at most its attempts less one.
func (t latencyTable) fixed(d time.Duration, h int) Row {
	calls := len(t.lat) / t.attempts
	lat := make([]time.Duration, 0, calls)
	attempts := 0
	for i := range calls {
		up := t.lat[i*t.attempts : (i+1)*t.attempts]
		done := up[0]
		attempts++
		for k := 1; k <= h && done > time.Duration(k)*d; k++ {
			attempts++
			done = min(done, time.Duration(k)*d+up[k])
		}
		lat = append(lat, done)
	}
	return summarize(fmt.Sprintf("fixed %v ×%d", d.Round(100*time.Microsecond), h), lat, attempts)
}

// Oracle returns the fixed plan, one or two hedges at any delay from 5ms
// to 12s, with the least p99 at an amplification of at most amp: the best
// fixed delay chosen in hindsight.
//
// The plans, about 800, replay the same calls, drawn once (see oracle).
func Oracle(up Upstream, warm, calls int, amp float64) Row {
	var plans []fixedPlan
	for h := 1; h <= 2; h++ {
		for x := math.Log(float64(5 * time.Millisecond)); x <= math.Log(float64(12*time.Second)); x += 0.02 {
			plans = append(plans, fixedPlan{time.Duration(math.Exp(x)), h})
		}
	}
	return latencies(up, warm, calls, 2).oracle(plans, amp, Row{P99: math.MaxInt64})
}

// fixedPlan is a plan an oracle weighs: h hedges, one every d.
type fixedPlan struct {
	d time.Duration
	h int
}

// oracle replays each of plans on t's latencies and returns the one with
// the least p99 at no more than amp attempts per call, or none if no plan
// beats it, named as an oracle's. The replays are independent, so they run
// on every processor; the choice among them is made in the order of plans,
// as one goroutine would make it.
func (t latencyTable) oracle(plans []fixedPlan, amp float64, none Row) Row {
	rows := make([]Row, len(plans))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, p := range plans {
		g.Go(func() error {
			rows[i] = t.fixed(p.d, p.h)
			return nil
		})
	}
	g.Wait() // the replays return no errors
	best := none
	for _, r := range rows {
		if r.Amp <= amp && r.P99 < best.P99 {
			best = r
		}
	}
	best.Name = "oracle: " + best.Name
	return best
}
