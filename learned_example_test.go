package hedge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tailcut/hedge"
)

// A Percentile learns the p90 of the primary's latency. Do tells it how
// long every primary ran; here latencies of 1ms to 100ms are fed to Learn
// directly. Until it has seen enough of them, it answers Initial (by
// default its Ceiling of 10s: no hedging before the upstream is known).
// Then a call whose primary is stuck sends its hedge at the learned p90.
func ExamplePercentile() {
	p := &hedge.Percentile{Quantile: 0.9}
	ctx := context.Background()
	for i := range 1000 {
		p.Learn(ctx, time.Duration(1+i%100)*time.Millisecond, true)
		if i+1 == 50 || i+1 == 1000 {
			fmt.Printf("after %d calls: hedge at %v\n", i+1, p.Current().Round(time.Millisecond))
		}
	}

	policy := hedge.Policy[string]{Delay: p, Timeout: time.Second}
	v, err := hedge.Do(ctx, policy, func(ctx context.Context) (string, error) {
		if hedge.Attempt(ctx) == 0 {
			<-ctx.Done() // stuck: the hedge goes out after the learned 89ms
			return "", ctx.Err()
		}
		return "answered by the hedge", nil
	})
	fmt.Println(v, err)
	// Output:
	// after 50 calls: hedge at 10s
	// after 1000 calls: hedge at 89ms
	// answered by the hedge <nil>
}

// A Planner told its budget, 15 % extra attempts, finds the plan with the
// least p99 under the latencies it learned. On an upstream that answers
// 90 % of calls in 20–45ms and 10 % in 450–600ms, one hedge cannot help
// the p99 (1 % of calls would draw two slow attempts), so it plans two,
// just past the fast mode. Do would feed it from live calls; here 2,000
// latencies are drawn and fed to Learn directly.
func ExamplePlanner() {
	p := &hedge.Planner{Load: 0.15}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		d := 20*time.Millisecond + time.Duration(r.Int64N(int64(25*time.Millisecond)))
		if r.IntN(10) == 0 {
			d = 450*time.Millisecond + time.Duration(r.Int64N(int64(150*time.Millisecond)))
		}
		p.Learn(ctx, d, true)
	}
	plan := p.Plan()
	fmt.Printf("%d hedges, %v apart: p99 about %v for %.2f extra attempts per call; hedges win %.0f%% of hedged calls\n",
		plan.Hedges, plan.Delay.Round(100*time.Microsecond), plan.Latency.Round(time.Millisecond), plan.Load, 100*plan.WinRate)
	// Next says when each hedge goes out; -1: no third hedge.
	fmt.Println(p.Next(ctx, 0).Round(100*time.Microsecond), p.Next(ctx, 1).Round(100*time.Microsecond), p.Next(ctx, 2))

	// MaxAttempts 0 follows the plan: up to 1+MaxHedges attempts.
	_ = hedge.Policy[string]{Delay: p, Timeout: time.Second}
	// Output:
	// 2 hedges, 45.6ms apart: p99 about 118ms for 0.11 extra attempts per call; hedges win 99% of hedged calls
	// 45.6ms 45.6ms -1ns
}

// A Keyed delay keeps one learned delay per route, so that a slow export
// does not push a fast lookup's delay up. Key names a call's route from
// the context Do gets (hedgehttp.Route, hedgegrpc.Method, or, here, a
// value the caller put there); a route it has not seen yet starts warming
// up on its own.
func ExampleKeyed() {
	delay := &hedge.Keyed{
		Key: routeOf,
		New: func(route string) hedge.Delay { return &hedge.Percentile{Quantile: 0.9} },
	}
	lookup, export := onRoute("GET /users/{id}"), onRoute("GET /export")
	for i := range 1000 {
		delay.Learn(lookup, time.Duration(10+i%10)*time.Millisecond, true)         // 10–19ms
		delay.Learn(export, time.Duration(1000+10*(i%100))*time.Millisecond, true) // 1–1.99s
	}
	for _, ctx := range []context.Context{lookup, export, onRoute("GET /new")} {
		fmt.Printf("%s: hedge at %v\n", routeOf(ctx), delay.Next(ctx, 0).Round(time.Millisecond))
	}
	_ = hedge.Policy[string]{Delay: delay} // one policy for every route
	// Output:
	// GET /users/{id}: hedge at 18ms
	// GET /export: hedge at 1.896s
	// GET /new: hedge at 10s
}
