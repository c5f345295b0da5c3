// Command hedgedemo shows what hedging does to tail latency. It starts an
// HTTP server on loopback whose replies are mostly fast and sometimes
// slow, calls it many times without hedging and then with hedging, and
// prints the latency percentiles and the extra load each way cost.
//
//	go run ./cmd/hedgedemo [-calls 1000] [-concurrency 50] [-delay 50ms] [-plot tail.png]
//
// With -load, the server has a fixed pool of workers and a FIFO queue in
// front of them, so that a hedge costs the server what it would cost a
// real one: a worker, or a place in the queue ahead of another call. The
// demo then sweeps the offered load: calls arrive as a Poisson process at
// utilisations of 0.3 to 0.9, and each load is served afresh to each
// policy. A request whose client has gone leaves the queue; one already
// running runs to the end, unless -stopwork. -shed puts a
// hedgehttp.Shedder in front of the pool.
//
//	go run ./cmd/hedgedemo -load [-workers 16] [-scale 0.2] [-shed] [-stopwork]
//
// Progress goes to standard error, as a bar on a terminal and as plain
// lines in a log. A probe measures how late timers fire while the demo
// runs, and the demo warns when that was late enough to spoil its
// figures. -plot draws the latency of each policy by percentile, or with
// -load its p99 against the load, as a PNG or an SVG.
//
// With -metrics, hedgeotel records every call of every row, keyed by the
// row's name, and /metrics on that address serves them in the
// Prometheus text format while the demo runs and after it, until the
// demo is interrupted.
//
//	go run ./cmd/hedgedemo -metrics :9464
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/chart"
)

type config struct {
	calls, concurrency int
	delay, timeout     time.Duration
	profile            profile
	seed               uint64
	sweep              bool // run the -load sweep instead
	load               loadConfig
	metrics            *metrics // nil: no -metrics
	plot               string   // the picture's file, for -plot; "": none
}

func main() {
	var (
		cfg         config
		metricsAddr string
	)
	flags := newFlags(&cfg, &metricsAddr, flag.ExitOnError)
	flags.Parse(os.Args[1:]) // ExitOnError: it returns no error

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if flags.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q: hedgedemo takes flags only (-h lists them)", flags.Arg(0))
	} else {
		err = runMain(ctx, cfg, metricsAddr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hedgedemo:", err)
		os.Exit(1)
	}
}

// runMain runs the demo that cfg asks for, with its metrics served at
// metricsAddr unless that is "". It then keeps serving them until ctx
// ends, so that a scrape after the demo still reads its figures.
func runMain(ctx context.Context, cfg config, metricsAddr string) (err error) {
	if metricsAddr != "" {
		if cfg.metrics, err = serveMetrics(metricsAddr); err != nil {
			return fmt.Errorf("-metrics: %w", err)
		}
		defer func() { err = errors.Join(err, cfg.metrics.close()) }()
		fmt.Fprintf(os.Stderr, "metrics at %s\n", cfg.metrics.url)
	}
	demo := run
	if cfg.sweep {
		demo = runLoad
	}
	if err := demo(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		return err
	}
	if cfg.metrics != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "\nmetrics stay at %s until interrupted (Ctrl-C)\n", cfg.metrics.url)
		<-ctx.Done()
	}
	return nil
}

// run starts the server, measures both policies against it and prints
// the table to out and progress to status.
func run(ctx context.Context, cfg config, out, status io.Writer) (err error) {
	switch {
	case cfg.calls < 1 || cfg.concurrency < 1:
		return errors.New("-calls and -concurrency must be at least 1")
	case cfg.profile.slowFrac < 0 || cfg.profile.slowFrac > 1:
		return errors.New("-slowfrac must be between 0 and 1")
	case cfg.plot != "" && chart.CheckPath(cfg.plot) != nil:
		return fmt.Errorf("-plot %w", chart.CheckPath(cfg.plot))
	}
	srv, err := startServer(cfg.profile, cfg.seed)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.close()) }()
	transport := newTransport(cfg.concurrency)
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	probe := startLatenessProbe()
	defer probe.end()
	var rows []row
	for _, r := range demoPolicies(cfg) {
		obs, err := cfg.metrics.observer(r.name, r.policy.Delay)
		if err != nil {
			return err
		}
		if obs != nil {
			r.policy.Observer = obs
		}
		if r.learns {
			drive(ctx, client, srv.url, r.policy, cfg.calls, cfg.concurrency, newProgress(status, r.progress+" warm-up", cfg.calls))
		}
		got := drive(ctx, client, srv.url, r.policy, cfg.calls, cfg.concurrency, newProgress(status, r.progress, cfg.calls))
		got.name = r.rowName()
		rows = append(rows, got)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if err := printTable(out, rows...); err != nil {
		return err
	}
	fmt.Fprintf(out, "One run of %s calls a row: on a busy machine p99 moves from run to run; -seed draws other latencies.\n", thousands(cfg.calls))
	if err := printHistogram(out, rows[0], rows[2]); err != nil {
		return err
	}
	if err := warnIfBusy(out, probe, cfg.delay); err != nil {
		return err
	}
	return plotTailTo(cfg.plot, fmt.Sprintf("%s calls a policy, at concurrency %d", thousands(cfg.calls), cfg.concurrency), rows)
}

// demoPolicy is a row of the default run: a policy, and how it is
// measured.
type demoPolicy struct {
	name, progress string
	policy         hedge.Policy[*http.Response]
	learns         bool // measured after a warm-up run of as many calls
}

// demoPolicies are the rows of the default run with cfg's delay, timeout
// and number of calls, each made afresh.
func demoPolicies(cfg config) []demoPolicy {
	window := max(cfg.calls/2, 2)
	return []demoPolicy{
		{"no hedging", "no hedging", newPolicy(1, hedge.Fixed(cfg.delay), cfg.timeout), false},
		{"1 hedge after " + cfg.delay.String(), "one hedge", newPolicy(2, hedge.Fixed(cfg.delay), cfg.timeout), false},
		// With 10% slow replies, 1% of calls draw a slow primary and a
		// slow hedge: that is the p99 itself, so one hedge leaves p99 on a
		// knife edge. A second hedge takes it off.
		{"2 hedges, every " + cfg.delay.String(), "two hedges", newPolicy(3, hedge.Fixed(cfg.delay), cfg.timeout), false},
		// The learned delays start cold, and under concurrency the first
		// answers are the fast ones: the slow calls are still in flight.
		// They are measured once they have seen the upstream.
		{"Percentile{Quantile: 0.9}", "percentile", newPolicy(3, &hedge.Percentile{Quantile: 0.9}, cfg.timeout), true},
		{"Planner{Load: 0.15}", "planner", newPolicy(3, &hedge.Planner{Load: 0.15, Window: window}, cfg.timeout), true},
		// With the three stock budgets the README recommended before
		// Auto, which refuse nothing while the upstream is healthy.
		{"Planner{0.15}, budgeted", "planner, budgeted", budgeted(newPolicy(3, &hedge.Planner{Load: 0.15, Window: window}, cfg.timeout)), true},
		// The production default, hedge.Auto: its own plan within a bound
		// of 0.1 extra attempts per call, which cannot buy the second
		// hedge that this upstream's p99 needs.
		{"hedge.Auto()", "auto", auto(cfg.timeout), true},
	}
}

// rowName is the name of p's row once it has run: a Planner's says the
// plan it came to.
func (p demoPolicy) rowName() string {
	pl, ok := p.policy.Delay.(*hedge.Planner)
	if !ok {
		return p.name
	}
	plan := pl.Plan()
	return p.name + fmt.Sprintf(": %d×%v", plan.Hedges, plan.Delay.Round(100*time.Microsecond))
}

// thousands writes n with a comma between each group of three digits:
// 1,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// newTransport keeps enough idle connections for every attempt in flight:
// with the default of two per host, most calls would dial afresh and the
// table would measure connection setup instead of the server.
func newTransport(concurrency int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 2 * concurrency
	return t
}

// auto is the production Policy of hedge.Auto, with the demo's timeout
// and its responses' bodies closed.
func auto(timeout time.Duration) hedge.Policy[*http.Response] {
	p := hedge.Auto[*http.Response]()
	p.Timeout, p.Discard = timeout, discardResponse
	return p
}

// newPolicy hedges up to attempts-1 times, as delay says, within timeout.
func newPolicy(attempts int, delay hedge.Delay, timeout time.Duration) hedge.Policy[*http.Response] {
	return hedge.Policy[*http.Response]{
		Delay:       delay,
		MaxAttempts: attempts,
		Timeout:     timeout,
		Discard:     discardResponse,
	}
}

// budgeted gives p the stock budgets the README recommended before Auto:
// hedges must keep winning, none while half the primaries fail, and at
// most a fifth more attempts than calls.
func budgeted(p hedge.Policy[*http.Response]) hedge.Policy[*http.Response] {
	win := &hedge.WinRateBudget{}
	breaker := &hedge.Breaker{}
	ratio := &hedge.RatioBudget{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}
	p.Budget = hedge.AllOf(win, breaker, ratio)
	return p
}

// discardResponse releases a response Do did not return. Its context has
// usually been cancelled already, so the drain rarely saves the connection;
// the bound keeps a large body from holding the attempt's goroutine.
func discardResponse(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// drive makes calls calls through policy, concurrency at a time, and
// returns their latencies, failures and the policy's stats; onCall runs
// after each call. The policy's own Observer, if any, hears the calls too.
func drive(ctx context.Context, client *http.Client, url string, policy hedge.Policy[*http.Response],
	calls, concurrency int, onCall func()) row {
	var stats hedge.Stats
	policy.Observer = tee(&stats, policy.Observer)
	r := row{latencies: make([]time.Duration, calls)}
	var (
		next    atomic.Int64
		mu      sync.Mutex // guards failures and firstErr
		workers sync.WaitGroup
	)
	for range min(concurrency, calls) {
		workers.Go(func() {
			for i := int(next.Add(1) - 1); i < calls; i = int(next.Add(1) - 1) {
				start := time.Now()
				err := get(ctx, client, url, policy)
				r.latencies[i] = time.Since(start)
				if err != nil {
					mu.Lock()
					if r.failures++; r.firstErr == nil {
						r.firstErr = err
					}
					mu.Unlock()
				}
				onCall()
			}
		})
	}
	workers.Wait()
	r.stats = stats.Snapshot()
	return r
}

// tee returns an Observer that hands each report to first, then to
// second unless that is nil.
func tee(first, second hedge.Observer) hedge.Observer {
	if second == nil {
		return first
	}
	return hedge.ObserverFunc(func(ctx context.Context, r hedge.Report) {
		first.Observe(ctx, r)
		second.Observe(ctx, r)
	})
}

// get makes one hedged GET and reads the winner's body to the end, since
// a caller is not done until it has the whole reply.
func get(ctx context.Context, client *http.Client, url string, policy hedge.Policy[*http.Response]) error {
	resp, err := hedge.Do(ctx, policy, func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, hedge.Permanent(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			discardResponse(resp)
			return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return resp, nil
	})
	if err != nil {
		return err
	}
	// The winner's context lasts until the call's deadline: the body can
	// still be read, and the Timeout still bounds the read.
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
