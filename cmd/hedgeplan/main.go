// Command hedgeplan answers "what would hedging do for my latencies, and
// at what extra load?". It reads observed latencies, one per line with
// units (31ms, 0.2s, 850µs) or a column of a CSV file, feeds them to a
// hedge.Planner (the code a Policy plans with), and prints, for one and
// two hedges, the target quantile and the extra load at a range of
// delays, and the plan it recommends for a budget, as a Go policy. With
// -plot it also draws the target quantile against the extra load, with
// the plan marked.
//
//	go run ./cmd/hedgeplan < latencies.txt
//	go run ./cmd/hedgeplan -csv -column 3 -budget 0.05 requests.csv
//	go run ./cmd/hedgeplan -plot plan.png < latencies.txt
//
// It is a module of its own, so that the plotting library stays out of
// the core's go.mod; the go.work at the repository's root lets go run
// find it from there.
//
// Planning the q-quantile takes at least 25/(1-q) latencies, 2500 for
// p99, so that 25 of them lie beyond it; with fewer it warns. -h says
// what the input may hold.
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
	flags := newFlags(&cfg, flag.ExitOnError)
	flags.Parse(os.Args[1:]) // ExitOnError: it returns no error

	in := io.Reader(os.Stdin)
	if flags.NArg() > 1 {
		fail(errors.New("at most one input file"))
	}
	if flags.NArg() == 1 {
		f, err := os.Open(flags.Arg(0))
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
