package backoff_test

import (
	"context"
	"fmt"
	"time"

	retrygo "github.com/avast/retry-go/v4"

	"github.com/tailcut/hedge"
)

// avast/retry-go around hedge.Do, on one budget with Do's hedges: the same
// few lines as with backoff, retry.Unrecoverable marking the end of the
// loop.
func Example_retryGo() {
	ctx := context.Background()
	budget := &hedge.RatioBudget{Ratio: 0.5, MinPerSecond: 1, Window: 10 * time.Second}
	policy := hedge.Policy[string]{Budget: budget}
	up := &replicas{names: []string{"a", "b", "c"}, down: map[string]bool{"a": true, "b": true}}

	v, err := retrygo.DoWithData(hedge.Tries(ctx, budget, func(ctx context.Context) (string, error) {
		return hedge.Do(ctx, policy, up.fetch)
	}, retrygo.Unrecoverable), retrygo.Context(ctx), retrygo.Attempts(5), retrygo.Delay(0))

	fmt.Println(v, err)
	fmt.Println("requests:", up.sent)
	// Output:
	// profile from c <nil>
	// requests: [a b c]
}
