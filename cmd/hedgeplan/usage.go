package main

import (
	"flag"
	"fmt"
)

// usage is what -h prints before the flags: what hedgeplan reads, what
// it ignores, and how many latencies a plan takes.
const usage = `usage: hedgeplan [flags] [file]

hedgeplan reads observed latencies of one kind of call from file, or from
standard input, and prints what hedging would do for them: for each number
of hedges, at delays from their p50 to their p99, the target quantile, extra
load, hedge rate and win rate; then the plan it recommends for -budget, as Go.
-plot draws the same trade-off as a picture, with the plan marked.

Input: one latency per line, with its unit: 31ms, 0.2s, 850µs (or 850us),
1m2.5s. A bare number such as 31 needs -unit. Blank lines and lines starting
with # are ignored; any other line that is not a latency, or a negative
latency, is an error that names its line.
With -csv, the latency is field -column (from 1) of each record. Records may
have any number of fields; records starting with # are ignored, and so is a
first record whose field is not a latency (a header).

Planning quantile q takes at least 25/(1-q) latencies (2500 for p99), so that
25 of them lie beyond it. With fewer, hedgeplan still plans, and warns that
its figures are mostly noise.

flags:
`

// newFlags returns hedgeplan's flags, which fill cfg when parsed.
func newFlags(cfg *config, handling flag.ErrorHandling) *flag.FlagSet {
	fs := flag.NewFlagSet("hedgeplan", handling)
	fs.Float64Var(&cfg.budget, "budget", 0.1, "extra-load budget: 0.1 allows 10% more attempts")
	fs.Float64Var(&cfg.target, "target", 0.99, "the latency quantile to minimise, in (0, 1)")
	fs.IntVar(&cfg.maxHedges, "max-hedges", 2, "the most hedges a plan may send")
	fs.BoolVar(&cfg.csv, "csv", false, "read CSV records instead of one latency per line")
	fs.IntVar(&cfg.column, "column", 1, "with -csv: the field that holds the latency, from 1")
	fs.StringVar(&cfg.unit, "unit", "", "unit of bare numbers (ns, us, ms, s); without it a number needs its unit")
	fs.StringVar(&cfg.plot, "plot", "", "also draw the target quantile against extra load for each number of hedges, with the plan marked, into this `file`: .png or .svg")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}
