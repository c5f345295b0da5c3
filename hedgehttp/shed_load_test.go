package hedgehttp_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// upstream says how a workerPool's requests behave.
type upstream struct {
	name string
	// slowCalls makes a call's service time the same on every attempt:
	// a slow request is slow wherever it runs, so a hedge cannot beat it.
	// Otherwise each attempt draws its own.
	slowCalls bool
	// finishes makes a request that got a worker hold it for its whole
	// service time, whether its client is still waiting or not.
	// Otherwise a request whose client gave up leaves at once.
	finishes bool
}

var (
	// Slowness hedging can beat, and a server that stops work for a
	// client that left: hedging's best case.
	randomSlowness = upstream{name: "slow attempts at random, work stops on cancel"}
	// Slowness no hedge can beat, and work that runs on regardless:
	// every hedge is pure extra load.
	slowRequests = upstream{name: "slow requests stay slow, work runs to the end", slowCalls: true, finishes: true}
)

// workerPool is a server with a fixed number of workers: a request waits
// for one in arrival order, holds it for its service time and answers.
// A request waiting for a worker leaves the queue when its client gives
// up. Service times are a pure function of (call, attempt), so every run
// meets the same upstream: 90 % take 10–20 ms, 10 % take 100–150 ms.
type workerPool struct {
	upstream
	slots  chan struct{}
	worked atomic.Int64 // requests that got a worker
	active sync.WaitGroup
}

func (p *workerPool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.active.Add(1)
	defer p.active.Done()
	call, _ := strconv.Atoi(r.URL.Query().Get("call"))
	k, _ := strconv.Atoi(r.Header.Get(hedgehttp.DefaultAttemptHeader))
	if p.slowCalls {
		k = 0
	}
	select {
	case p.slots <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	defer func() { <-p.slots }()
	p.worked.Add(1)
	t := time.NewTimer(serviceTime(call, k))
	defer t.Stop()
	cancelled := r.Context().Done()
	if p.finishes {
		cancelled = nil
	}
	select {
	case <-t.C:
		io.WriteString(w, "ok")
	case <-cancelled:
	}
}

func serviceTime(call, k int) time.Duration {
	u := unit(uint64(call)<<4 | uint64(k))
	if u < 0.9 {
		return 10*ms + time.Duration(u/0.9*float64(10*ms))
	}
	return 100*ms + time.Duration((u-0.9)/0.1*float64(50*ms))
}

// unit maps x to [0, 1) with splitmix64's finaliser.
func unit(x uint64) float64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// load is one run: clients that each make calls one after another, with
// no pause, against a pool of workers.
type load struct {
	name     string
	clients  int
	hedging  bool // one hedge after 30 ms, or none
	bucket   bool // the hedging clients share a hedge.TokenBucket(10, 0.1)
	shedding bool // a Shedder with Limit poolWorkers in front of the pool
}

type loadResult struct {
	p50, p99  time.Duration
	sent      float64 // requests sent per call
	worked    float64 // requests that got a worker, per call
	shed      uint64
	hedgeWins int64
	failed    int
}

const (
	poolWorkers    = 8
	callsPerClient = 160
	warmUp         = 20 // calls per client left out of the figures
)

// runLoad runs l against u over real net/http, in virtual time, and
// returns the figures of the calls past each client's warm-up.
func runLoad(t *testing.T, u upstream, l load) loadResult {
	var r loadResult
	synctest.Test(t, func(t *testing.T) {
		pool := &workerPool{upstream: u, slots: make(chan struct{}, poolWorkers)}
		var h http.Handler = pool
		shedder := &hedgehttp.Shedder{Limit: poolWorkers, Handler: pool}
		if l.shedding {
			h = shedder
		}
		sent := &attempts{base: servePipes(t, h), t0: time.Now()}
		tr := &hedgehttp.Transport{Base: sent, Delay: hedge.Fixed(30 * ms), MaxAttempts: 1, AttemptHeader: hedgehttp.DefaultAttemptHeader}
		if l.hedging {
			tr.MaxAttempts = 2
		}
		if l.bucket {
			b := &hedge.TokenBucket{MaxTokens: 10, TokenRatio: 0.1}
			tr.Budget = b
		}
		var (
			mu        sync.Mutex
			latencies []time.Duration
			wg        sync.WaitGroup
		)
		for c := range l.clients {
			wg.Go(func() {
				for i := range callsPerClient {
					start := time.Now()
					req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://pool/?call=%d", c*callsPerClient+i), nil)
					resp, err := tr.RoundTrip(req)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					took := time.Since(start)
					mu.Lock()
					if err != nil || resp.StatusCode != http.StatusOK {
						r.failed++
					} else if i >= warmUp {
						latencies = append(latencies, took)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		pool.active.Wait() // losers whose work runs to the end
		slices.Sort(latencies)
		calls := float64(l.clients * callsPerClient)
		r.p50, r.p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
		r.sent = float64(len(sent.sent())) / calls
		r.worked = float64(pool.worked.Load()) / calls
		r.shed = shedder.Shed()
		for _, s := range tr.Stats() {
			r.hedgeWins += s.Wins[1]
		}
	})
	return r
}

// quantile returns the q-quantile of sorted by the nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(i, 0)]
}

// TestShedderUnderOverload measures, in virtual time, a pool of 8
// workers behind real net/http, called by clients that hedge once after
// 30 ms. At twice the load the pool can serve (16 clients, each calling
// again as soon as it has its answer), every call waits in the queue
// past the hedge delay, so every call hedges. A Shedder answers those
// hedges at once with a 503, and the primaries' p99 stays within 10 % of
// what it is when no client hedges, on either upstream. Without it, on
// the upstream where hedges cannot win, they only add work, and p99
// rises past that. With spare capacity (4 clients) the Shedder lets the
// hedges through, and on the upstream where they can win they cut the
// tail.
//
//	go test -run TestShedderUnderOverload -v ./hedgehttp
func TestShedderUnderOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run")
	}
	const over, spare = 2 * poolWorkers, poolWorkers / 2
	loads := []load{
		{name: "2x load, no hedging", clients: over, shedding: true},
		{name: "2x load, hedging, shedding", clients: over, hedging: true, shedding: true},
		{name: "2x load, hedging + bucket, shedding", clients: over, hedging: true, bucket: true, shedding: true},
		{name: "2x load, hedging, no shedding", clients: over, hedging: true},
		{name: "0.5x load, no hedging", clients: spare, shedding: true},
		{name: "0.5x load, hedging, shedding", clients: spare, hedging: true, shedding: true},
	}
	for _, u := range []upstream{randomSlowness, slowRequests} {
		t.Run(u.name, func(t *testing.T) {
			results := map[string]loadResult{}
			var table strings.Builder
			fmt.Fprintf(&table, "%s\n%-36s %7s %7s %7s %7s %6s %10s\n", u.name, "", "p50", "p99", "sent", "worked", "shed", "hedge wins")
			for _, l := range loads {
				r := runLoad(t, u, l)
				if r.failed != 0 {
					t.Errorf("%s: %d calls failed", l.name, r.failed)
				}
				results[l.name] = r
				fmt.Fprintf(&table, "%-36s %7v %7v %6.3fx %6.3fx %6d %10d\n", l.name,
					r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond), r.sent, r.worked, r.shed, r.hedgeWins)
			}
			t.Logf("%d workers, %d calls per client, the first %d of each left out\n%s", poolWorkers, callsPerClient, warmUp, table.String())

			base := results["2x load, no hedging"].p99
			limit := base * 11 / 10
			for _, name := range []string{"2x load, hedging, shedding", "2x load, hedging + bucket, shedding"} {
				if p99 := results[name].p99; p99 > limit {
					t.Errorf("%s: p99 %v, more than 1.1 × %v without hedging", name, p99, base)
				}
			}
			switch u {
			case slowRequests: // the figure above means something only if hedging can hurt
				if p99 := results["2x load, hedging, no shedding"].p99; p99 <= limit {
					t.Errorf("without shedding, hedging kept p99 at %v, within 1.1 × %v: this upstream no longer shows the harm", p99, base)
				}
			case randomSlowness:
				if spare, hedged := results["0.5x load, no hedging"].p99, results["0.5x load, hedging, shedding"].p99; hedged >= spare {
					t.Errorf("with spare capacity, hedging through the Shedder left p99 at %v, not under %v", hedged, spare)
				}
			}
		})
	}
}
