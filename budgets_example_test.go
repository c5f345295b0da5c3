package hedge_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
)

// A RatioBudget of 10 %: every call deposits a tenth of an attempt, every
// hedge withdraws a whole one, within a sliding 10-second window. Do asks
// it for every call (Allow 0) and every hedge (Allow 1); here the budget
// is driven directly, on a mock clock. The credit a healthy second leaves
// unspent carries over, so a burst of slow calls gets its hedges, up to
// 10 % of the window's calls.
func ExampleRatioBudget() {
	mock := clock.NewMock()
	budget := &hedge.RatioBudget{Ratio: 0.1, Window: 10 * time.Second, Clock: mock} // no Clock: real time
	ctx := context.Background()

	for range 100 { // a healthy second: 100 calls, none hedged
		budget.Allow(ctx, 0)
	}
	mock.Add(3 * time.Second)
	hedged := 0
	for range 20 { // a burst of 20 slow calls, each asking for a hedge
		budget.Allow(ctx, 0)
		if budget.Allow(ctx, 1) {
			hedged++
		}
	}
	fmt.Println("slow calls hedged:", hedged, "of 20, a tenth of the window's 120 calls")

	mock.Add(10 * time.Second) // the window has moved past every call
	fmt.Println("a hedge with no call in the window:", budget.Allow(ctx, 1))

	bad := hedge.Policy[string]{Budget: &hedge.RatioBudget{Window: 1500 * time.Millisecond}}
	fmt.Println(bad.Validate())
	// Output:
	// slow calls hedged: 12 of 20, a tenth of the window's 120 calls
	// a hedge with no call in the window: false
	// hedge: invalid budget: RatioBudget.Window 1.5s is not a whole number of seconds from 1s to 1m0s
}

// A TokenBucket throttles hedges as gRPC's retryThrottling does: it
// starts full, a retryable failure drains a token, a success refills
// tokenRatio of one, and no hedge goes out while half of it or less is
// left. Do reports every attempt's outcome through Done; here the bucket
// is driven directly. Tokens are counted in thousandths, so the threshold
// is exact.
func ExampleTokenBucket() {
	bucket := &hedge.TokenBucket{MaxTokens: 10, TokenRatio: 0.2}
	ctx := context.Background()
	report := func(n int, o hedge.Outcome) {
		for range n {
			bucket.Done(ctx, 0, o)
		}
		fmt.Printf("%v tokens, a hedge: %v\n", bucket.Tokens(), bucket.Allow(ctx, 1))
	}
	report(6, hedge.Retryable) // 6 failures: 4 left
	report(5, hedge.Accept)    // 5 successes at 0.2: exactly half, still none
	report(1, hedge.Accept)    // one more, and hedges go out again
	// Output:
	// 4 tokens, a hedge: false
	// 5 tokens, a hedge: false
	// 5.2 tokens, a hedge: true
}

// An InflightLimit caps the hedges running at once across every call that
// shares it. Primaries take no permit. Do returns a hedge's permit (Done)
// as soon as its function returns, whatever the outcome; here the limit
// is driven directly.
func ExampleInflightLimit() {
	limit := &hedge.InflightLimit{Max: 2}
	ctx := context.Background()
	fmt.Println("hedges:", limit.Allow(ctx, 1), limit.Allow(ctx, 1), limit.Allow(ctx, 1), "in flight:", limit.InFlight())
	fmt.Println("a primary:", limit.Allow(ctx, 0))
	limit.Done(ctx, 1, hedge.Canceled) // a hedge lost its race and returned
	fmt.Println("in flight:", limit.InFlight(), "another hedge:", limit.Allow(ctx, 1))

	_ = hedge.Policy[string]{Budget: limit} // share it between the policies of one upstream
	// Output:
	// hedges: true true false in flight: 2
	// a primary: true
	// in flight: 1 another hedge: true
}
