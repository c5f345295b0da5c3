package backoff_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cenkalti/backoff/v5"

	"github.com/tailcut/hedge"
)

var errDown = errors.New("upstream down")

// replicas serve a profile, except those that are down.
type replicas struct {
	names []string
	down  map[string]bool
	sent  []string // the replica of every request, in order
}

// fetch sends the attempt to its own replica: hedges, and a retry loop's
// tries, each go to the next one.
func (r *replicas) fetch(ctx context.Context) (string, error) {
	name := r.names[hedge.Attempt(ctx)%len(r.names)]
	r.sent = append(r.sent, name)
	if r.down[name] {
		return "", errDown
	}
	return "profile from " + name, nil
}

// backoff.Retry around hedge.Do, on one budget: hedge.Tries makes each try
// one request and its hedges, counted once, and sends each try to the next
// replica. A real loop waits with backoff.NewExponentialBackOff(); this one
// retries at once, to keep the example instant.
func Example() {
	ctx := context.Background()
	budget := &hedge.TokenBucket{MaxTokens: 10, TokenRatio: 0.1}
	policy := hedge.Policy[string]{Budget: budget}
	up := &replicas{names: []string{"a", "b", "c"}, down: map[string]bool{"a": true}}

	v, err := backoff.Retry(ctx, hedge.Tries(ctx, budget, func(ctx context.Context) (string, error) {
		return hedge.Do(ctx, policy, up.fetch)
	}, backoff.Permanent), backoff.WithBackOff(&backoff.ZeroBackOff{}))

	fmt.Println(v, err)
	fmt.Println("requests:", up.sent, "tokens:", budget.Tokens())
	// Output:
	// profile from b <nil>
	// requests: [a b] tokens: 9.1
}

type observer func(hedge.Report)

func (f observer) Observe(_ context.Context, r hedge.Report) { f(r) }

// A retry loop and hedge.Do share one gRPC-style token bucket, so retries
// and hedges together stay within one bound: failures of either drain it,
// successes of either refill it, and while half of it or less is left,
// neither adds load to a struggling upstream.
func Example_sharedBucket() {
	ctx := context.Background()
	budget := &hedge.TokenBucket{MaxTokens: 6, TokenRatio: 1}
	var report hedge.Report
	policy := hedge.Policy[string]{
		Delay:    hedge.Fixed(0), // hedge at once, to keep the example instant
		Budget:   budget,
		Observer: observer(func(r hedge.Report) { report = r }),
	}
	up := &replicas{names: []string{"a", "b", "c"}, down: map[string]bool{"a": true, "b": true, "c": true}}
	retry := func() (string, error) {
		up.sent = nil
		return backoff.Retry(ctx, hedge.Tries(ctx, budget, func(ctx context.Context) (string, error) {
			return hedge.Do(ctx, hedge.Policy[string]{Budget: budget}, up.fetch)
		}, backoff.Permanent), backoff.WithBackOff(&backoff.ZeroBackOff{}))
	}

	// The upstream is down: the retry loop spends half of the bucket...
	_, err := retry()
	fmt.Printf("retry loop: %v: %v; tokens %.1f\n", up.sent, err, budget.Tokens())

	// ...so hedge.Do may not hedge either.
	_, err = hedge.Do(ctx, policy, func(context.Context) (string, error) { return "", errDown })
	fmt.Printf("hedge.Do:   %d attempt, hedge refused %t: %v; tokens %.1f\n",
		report.Attempts, report.BudgetRefusals > 0, err, budget.Tokens())

	// The upstream recovers: the retry loop's successes refill the bucket...
	up.down = nil
	for range 3 {
		_, err = retry()
	}
	fmt.Printf("retry loop: %v: %v; tokens %.1f\n", up.sent, err, budget.Tokens())

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
	// retry loop: [a b c]: hedge: retry refused by the budget (retry 3): upstream down; tokens 3.0
	// hedge.Do:   1 attempt, hedge refused true: upstream down; tokens 2.0
	// retry loop: [a]: <nil>; tokens 5.0
	// hedge.Do:   2 attempts, won by attempt 1: profile <nil>; tokens 6.0
}
