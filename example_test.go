package hedge_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tailcut/hedge"
)

// profile stands in for a replicated backend: replica "a" is stuck,
// replica "b" answers at once.
func profile(ctx context.Context, replica, id string) (string, error) {
	if replica == "a" {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "profile " + id + " from " + replica, nil
}

func ExampleDo() {
	p := hedge.Policy[string]{Delay: hedge.Fixed(time.Millisecond), Timeout: time.Second}
	v, err := hedge.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		replica := []string{"a", "b"}[hedge.Attempt(ctx)]
		return profile(ctx, replica, "42")
	})
	fmt.Println(v, err)
	// Output: profile 42 from b <nil>
}

var (
	errNotFound   = errors.New("not found")
	errOverloaded = errors.New("overloaded")
)

// A classifier per call site: a not-found answer is final (a duplicate
// would find nothing either), an overloaded one is worth another attempt.
func ExamplePolicy_classify() {
	p := hedge.Policy[string]{
		MaxAttempts: 3,
		Classify: func(_ string, err error) hedge.Outcome {
			switch {
			case err == nil:
				return hedge.Accept
			case errors.Is(err, errNotFound):
				return hedge.Terminal
			}
			return hedge.Retryable
		},
	}
	calls := 0
	_, err := hedge.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		calls++
		return "", errNotFound
	})
	fmt.Println(err, "after", calls, "call")
	// Output: not found after 1 call
}

// A retryable error starts the next attempt at once, without waiting for
// the hedge delay; Permanent marks an error that no duplicate can fix.
func ExamplePermanent() {
	p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), MaxAttempts: 3}
	_, err := hedge.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if hedge.Attempt(ctx) == 0 {
			return 0, errors.New("overloaded") // retryable: attempt 1 starts now
		}
		return 0, hedge.Permanent(errNotFound)
	})
	fmt.Println(err, errors.Is(err, errNotFound))
	// Output: not found true
}

// Route each attempt to a different replica.
func ExampleAttempt() {
	replicas := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
	p := hedge.Policy[string]{Delay: hedge.Fixed(0), MaxAttempts: 3}
	v, _ := hedge.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		k := hedge.Attempt(ctx)
		if k < 2 {
			<-ctx.Done() // the first two replicas hang
			return "", ctx.Err()
		}
		return replicas[k], nil
	})
	fmt.Println(v)
	// Output: 10.0.0.3
}

type reply struct {
	status int
	closed *bool
}

// Discard releases what Do does not return: here a 503 reply that a
// later attempt superseded, as an *http.Response body would be closed.
func ExamplePolicy_discard() {
	closed := []bool{false, false}
	p := hedge.Policy[reply]{
		Delay: hedge.Fixed(time.Hour),
		Classify: func(r reply, err error) hedge.Outcome {
			if err == nil && r.status == 503 {
				return hedge.Retryable
			}
			return hedge.Classify(r, err)
		},
		Discard: func(r reply) { *r.closed = true },
	}
	r, _ := hedge.Do(context.Background(), p, func(ctx context.Context) (reply, error) {
		k := hedge.Attempt(ctx)
		return reply{status: []int{503, 200}[k], closed: &closed[k]}, nil
	})
	fmt.Println(r.status, closed)
	// Output: 200 [true false]
}

func ExampleStats() {
	var stats hedge.Stats
	p := hedge.Policy[string]{Delay: hedge.Fixed(0), Observer: &stats}
	for range 4 {
		hedge.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			return profile(ctx, []string{"a", "b"}[hedge.Attempt(ctx)], "7")
		})
	}
	s := stats.Snapshot()
	fmt.Printf("calls %d, hedge rate %.2f, win rate %.2f, amplification %.2f\n",
		s.Calls, s.HedgeRate(), s.WinRate(), s.Amplification())
	// Output: calls 4, hedge rate 1.00, win rate 1.00, amplification 2.00
}

// A Budget shared by every call bounds the extra load hedging adds.
type tokens struct{ left int } // not safe for concurrent use: an example only

func (t *tokens) Allow(_ context.Context, k int) bool {
	if k == 0 {
		return true // the primary always runs
	}
	if t.left == 0 {
		return false
	}
	t.left--
	return true
}

func (t *tokens) Done(_ context.Context, _ int, _ hedge.Outcome) {}

// Replica "a" is overloaded and says so at once, which starts the next
// attempt without waiting for the delay, if the budget allows it: it
// allows one, so one call of the three reaches replica "b".
func ExampleBudget() {
	var stats hedge.Stats
	p := hedge.Policy[string]{Delay: hedge.Fixed(time.Hour), Budget: &tokens{left: 1}, Observer: &stats}
	for range 3 {
		hedge.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			if hedge.Attempt(ctx) == 0 {
				return "", errOverloaded // retryable
			}
			return profile(ctx, "b", "7")
		})
	}
	s := stats.Snapshot()
	fmt.Println("hedged", s.Hedged, "of", s.Calls, "calls; refused", s.BudgetRefusals)
	// Output: hedged 1 of 3 calls; refused 2
}

// A server that says when a request leaves its queue lets the attempt
// that starts first cancel its copies that still wait. Here the primary
// waits in a queue, and the hedge, sent at once, starts and answers.
func ExampleStarted() {
	p := hedge.Policy[string]{
		Delay: hedge.Fixed(0),
		Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) {
			fmt.Printf("attempts %d, tied %d, winner %d\n", r.Attempts, r.Tied, r.Winner)
		}),
	}
	v, err := hedge.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		if hedge.Attempt(ctx) == 0 {
			<-ctx.Done() // queued until the hedge's start cancels it
			return "", context.Cause(ctx)
		}
		hedge.Started(ctx) // where the server's start signal arrives
		return "hedge", nil
	})
	fmt.Println(v, err)
	// Output:
	// attempts 2, tied 1, winner 1
	// hedge <nil>
}
