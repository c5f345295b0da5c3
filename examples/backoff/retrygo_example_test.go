package backoff_test

import (
	"context"
	"fmt"
	"time"

	retrygo "github.com/avast/retry-go/v4"

	"github.com/tailcut/hedge"
)

// A retry loop of avast/retry-go around hedge.Do, on one budget with Do's
// hedges. Do's classifier answers Failed for a failing replica, so that
// each try of the loop is one request and its hedges, not a retry inside
// the retry. DoOutcome says when Do's result was terminal, and Tries turns
// that into the loop's end.
func Example_retryGo() {
	ctx := context.Background()
	budget, err := hedge.NewRatioBudget(0.5, 1, 10*time.Second, nil)
	if err != nil {
		panic(err)
	}
	policy := hedge.Policy[string]{
		Delay:  hedge.Fixed(time.Hour), // no hedge within this example's instant calls
		Budget: budget,
		Classify: func(_ string, err error) hedge.Outcome {
			if err != nil {
				return hedge.Failed // the loop retries, with its backoff
			}
			return hedge.Accept
		},
	}
	requests := 0
	fetch := func(context.Context) (string, error) {
		requests++
		if requests < 3 {
			return "", errDown
		}
		return "profile", nil
	}
	try := hedge.Tries(ctx, budget, func() (string, error) {
		v, o, err := hedge.DoOutcome(ctx, policy, fetch)
		if o == hedge.Terminal {
			err = hedge.Permanent(err)
		}
		return v, err
	}, retrygo.Unrecoverable)
	v, err := retrygo.DoWithData(try, retrygo.Context(ctx), retrygo.Attempts(5), retrygo.Delay(0))
	fmt.Printf("%s %v after %d requests\n", v, err, requests)

	// Output:
	// profile <nil> after 3 requests
}
