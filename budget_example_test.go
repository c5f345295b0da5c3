package hedge_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
)

// A breaker per route: the export's primaries fail, so its hedges stop,
// while its primaries and the lookup's hedges go on. After the cooldown, a
// trial hedge that succeeds closes it.
func ExampleBreaker() {
	mock := clock.NewMock()
	breaker := &hedge.Breaker{
		Key:      routeOf,
		Samples:  10, // judge the last 10 primaries of each route
		Cooldown: 5 * time.Second,
		OnOpen:   func(route string) { fmt.Println("open:", route) },
		Clock:    mock,
	}
	export := onRoute("GET /export") // a call's context, as Do hands it to the budget
	lookup := onRoute("GET /users/{id}")

	// Do reports every attempt's outcome; here, ten failed primaries.
	for range 10 {
		breaker.Done(export, 0, hedge.Retryable)
	}
	fmt.Println("export primary:", breaker.Allow(export, 0), "hedge:", breaker.Allow(export, 1))
	fmt.Println("lookup hedge:", breaker.Allow(lookup, 1))

	mock.Add(5 * time.Second)
	fmt.Println(breaker.State(export), "trial:", breaker.Allow(export, 1), "another:", breaker.Allow(export, 1))
	breaker.Done(export, 1, hedge.Accept)
	fmt.Println(breaker.State(export))
	// Output:
	// open: GET /export
	// export primary: true hedge: false
	// lookup hedge: true
	// half-open trial: true another: false
	// closed
}

// Three bounds on one policy: at most 10% extra attempts (plus one a
// second), one hedge in flight at a time, and no hedges for a route whose
// primaries fail. Here every attempt fails at once, so each call retries
// at once while the budgets allow it. The breaker opens at the third
// call's failure; from then on the ratio budget grants each retry and the
// breaker refuses it, and AllOf refunds the ratio budget's grant.
func ExampleAllOf() {
	ratio := &hedge.RatioBudget{Ratio: 0.1, MinPerSecond: 1, Window: 10 * time.Second, Clock: clock.NewMock()}
	inflight := &hedge.InflightLimit{Max: 1}
	breaker := &hedge.Breaker{Samples: 3}
	p := hedge.Policy[string]{
		Budget: hedge.AllOf(ratio, inflight, breaker),
		Delay:  hedge.Fixed(time.Hour), // no timed hedges: retries only
	}
	for call := range 5 {
		attempts := 0
		_, err := hedge.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			attempts++
			return "", errors.New("unavailable")
		})
		fmt.Println("call", call, "attempts:", attempts, err)
	}
	left := 0
	for ratio.Allow(context.Background(), 1) {
		left++
	}
	fmt.Println("ratio budget: 2 of", left+2, "hedges spent; permits in flight:", inflight.InFlight())
	// Output:
	// call 0 attempts: 2 unavailable
	// call 1 attempts: 2 unavailable
	// call 2 attempts: 1 unavailable
	// call 3 attempts: 1 unavailable
	// call 4 attempts: 1 unavailable
	// ratio budget: 2 of 10 hedges spent; permits in flight: 0
}
