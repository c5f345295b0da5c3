package hedge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/hedge"
)

// budgetFunc is a Budget of a func type, whose nil is a typed nil too.
type budgetFunc func(ctx context.Context, k int) bool

func (f budgetFunc) Allow(ctx context.Context, k int) bool  { return f(ctx, k) }
func (budgetFunc) Done(context.Context, int, hedge.Outcome) {}

// A nil budget of a concrete type (what a constructor returns with its
// error, when the error is dropped) makes AllOf panic at once, naming its
// place and type, instead of panicking inside Do at the first call.
func TestAllOfRefusesTypedNils(t *testing.T) {
	ratio := &hedge.RatioBudget{Ratio: 0.1, MinPerSecond: 1, Window: 10 * time.Second}
	tests := []struct {
		budgets []hedge.Budget
		want    string
	}{
		{[]hedge.Budget{ratio, (*hedge.RatioBudget)(nil)}, "budget 1 is a nil *hedge.RatioBudget"},
		{[]hedge.Budget{(*hedge.TokenBucket)(nil)}, "budget 0 is a nil *hedge.TokenBucket"},
		{[]hedge.Budget{nil, (*hedge.InflightLimit)(nil)}, "budget 1 is a nil *hedge.InflightLimit"},
		{[]hedge.Budget{ratio, ratio, (*hedge.Breaker)(nil)}, "budget 2 is a nil *hedge.Breaker"},
		{[]hedge.Budget{(*hedge.WinRateBudget)(nil), ratio}, "budget 0 is a nil *hedge.WinRateBudget"},
		{[]hedge.Budget{budgetFunc(nil)}, "budget 0 is a nil hedge_test.budgetFunc"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.HasPrefix(msg, "hedge: AllOf: ") || !strings.Contains(msg, tt.want) {
					t.Errorf("AllOf panicked with %q, want it to say %q", msg, tt.want)
				}
			}()
			hedge.AllOf(tt.budgets...)
		})
	}
}
