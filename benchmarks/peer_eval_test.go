package benchmarks

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cristalhq/hedgedhttp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/lab"
)

// The evaluation that bhope/hedge publishes in its README, replayed over
// loopback: an httptest upstream whose latency is lognormal with a mean
// of 5ms and a standard deviation of 2ms, where one request in twenty is
// a straggler ten times slower (lab.Stragglers), and whose handler sleeps
// that long or until the request is cancelled; 20 clients, each sending
// its next request when the last one answered; 50,000 requests per setup.
// The server counts the requests of each setup, so that extra requests
// are those that reached it, cancelled or not.
//
// The setups take turns in rounds, so that a change in the machine's load
// falls on each alike. This is real time on a real network stack, so the
// figures are a measurement, not a test: they move with the machine.
// Run with -peer.full for the peer's 50,000 requests per setup:
//
//	cd benchmarks && go test -run '^TestPeerEvaluation$' -v -peer.full .
//
// Without it, each setup sends a few hundred requests: a check that every
// setup works end to end, whose figures mean little.
//
// The peer's own transport is not a row: its module
// (github.com/bhope/hedge) is not on the Go module proxy.

var (
	peerFull     = flag.Bool("peer.full", false, "peer evaluation: 50,000 requests per setup, as the peer's README has it")
	peerRequests = flag.Int("peer.requests", 0, "peer evaluation: requests per setup; 0 means 50,000 with -peer.full, else 600")
)

// peerTail are the quantiles of the table of the tail.
var peerTail = []float64{0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999}

// peerClients is how many clients send requests at once.
const peerClients = 20

// peerRowHeader names the setup a request belongs to, for the server's
// count; every hedging transport copies it onto its hedges.
const peerRowHeader = "X-Peer-Row"

// peerSetup is one row of the evaluation: a name, and the RoundTripper it
// sends through, over base.
type peerSetup struct {
	name string
	rt   func(base http.RoundTripper) (http.RoundTripper, error)
}

// peerSetups are the rows. "hedgehttp, static 10ms" sends hedgedhttp's
// plan through hedgehttp, which tells what the mechanism costs from what
// the learned plan does; Inline shows what the first attempt sent from
// the caller's goroutine costs the requests a hedge wins.
var peerSetups = []peerSetup{
	{"no hedging", func(base http.RoundTripper) (http.RoundTripper, error) { return base, nil }},
	{"hedgedhttp, static 10ms", func(base http.RoundTripper) (http.RoundTripper, error) {
		return hedgedhttp.NewRoundTripper(10*time.Millisecond, 2, base)
	}},
	{"&hedgehttp.Transport{}", func(base http.RoundTripper) (http.RoundTripper, error) {
		return &hedgehttp.Transport{Base: base}, nil
	}},
	{"&hedgehttp.Transport{Inline: true}", func(base http.RoundTripper) (http.RoundTripper, error) {
		return &hedgehttp.Transport{Base: base, Inline: true}, nil
	}},
	{"hedgehttp, static 10ms", func(base http.RoundTripper) (http.RoundTripper, error) {
		return &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(10 * time.Millisecond), MaxAttempts: 2}, nil
	}},
	{"Percentile{0.9} + 3 budgets", func(base http.RoundTripper) (http.RoundTripper, error) {
		win := &hedge.WinRateBudget{Key: hedgehttp.Route}
		breaker := &hedge.Breaker{Key: hedgehttp.Route}
		ratio := &hedge.RatioBudget{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}
		return &hedgehttp.Transport{Base: base, Delay: &hedge.Percentile{Quantile: 0.9},
			Budget: hedge.AllOf(win, breaker, ratio)}, nil
	}},
	{"Planner{Load: 0.1}, no budget", func(base http.RoundTripper) (http.RoundTripper, error) {
		return &hedgehttp.Transport{Base: base, Delay: &hedge.Planner{Load: 0.1}}, nil
	}},
}

// stragglerServer is the upstream: it sleeps a draw of lab.Stragglers, or
// until the request is cancelled, and counts the requests of each setup.
type stragglerServer struct {
	hits []atomic.Int64 // by setup
	n    atomic.Uint64  // requests so far: the draw of each
}

func (s *stragglerServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if row, err := strconv.Atoi(r.Header.Get(peerRowHeader)); err == nil && row >= 0 && row < len(s.hits) {
		s.hits[row].Add(1)
	}
	d := lab.Stragglers.Draw(rand.New(rand.NewPCG(0x70656572, s.n.Add(1))))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		io.WriteString(w, "ok")
	case <-r.Context().Done():
	}
}

// peerRow is what one setup did.
type peerRow struct {
	name          string
	lat           []time.Duration
	sorted        []time.Duration // lat, sorted
	hits, failed  int64
	p50, p95, p99 time.Duration
}

func (r peerRow) extra() float64 { return float64(r.hits)/float64(len(r.lat)) - 1 }

func TestPeerEvaluation(t *testing.T) {
	n := *peerRequests
	if n == 0 {
		n = 600
		if *peerFull {
			n = 50_000
		}
	}
	rounds := 10
	if n < 10_000 {
		rounds = 2
	}
	srv := &stragglerServer{hits: make([]atomic.Int64, len(peerSetups))}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	clients := make([]*http.Client, len(peerSetups))
	for i, s := range peerSetups {
		// Each setup gets a pool of its own, large enough for its clients
		// and their hedges: http.DefaultTransport keeps 2 idle
		// connections per host, and would open and close connections for
		// every setup alike.
		base := ts.Client().Transport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = 4 * peerClients
		defer base.CloseIdleConnections()
		rt, err := s.rt(base)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		clients[i] = &http.Client{Transport: rt}
	}

	before := loadAverage()
	start := time.Now()
	rows := make([]peerRow, len(peerSetups))
	for round := range rounds {
		per := n / rounds
		if round < n%rounds {
			per++
		}
		// Each round starts with another setup.
		for k := range peerSetups {
			i := (round + k) % len(peerSetups)
			lat, failed := peerRound(ts.URL, clients[i], i, per)
			rows[i].lat = append(rows[i].lat, lat...)
			rows[i].failed += failed
		}
	}
	elapsed := time.Since(start)

	var b strings.Builder
	fmt.Fprintf(&b, "lognormal 5±2ms, 5%% 10× slower, over loopback: %d requests per setup from %d clients, in %d rounds, in %v\n",
		n, peerClients, rounds, elapsed.Round(time.Second))
	fmt.Fprintf(&b, "GOMAXPROCS %d, load average %s before and %s after\n", runtime.GOMAXPROCS(0), before, loadAverage())
	fmt.Fprintf(&b, "%-36s %8s %8s %8s %8s\n", "", "p50", "p95", "p99", "extra")
	for i := range rows {
		r := &rows[i]
		r.name = peerSetups[i].name
		r.hits = srv.hits[i].Load()
		s := slices.Sorted(slices.Values(r.lat))
		r.sorted = s
		r.p50, r.p95, r.p99 = lab.NearestRank(s, 0.5), lab.NearestRank(s, 0.95), lab.NearestRank(s, 0.99)
		fmt.Fprintf(&b, "%-36s %8s %8s %8s %7.1f%%\n", r.name, peerMS(r.p50), peerMS(r.p95), peerMS(r.p99), 100*r.extra())
	}
	// The tail around p99, finer: where a learned plan and a static one
	// part, and how far each setup's stragglers reach past p99.
	fmt.Fprintf(&b, "\n%-36s", "the tail, ms")
	for _, q := range peerTail {
		fmt.Fprintf(&b, " %8s", "p"+strconv.FormatFloat(100*q, 'g', -1, 64))
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-36s", r.name)
		for _, q := range peerTail {
			fmt.Fprintf(&b, " %8.2f", float64(lab.NearestRank(r.sorted, q))/float64(time.Millisecond))
		}
		b.WriteString("\n")
	}
	// Past p99, where a setup's tail is made: requests slower than a
	// hedged straggler, and, for hedgehttp's rows, the hedges their
	// budgets refused.
	fmt.Fprintf(&b, "\n%-36s %8s %8s %8s %8s\n", "requests slower than", "20ms", "25ms", "40ms", "refused")
	for i, r := range rows {
		refused := "-"
		if tr, ok := clients[i].Transport.(*hedgehttp.Transport); ok {
			var n int64
			for _, s := range tr.Stats() {
				n += s.BudgetRefusals
			}
			refused = strconv.FormatInt(n, 10)
		}
		fmt.Fprintf(&b, "%-36s %8d %8d %8d %8s\n", r.name, slower(r.lat, 20), slower(r.lat, 25), slower(r.lat, 40), refused)
	}
	t.Log("\n" + b.String())

	// What must hold whatever the machine's load: every request answered,
	// and each reached the server once, or at most as many times as its
	// setup sends attempts.
	for i, r := range rows {
		most := int64(len(r.lat)) * 3
		if i == 0 {
			most = int64(len(r.lat))
		}
		if r.failed > 0 || len(r.lat) != n || r.hits < int64(len(r.lat)) || r.hits > most {
			t.Errorf("%s: %d requests, %d failed, %d reached the server", r.name, len(r.lat), r.failed, r.hits)
		}
	}
}

// slower counts the latencies in lat longer than ms milliseconds.
func slower(lat []time.Duration, ms int) int {
	n := 0
	for _, l := range lat {
		if l > time.Duration(ms)*time.Millisecond {
			n++
		}
	}
	return n
}

// peerRound sends n GET requests of setup row through client from
// peerClients clients at once, and returns the latency of each that
// answered 200, and how many did not.
func peerRound(url string, client *http.Client, row, n int) ([]time.Duration, int64) {
	var (
		next   atomic.Int64
		failed atomic.Int64
		mu     sync.Mutex
		lat    = make([]time.Duration, 0, n)
		wg     sync.WaitGroup
	)
	for range peerClients {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url+"/item", nil)
				if err != nil {
					failed.Add(1)
					continue
				}
				req.Header.Set(peerRowHeader, strconv.Itoa(row))
				begin := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := time.Since(begin)
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
					continue
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, failed.Load()
}

// peerMS formats d in milliseconds with one decimal, as the peer's README
// does.
func peerMS(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// loadAverage is the machine's load average over the last minute, or "?"
// where /proc/loadavg does not exist.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
