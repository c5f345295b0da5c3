package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/chart"
)

type config struct {
	budget, target float64
	maxHedges      int
	csv            bool
	column         int
	unit           string
	plot           string // the picture's file, for -plot; "": none
}

// rows is how many delays the table shows per hedge count, spaced
// evenly in log scale from the observed p50 to the p99: the delays worth
// weighing, with the knees of a multi-modal latency between them.
const rows = 10

// tailSamples is how many latencies must lie beyond the target quantile
// for a plan without a warning. The count beyond a quantile is about
// Poisson, so 25 of them know the tail's share to about ±20 % (1/√25),
// the margin a plan keeps; with fewer, the noise outgrows the margin.
const tailSamples = 25

// minSamples is the fewest latencies that plan the q-quantile without a
// warning: tailSamples/(1-q), 2500 for p99.
func minSamples(q float64) int {
	return int(math.Ceil(tailSamples/(1-q) - 1e-9)) // 25/(1-0.99) is 2500.000000000002
}

// margin is the share of the target's tail that a plan's latency leaves
// slower, as hedge.Plan.Latency documents: 20 % fewer calls than the
// target quantile allows.
const margin = 0.8

// neverDelay is the Planner's Ceiling, a delay beyond any latency its
// histogram holds (about 137 s): a hedge after it is never sent, so the
// Planner's figure for one hedge at neverDelay is its figure for not
// hedging, made by the same estimate as every other row of the table.
const neverDelay = 3 * time.Minute

func run(in io.Reader, out io.Writer, cfg config) error {
	if cfg.plot != "" {
		if err := chart.CheckPath(cfg.plot); err != nil {
			return fmt.Errorf("-plot %w", err)
		}
	}
	lat, err := readLatencies(in, cfg.csv, cfg.column, cfg.unit)
	if err != nil {
		return err
	}
	planner, err := learn(lat, cfg)
	if err != nil {
		return err
	}
	plan := planner.Replan()
	var b bytes.Buffer
	report(&b, lat, planner, plan, cfg)
	if _, err := out.Write(b.Bytes()); err != nil {
		return err
	}
	if cfg.plot == "" {
		return nil
	}
	return chart.Save(plotPlan(newPicture(planner, plan, cfg), len(lat)), cfg.plot)
}

// report writes what planner, fed lat, expects of hedging, and plan, the
// plan it recommends.
func report(w *bytes.Buffer, lat []time.Duration, planner *hedge.Planner, plan hedge.Plan, cfg config) {
	sorted := slices.Sorted(slices.Values(lat))
	target := quantileName(cfg.target)
	fmt.Fprintf(w, "%d latencies: p50 %v, p90 %v, p99 %v, p99.9 %v, max %v\n", len(lat),
		show(quantile(sorted, 0.5)), show(quantile(sorted, 0.9)), show(quantile(sorted, 0.99)),
		show(quantile(sorted, 0.999)), show(sorted[len(sorted)-1]))
	need := minSamples(cfg.target)
	tooFew := len(lat) < need
	if tooFew {
		fmt.Fprintf(w, "\nwarning: %d latencies are too few to plan %s. It takes at least %d, so that %d lie\n"+
			"beyond %s and pin the share of calls slower than it to about ±20%%, the margin a plan\n"+
			"keeps. With fewer, the figures below are mostly noise: collect more latencies.\n",
			len(lat), target, need, tailSamples, target)
	}

	single := planner.Curve(1)
	none := single[len(single)-1].Latency // the hedge at neverDelay
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\nhedges\tdelay\t%s\textra load\thedge rate\twin rate\t\n", target)
	fmt.Fprintf(tw, "0\t-\t%v\t0.0%%\t-\t-\t\n", show(none))
	lo, hi := float64(quantile(sorted, 0.5)), float64(quantile(sorted, 0.99))
	for h := 1; h <= cfg.maxHedges; h++ {
		curve := planner.Curve(h)
		for i := range rows {
			d := time.Duration(lo * math.Pow(hi/lo, float64(i)/(rows-1)))
			p := nearest(curve, d)
			fmt.Fprintf(tw, "%d\t%v\t%v\t%s\t%s\t%s\t\n", h, show(p.Delay), show(p.Latency),
				percent(p.Load), percent(p.HedgeRate), percent(p.WinRate))
		}
	}
	tw.Flush() // into a bytes.Buffer, which takes every write

	tail := 1 - cfg.target
	fmt.Fprintf(w, "\nEvery figure in the table is the planner's estimate, made as a policy makes it: %s there\n"+
		"is the latency that %s of calls exceed, not %s (a 20%% margin against noise in the tail),\n"+
		"read from a histogram whose buckets are about 3%% wide.\n",
		target, share(tail*margin), share(tail))
	if observed := show(quantile(sorted, cfg.target)); observed != show(none) {
		fmt.Fprintf(w, "That is why no hedging reads %v in the table, where the observed %s is %v.\n",
			show(none), target, observed)
	}

	fmt.Fprintf(w, "\nfor at most %s extra load", percent(cfg.budget))
	if tooFew {
		fmt.Fprint(w, ", from too few latencies to trust")
	}
	switch plan.Hedges {
	case 0:
		fmt.Fprintf(w, ": do not hedge; no plan within the budget beats %s %v\n", target, show(plan.Latency))
		return
	case 1:
		fmt.Fprintf(w, ": 1 hedge after %v", show(plan.Delay))
	default:
		fmt.Fprintf(w, ": %d hedges, one every %v", plan.Hedges, show(plan.Delay))
	}
	fmt.Fprintf(w, ": %s about %v, %s extra load, hedge rate %s, win rate %s\n",
		target, show(plan.Latency), percent(plan.Load), percent(plan.HedgeRate), percent(plan.WinRate))
	plan.Delay = show(plan.Delay)
	fmt.Fprintf(w, "policy: %s\n", fixedPolicy(plan))
	fmt.Fprintf(w, "or, to go on planning from live calls: %s\n", plannerPolicy(cfg))
}

// learn feeds the latencies to a Planner, as Do would feed it the
// primaries of calls that were not hedged.
func learn(lat []time.Duration, cfg config) (*hedge.Planner, error) {
	switch {
	case !(cfg.target > 0 && cfg.target < 1):
		return nil, fmt.Errorf("-target %v is outside (0, 1)", cfg.target)
	case cfg.maxHedges < 1 || cfg.maxHedges >= hedge.MaxAttemptsLimit:
		return nil, fmt.Errorf("-max-hedges %d is outside 1..%d", cfg.maxHedges, hedge.MaxAttemptsLimit-1)
	case !(cfg.budget > 0 && cfg.budget <= float64(cfg.maxHedges)):
		return nil, fmt.Errorf("-budget %v is outside (0, max-hedges]", cfg.budget)
	}
	p := &hedge.Planner{
		Load: cfg.budget, Target: cfg.target, MaxHedges: cfg.maxHedges,
		Window: max(len(lat), 2), Floor: time.Microsecond, Ceiling: neverDelay,
	}
	for _, d := range lat {
		p.Learn(context.Background(), d, true)
	}
	return p, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(max(int(math.Ceil(q*float64(len(sorted))-1e-9)), 1), len(sorted))-1]
}

// quantileName names the q-quantile: p99 for 0.99, p99.9 for 0.999.
func quantileName(q float64) string { return "p" + decimal(100*q) }

// nearest returns the plan in curve whose delay is nearest d.
func nearest(curve []hedge.Plan, d time.Duration) hedge.Plan {
	best := curve[0]
	for _, p := range curve {
		if (p.Delay - d).Abs() < (best.Delay - d).Abs() {
			best = p
		}
	}
	return best
}

// show rounds a latency to three significant digits.
func show(d time.Duration) time.Duration {
	for unit := time.Duration(1); unit < time.Hour; unit *= 10 {
		if d < 1000*unit {
			return d.Round(unit)
		}
	}
	return d.Round(time.Second)
}

// percent writes a rate with one decimal: 10.7%.
func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// share writes a small share of calls without trailing zeros: 0.8%, 1%.
func share(f float64) string { return decimal(100*f) + "%" }

// decimal writes x with at most four decimals and no trailing zeros, so
// that 100*0.99 is 99, not 99.00000000000001.
func decimal(x float64) string {
	return strconv.FormatFloat(math.Round(x*1e4)/1e4, 'f', -1, 64)
}
