package backoff_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cenkalti/backoff/v5"

	"github.com/tailcut/hedge"
)

var errDown = errors.New("upstream down")

// retry runs op under backoff.Retry on budget, as hedge.Do draws on it:
// hedge.Tries does the bookkeeping, and marks the end of the loop, when
// the budget refuses a retry, with backoff.Permanent.
func retry(ctx context.Context, budget hedge.Budget, op func() error) (tries int, err error) {
	try := hedge.Tries(ctx, budget, func() (struct{}, error) { tries++; return struct{}{}, op() }, backoff.Permanent)
	_, err = backoff.Retry(ctx, try, backoff.WithBackOff(&backoff.ConstantBackOff{})) // no wait: the example runs at once
	return tries, err
}

type observer func(hedge.Report)

func (f observer) Observe(_ context.Context, r hedge.Report) { f(r) }

// A retry loop and hedge.Do share one gRPC-style token bucket, so retries
// and hedges together stay within one bound: failures of either drain it,
// successes of either refill it, and while half of it or less is left,
// neither adds load to a struggling upstream.
func Example() {
	ctx := context.Background()
	budget, err := hedge.NewTokenBucket(6, 1) // hedges and retries stop at 3 tokens or less
	if err != nil {
		panic(err)
	}
	var report hedge.Report
	policy := hedge.Policy[string]{
		Delay:    hedge.Fixed(0), // hedge at once, to keep the example instant
		Budget:   budget,
		Observer: observer(func(r hedge.Report) { report = r }),
	}
	down := func() error { return errDown }
	healthy := func() error { return nil }

	// The upstream is down: the retry loop spends half of the bucket...
	tries, err := retry(ctx, budget, down)
	fmt.Printf("retry loop: %d tries: %v; tokens %.1f\n", tries, err, budget.Tokens())

	// ...so hedge.Do may not hedge either.
	_, err = hedge.Do(ctx, policy, func(context.Context) (string, error) { return "", errDown })
	fmt.Printf("hedge.Do:   %d attempt, hedge refused %t: %v; tokens %.1f\n",
		report.Attempts, report.BudgetRefusals > 0, err, budget.Tokens())

	// The upstream recovers: the retry loop's successes refill the bucket...
	for range 3 {
		tries, err = retry(ctx, budget, healthy)
	}
	fmt.Printf("retry loop: %d try: %v; tokens %.1f\n", tries, err, budget.Tokens())

	// ...and hedge.Do may hedge again around a replica that hangs.
	v, err := hedge.Do(ctx, policy, func(ctx context.Context) (string, error) {
		if hedge.Attempt(ctx) == 0 {
			<-ctx.Done() // replica 0 hangs until cancelled
			return "", ctx.Err()
		}
		return "profile", nil
	})
	fmt.Printf("hedge.Do:   %d attempts, won by attempt %d: %s %v; tokens %.1f\n",
		report.Attempts, report.Winner, v, err, budget.Tokens())

	// Output:
	// retry loop: 3 tries: hedge: retry refused by the budget (retry 3): upstream down; tokens 3.0
	// hedge.Do:   1 attempt, hedge refused true: upstream down; tokens 2.0
	// retry loop: 1 try: <nil>; tokens 5.0
	// hedge.Do:   2 attempts, won by attempt 1: profile <nil>; tokens 6.0
}
