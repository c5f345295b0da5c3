package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/hedgeotel"
	"github.com/tailcut/hedge/internal/chart"
)

// loadConfig is what the -load sweep runs on top of config.
type loadConfig struct {
	warmup   int       // calls before the measured ones at each point
	workers  int       // the server's worker pool
	scale    float64   // service times, the delay and the timeout, as a fraction of the default run's
	stopWork bool      // a cancelled request stops its running work (poolHandler.stopWork)
	shed     bool      // a hedgehttp.Shedder sheds hedges while every worker is busy
	rhos     []float64 // the utilisations swept: primaries' work over the workers' time
}

// defaultRhos are the loads the sweep offers, from light to heavy.
var defaultRhos = []float64{0.3, 0.5, 0.7, 0.9}

// loadPolicy is one row of every load: a hedging setup for the client's
// hedgehttp.Transport. newTransport makes it afresh for each load, so that
// learned delays and budgets start cold there; a breaker of its budget
// calls onOpen, if not nil, each time it opens.
type loadPolicy struct {
	name         string
	newTransport func(onOpen func(key string)) (*hedgehttp.Transport, error)
}

// loadPolicies are the sweep's rows: no hedging, a fixed delay, a learned
// one, and the learned one with the stock budgets the README recommended
// before Auto. Each hedging policy sends up to two hedges: with one, p99 sits on
// the 1 % of calls whose primary and hedge are both slow, and flips
// between the fast and the slow mode from run to run (see the default
// run's table), which would hide what load does to it.
func loadPolicies(delay time.Duration) []loadPolicy {
	return []loadPolicy{
		{"no hedging", func(func(string)) (*hedgehttp.Transport, error) {
			return &hedgehttp.Transport{MaxAttempts: 1}, nil
		}},
		{"2 hedges, every " + delay.String(), func(func(string)) (*hedgehttp.Transport, error) {
			return &hedgehttp.Transport{Delay: hedge.Fixed(delay), MaxAttempts: 3}, nil
		}},
		{"Percentile{Quantile: 0.9}", func(func(string)) (*hedgehttp.Transport, error) {
			return &hedgehttp.Transport{Delay: &hedge.Percentile{Quantile: 0.9}, MaxAttempts: 3}, nil
		}},
		// A learned delay rises with the queue, but every call it hedges
		// still adds work to a busy server. The stock budgets the README
		// recommended before Auto: hedges must keep winning, the breaker
		// stops them while half the primaries fail, and the ratio caps
		// the extra attempts at a fifth of the calls (plus one a second).
		{"Percentile{0.9}, budgeted", func(onOpen func(string)) (*hedgehttp.Transport, error) {
			win := &hedge.WinRateBudget{}
			breaker := &hedge.Breaker{OnOpen: onOpen}
			ratio := &hedge.RatioBudget{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}
			return &hedgehttp.Transport{Delay: &hedge.Percentile{Quantile: 0.9}, MaxAttempts: 3,
				Budget: hedge.AllOf(win, breaker, ratio)}, nil
		}},
	}
}

// runLoad sweeps the offered load: for each ρ and each policy, a fresh
// server with a worker pool, calls arriving as a Poisson process, and one
// row of the table.
func runLoad(ctx context.Context, cfg config, out, status io.Writer) error {
	lc := cfg.load
	switch {
	case cfg.calls < 1 || lc.warmup < 0:
		return errors.New("-calls must be at least 1 and -warmup at least 0")
	case lc.workers < 1:
		return errors.New("-workers must be at least 1")
	case !(lc.scale > 0 && lc.scale <= 1000):
		return errors.New("-scale must be above 0 and at most 1000")
	case cfg.timeout <= 0:
		return errors.New("-timeout must be above 0")
	case cfg.profile.slowFrac < 0 || cfg.profile.slowFrac > 1:
		return errors.New("-slowfrac must be between 0 and 1")
	case cfg.plot != "" && chart.CheckPath(cfg.plot) != nil:
		return fmt.Errorf("-plot %w", chart.CheckPath(cfg.plot))
	}
	for _, rho := range lc.rhos {
		if !(rho > 0 && rho <= 10) {
			return fmt.Errorf("load %v: want a utilisation above 0 and at most 10", rho)
		}
	}
	p := cfg.profile.scaled(lc.scale)
	if p.mean() <= 0 {
		return errors.New("-fast and -slow: the mean service time must be above 0")
	}
	delay := scaleDuration(cfg.delay, lc.scale)
	timeout := scaleDuration(cfg.timeout, lc.scale)
	policies := loadPolicies(delay)
	probe := startLatenessProbe()
	defer probe.end()
	var rows []loadRow
	for _, rho := range lc.rhos {
		for _, pol := range policies {
			r, err := loadPoint(ctx, pointConfig{
				profile: p, seed: cfg.seed, workers: lc.workers, stopWork: lc.stopWork, shed: lc.shed,
				rho: rho, warmup: lc.warmup, calls: cfg.calls, timeout: timeout, metrics: cfg.metrics,
			}, pol, newProgress(status, pointName(rho, pol.name), lc.warmup+cfg.calls))
			if err != nil {
				return err
			}
			rows = append(rows, r)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(out, "%s\n\n", loadTitle(cfg, p))
	if err := printLoadTable(out, lc.shed, rows); err != nil {
		return err
	}
	if err := warnIfBusy(out, probe, delay); err != nil {
		return err
	}
	return plotLoadTo(cfg.plot, fmt.Sprintf("%d workers, %s calls a point", lc.workers, thousands(cfg.calls)), rows)
}

// loadTitle says what the sweep ran, in three lines: the server, its
// service times, the calls.
func loadTitle(cfg config, p profile) string {
	lc := cfg.load
	running := "stops at once"
	if !lc.stopWork {
		running = "runs to the end"
	}
	shed := ""
	if lc.shed {
		shed = fmt.Sprintf(", hedgehttp.Shedder{Limit: %d} in front", lc.workers)
	}
	mean := p.mean().Round(100 * time.Microsecond)
	return fmt.Sprintf("server:  %d workers, FIFO queue, cancelled work %s%s\n", lc.workers, running, shed) +
		fmt.Sprintf("service: %v (%.0f%%) or %v (%.0f%%), mean %v\n", p.fast.String(), 100*(1-p.slowFrac), p.slow.String(), 100*p.slowFrac, mean) +
		fmt.Sprintf("calls:   Poisson arrivals at ρ × %d / %v; %d measured after %d", lc.workers, mean, cfg.calls, lc.warmup)
}

// pointConfig is one point of the sweep.
type pointConfig struct {
	profile        profile
	seed           uint64
	workers        int
	stopWork, shed bool
	rho            float64
	warmup, calls  int
	timeout        time.Duration
	metrics        *metrics // nil: no -metrics
}

// pointName names one policy at one load, in the progress line and as
// the key of its metrics: "ρ 0.5 Percentile{Quantile: 0.9}".
func pointName(rho float64, policy string) string { return fmt.Sprintf("ρ %g %s", rho, policy) }

// loadPoint serves one load to one policy and measures the calls after
// the warm-up. The arrival times depend only on the seed and the rate, so
// every policy at one load meets the same stream of calls.
func loadPoint(ctx context.Context, pc pointConfig, pol loadPolicy, onCall func()) (row loadRow, err error) {
	// The point's Observer is made once the transport's delay is, and
	// before the first call, on whose goroutine a breaker may open.
	key := pointName(pc.rho, pol.name)
	var obs *hedgeotel.Observer
	tr, err := pol.newTransport(func(string) { obs.BreakerOpened(key) })
	if err != nil {
		return loadRow{}, err
	}
	if obs, err = pc.metrics.observer(key, tr.Delay); err != nil {
		return loadRow{}, err
	}
	if obs != nil {
		tr.Observer = obs
	}
	srv, err := startLoadServer(pc.profile, pc.seed, pc.workers, pc.stopWork, pc.shed)
	if err != nil {
		return loadRow{}, err
	}
	// Once every call has returned, what is left in flight are losers,
	// the last of which the server would wait for; over HTTP/2 it would
	// then wait a second more for the client to hang up.
	defer func() { err = errors.Join(err, srv.abort()) }()
	client := loadClient(tr, pc.workers)
	defer client.CloseIdleConnections()

	rate := pc.rho * float64(pc.workers) / pc.profile.mean().Seconds() // calls per second
	calls := make([]callTally, pc.warmup+pc.calls)
	openLoop(ctx, rate, pc.seed, len(calls), func(i int) {
		calls[i].run(ctx, client, srv.url, pc.timeout)
		onCall()
	})
	row = summarizeLoad(pol.name, pc.rho, calls[pc.warmup:])
	if tr.MaxAttempts != 1 {
		row.delay = tr.Delay.Next(context.Background(), 1)
	}
	return row, nil
}
