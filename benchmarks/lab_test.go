package benchmarks

import (
	"context"
	"strings"
	"testing"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// The tail lab beside failsafe-go's quantile policy: the same upstreams,
// the same calls, in virtual time. Run with -v to see the table:
//
//	cd benchmarks && go test -run TestTailLab -v .
func TestTailLab(t *testing.T) {
	const warm, calls = 1000, 4000
	for _, up := range []lab.Upstream{lab.FastSlow, lab.Lognormal} {
		t.Run(strings.Fields(up.Name)[0], func(t *testing.T) {
			do := func(p hedge.Policy[int]) lab.Hedger {
				return func(ctx context.Context, attempt func(context.Context) (int, error)) (int, error) {
					return hedge.Do(ctx, p, attempt)
				}
			}
			// failsafe-go hedges when an attempt outlasts a quantile of
			// recent successful durations, remembering about quantileAge
			// executions: the same quantile, memory and hedge count as
			// hedge.Percentile below.
			failsafeQuantile := func(q float64) lab.Hedger {
				fs := failsafe.With[int](hedgepolicy.NewBuilderWithDelayQuantile[int](q, 1000, 100).WithMaxHedges(2).Build())
				return func(ctx context.Context, attempt func(context.Context) (int, error)) (int, error) {
					return fs.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[int]) (int, error) {
						return attempt(e.Context())
					})
				}
			}
			percentile := func(q float64) lab.Hedger {
				return do(hedge.Policy[int]{Delay: &hedge.Percentile{Quantile: q}, MaxAttempts: 3})
			}
			rows := []lab.Row{
				lab.Run(t, "no hedging", up, warm, calls, do(hedge.Policy[int]{MaxAttempts: 1})),
				lab.Run(t, "failsafe-go quantile 0.95 ×2", up, warm, calls, failsafeQuantile(0.95)),
				lab.Run(t, "hedge.Percentile{Quantile: 0.95}", up, warm, calls, percentile(0.95)),
				lab.Run(t, "failsafe-go quantile 0.85 ×2", up, warm, calls, failsafeQuantile(0.85)),
				lab.Run(t, "hedge.Percentile{Quantile: 0.85}", up, warm, calls, percentile(0.85)),
				lab.Run(t, "hedge.Planner{Load: 0.15}", up, warm, calls,
					do(hedge.Policy[int]{Delay: &hedge.Planner{Load: 0.15}, MaxAttempts: 3})),
			}
			var b strings.Builder
			b.WriteString(up.Name + ", 4000 calls after 1000 to warm up\n" + lab.Header() + "\n")
			for _, r := range rows {
				b.WriteString(r.String() + "\n")
				if r.Amp > 1 {
					b.WriteString(lab.Oracle(up, warm, calls, r.Amp).String() + "\n")
				}
			}
			t.Log("\n" + b.String())
		})
	}
}
