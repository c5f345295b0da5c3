package hedge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tailcut/hedge"
)

// Auto is where to start: one expression makes the production Policy for
// one kind of call, which every call of that kind then shares.
func ExampleAuto() {
	var profiles = hedge.Auto[string]()

	v, err := hedge.Do(context.Background(), profiles, func(ctx context.Context) (string, error) {
		return "profile of user 7", nil // a call that honours ctx
	})
	fmt.Println(v, err)
	// Output:
	// profile of user 7 <nil>
}

// An Adaptive keyed by route learns a plan per route. On a route whose
// calls answer 90 % of the time in 20–45ms and 10 % in 450–600ms, one
// hedge cannot help the p99 (1 % of calls would draw two slow
// attempts), and two just past the fast mode cost 0.11 extra attempts
// per call: Load 0.15 affords them. A route it has not seen yet plans no
// hedge until it knows its upstream. Do would feed it from live calls;
// here 1,000 latencies are fed to Learn directly.
func ExampleAdaptive() {
	a := &hedge.Adaptive{Key: routeOf, Load: 0.15}
	_ = hedge.Policy[string]{Delay: a, Budget: a, Timeout: time.Second}

	lookup := onRoute("GET /users/{id}")
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		d := 20*time.Millisecond + time.Duration(r.Int64N(int64(25*time.Millisecond)))
		if r.IntN(10) == 0 {
			d = 450*time.Millisecond + time.Duration(r.Int64N(int64(150*time.Millisecond)))
		}
		a.Learn(lookup, d, true)
	}
	for _, ctx := range []context.Context{lookup, onRoute("GET /export")} {
		plan := a.Plan(ctx)
		if plan.Hedges == 0 {
			fmt.Printf("%s: no hedge yet\n", routeOf(ctx))
			continue
		}
		fmt.Printf("%s: %d hedges, %v apart, for %.2f extra attempts per call\n",
			routeOf(ctx), plan.Hedges, plan.Delay.Round(100*time.Microsecond), plan.Load)
	}
	// Output:
	// GET /users/{id}: 2 hedges, 45.6ms apart, for 0.11 extra attempts per call
	// GET /export: no hedge yet
}
