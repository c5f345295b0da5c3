package main

import (
	"flag"
	"fmt"
	"time"
)

// usage is what -h prints before the flags: what the demo does, in
// either mode, and where its output goes.
const usage = `usage: hedgedemo [flags]

hedgedemo shows what hedging does to tail latency. It starts an HTTP server on
127.0.0.1 whose replies take -fast, or -slow for a -slowfrac share of them. It
calls the server -calls times, -concurrency at a time, under each of seven
policies: no hedging, one and two hedges after -delay, a learned Percentile, a
Planner, the Planner with three stock budgets, and hedge.Auto, the production
setup. It prints each policy's latency percentiles, extra attempts and failed
calls, and a histogram.

With -load it sweeps the offered load instead: a server of -workers workers
behind a FIFO queue, calls arriving as a Poisson process at utilisations 0.3,
0.5, 0.7 and 0.9, each served afresh to four policies. It takes about a minute.

The tables go to standard output, progress to standard error: a bar on a
terminal, a plain line every few seconds in a log. The demo warns when the
machine was too busy for its figures. -plot draws them: latency against
percentile for each policy, or with -load p99 against the load.

flags:
`

// newFlags returns hedgedemo's flags, which fill cfg and metricsAddr when
// parsed; unset, they are the demo's defaults.
func newFlags(cfg *config, metricsAddr *string, handling flag.ErrorHandling) *flag.FlagSet {
	*cfg = config{profile: profile{
		fast:     span{20 * time.Millisecond, 40 * time.Millisecond},
		slow:     span{400 * time.Millisecond, 600 * time.Millisecond},
		slowFrac: 0.1,
	}}
	cfg.load.rhos = defaultRhos
	fs := flag.NewFlagSet("hedgedemo", handling)
	fs.IntVar(&cfg.calls, "calls", 1000, "calls to make in each run")
	fs.IntVar(&cfg.concurrency, "concurrency", 50, "calls in flight at once (without -load, whose calls arrive on a clock)")
	fs.DurationVar(&cfg.delay, "delay", 50*time.Millisecond, "how long a call runs before it is hedged")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Second, "deadline of each call, hedges included")
	fs.Var(&cfg.profile.fast, "fast", "a fast reply's latency: a `range` as 20ms-40ms, drawn uniformly, or one duration")
	fs.Var(&cfg.profile.slow, "slow", "a slow reply's latency: a `range` as 400ms-600ms, drawn uniformly, or one duration")
	fs.Float64Var(&cfg.profile.slowFrac, "slowfrac", cfg.profile.slowFrac, "fraction of replies that are slow")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the server's latency draws")
	fs.StringVar(&cfg.plot, "plot", "", "also draw the figures into this `file`: .png or .svg")
	fs.BoolVar(&cfg.sweep, "load", false, "sweep the offered load on a server with a worker pool, instead of comparing policies at a fixed concurrency")
	fs.IntVar(&cfg.load.warmup, "warmup", 1000, "with -load: calls before the -calls measured at each load and policy")
	fs.IntVar(&cfg.load.workers, "workers", 16, "with -load: the server's workers")
	fs.Float64Var(&cfg.load.scale, "scale", 0.2, "with -load: service times, -delay and -timeout, scaled by this factor so that the sweep takes about a minute")
	fs.BoolVar(&cfg.load.stopWork, "stopwork", false, "with -load: a request whose client has gone stops its running work at once; by default it runs to the end on its worker, as a query a server cannot interrupt does")
	fs.BoolVar(&cfg.load.shed, "shed", false, "with -load: hedgehttp.Shedder in front of the server sheds hedges while every worker is busy")
	fs.StringVar(metricsAddr, "metrics", "", "serve the calls' metrics in the Prometheus text format at /metrics on this `address` (:9464, say), until interrupted")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}
