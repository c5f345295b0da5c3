package lab

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// Closed is a closed-loop run on an upstream without queues: Clients
// clients, each sending its next call when its last one returned, until
// Calls calls have been made; every attempt takes its own draw of
// Service, or less if it is cancelled first, as a server whose handler
// sleeps that long or until its request ends. It is the peer's
// evaluation over loopback (lab.Stragglers, 20 clients, 50,000 requests)
// in virtual time. Every call is measured: a learned delay warms up on
// the measured calls, as it does over loopback. The zero value of each
// field is a default: 20 clients, 50,000 calls, Stragglers. A Closed is a
// plain value.
type Closed struct {
	Service Upstream
	Clients int
	Calls   int
	// Seed varies the draws; attempt k of call i draws as a Load of the
	// same Seed draws it.
	Seed uint64
}

func (c Closed) withDefaults() Closed {
	if c.Service.Draw == nil {
		c.Service = Stragglers
	}
	if c.Clients <= 0 {
		c.Clients = 20
	}
	if c.Calls <= 0 {
		c.Calls = 50_000
	}
	return c
}

// latency is the draw of attempt k of call i, numbered from 0 in the
// order the calls start.
func (c Closed) latency(i, k int) time.Duration {
	return c.Service.Draw(rand.New(rand.NewPCG(uint64(i), uint64(k)+1+c.Seed<<32)))
}

// RunClosed plays c's calls through hedge.Do with the contender's policy,
// made inside the run's synctest bubble, and summarizes them. Its figures
// are a pure function of c and the policy: virtual time is exact, and the
// draws depend only on the seed and the indices of call and attempt.
func RunClosed(t *testing.T, c Closed, ct Contender) Row {
	t.Helper()
	c = c.withDefaults()
	var row Row
	synctest.Test(t, func(t *testing.T) {
		p := ct.Policy()
		lat := make([]time.Duration, c.Calls)
		var next, attempts atomic.Int64
		var wg sync.WaitGroup
		for range c.Clients {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= c.Calls {
						return
					}
					attempt := func(ctx context.Context) (int, error) {
						attempts.Add(1)
						if err := Wait(ctx, c.latency(i, hedge.Attempt(ctx))); err != nil {
							return 0, err
						}
						return i, nil
					}
					begin := time.Now()
					if _, err := hedge.Do(t.Context(), p, attempt); err != nil {
						t.Errorf("call %d: %v", i, err)
						return
					}
					lat[i] = time.Since(begin)
				}
			})
		}
		wg.Wait()
		row = summarize(ct.Name, lat, int(attempts.Load()))
	})
	return row
}

// table returns the draws of c's calls, for fixed plans of up to hedges
// hedges.
func (c Closed) table(hedges int) latencyTable {
	t := latencyTable{hedges + 1, make([]time.Duration, c.Calls*(hedges+1))}
	for i := range c.Calls {
		for k := range t.attempts {
			t.lat[i*t.attempts+k] = c.latency(i, k)
		}
	}
	return t
}

// ClosedFixed returns what h hedges every d do to c's calls, computed
// without running them: on an upstream without queues a fixed plan's
// latencies do not depend on how many clients send the calls, so it is
// exactly what RunClosed gives for hedge.Fixed(d) and MaxAttempts h+1.
func ClosedFixed(c Closed, d time.Duration, h int) Row {
	return c.withDefaults().table(h).fixed(d, h)
}

// ClosedOracle returns the best fixed plan in hindsight on c's calls: one
// or two hedges at any delay from 1ms to 1s, 2 % apart, with the least
// p99 at no more than amp attempts per call.
func ClosedOracle(c Closed, amp float64) Row {
	c = c.withDefaults()
	var plans []fixedPlan
	for h := 1; h <= 2; h++ {
		for x := float64(time.Millisecond); x <= float64(time.Second); x *= 1.02 {
			plans = append(plans, fixedPlan{time.Duration(x), h})
		}
	}
	table := c.table(2)
	return table.oracle(plans, amp, table.fixed(0, 0))
}
