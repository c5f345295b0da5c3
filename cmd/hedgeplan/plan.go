package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/tailcut/hedge"
)

type config struct {
	budget, target float64
	maxHedges      int
	csv            bool
	column         int
	unit           string
}

// rows is how many delays the table shows per hedge count, spaced
// evenly in log scale from the observed p50 to the p99: the delays worth
// weighing, with the knees of a multi-modal latency between them.
const rows = 10

func run(in io.Reader, out io.Writer, cfg config) error {
	lat, err := readLatencies(in, cfg.csv, cfg.column, cfg.unit)
	if err != nil {
		return err
	}
	planner, err := learn(lat, cfg)
	if err != nil {
		return err
	}
	sorted := slices.Sorted(slices.Values(lat))
	fmt.Fprintf(out, "%d latencies: p50 %v, p90 %v, p99 %v, p99.9 %v, max %v\n\n", len(lat),
		show(quantile(sorted, 0.5)), show(quantile(sorted, 0.9)), show(quantile(sorted, 0.99)),
		show(quantile(sorted, 0.999)), show(sorted[len(sorted)-1]))

	plan := planner.Replan()
	target := fmt.Sprintf("p%v", 100*cfg.target)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "hedges\tdelay\t%s\textra load\thedge rate\twin rate\t\n", target)
	fmt.Fprintf(tw, "0\t-\t%v\t0.0%%\t-\t-\t\n", show(quantile(sorted, cfg.target)))
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
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%s is planned with a margin: the latency at which 20%% fewer calls are slower than %s.\n", target, target)
	fmt.Fprintf(out, "\nfor at most %s extra load: ", percent(cfg.budget))
	if plan.Hedges == 0 {
		_, err = fmt.Fprintf(out, "do not hedge; no plan within the budget beats %s %v\n", target, show(plan.Latency))
		return err
	}
	_, err = fmt.Fprintf(out, "%d hedge(s), one every %v: %s about %v, %s extra load, hedge rate %s, win rate %s\n",
		plan.Hedges, show(plan.Delay), target, show(plan.Latency), percent(plan.Load),
		percent(plan.HedgeRate), percent(plan.WinRate))
	if err == nil {
		_, err = fmt.Fprintf(out, "policy: hedge.Policy[T]{Delay: hedge.Fixed(%v), MaxAttempts: %d}, or &hedge.Planner{Load: %v} to keep learning\n",
			show(plan.Delay), plan.Hedges+1, cfg.budget)
	}
	return err
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
		Window: max(len(lat), 2), Floor: time.Microsecond, Ceiling: time.Minute,
	}
	for _, d := range lat {
		p.Learn(context.Background(), d, true)
	}
	return p, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(max(int(math.Ceil(q*float64(len(sorted))-1e-9)), 1), len(sorted))-1]
}

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

func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
