// Command hedgeplan answers "what would hedging do for my latencies, and
// at what extra load?". It reads observed latencies, one per line with
// units (31ms, 0.2s, 850µs) or a column of a CSV file, feeds them to a
// hedge.Planner (the code a Policy plans with), and prints, for one and
// two hedges, the target quantile and the extra load at a range of
// delays, and the plan it recommends for a budget.
//
//	go run ./cmd/hedgeplan < latencies.txt
//	go run ./cmd/hedgeplan -csv -column 3 -budget 0.05 requests.csv
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	var cfg config
	flag.Float64Var(&cfg.budget, "budget", 0.1, "extra-load budget: 0.1 allows 10% more attempts")
	flag.Float64Var(&cfg.target, "target", 0.99, "the latency quantile to minimise")
	flag.IntVar(&cfg.maxHedges, "max-hedges", 2, "the most hedges a plan may send")
	flag.BoolVar(&cfg.csv, "csv", false, "read a CSV file instead of one latency per line")
	flag.IntVar(&cfg.column, "column", 1, "with -csv: the column that holds the latency, from 1")
	flag.StringVar(&cfg.unit, "unit", "", "unit of bare numbers (ms, s, us); without it a number needs its unit")
	flag.Parse()

	in := io.Reader(os.Stdin)
	if flag.NArg() > 1 {
		fail(errors.New("at most one input file"))
	}
	if flag.NArg() == 1 {
		f, err := os.Open(flag.Arg(0))
		if err != nil {
			fail(err)
		}
		defer f.Close()
		in = f
	}
	if err := run(in, os.Stdout, cfg); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hedgeplan:", err)
	os.Exit(1)
}
