package hedge_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// While calls come more than 1.25 times as fast as they have been, a key
// schedules no hedge, short of the surge (1.5 times) that sends it back
// to matching its plan for 250 primaries; when the pace settles, hedges
// go out again at once.
func TestAdaptiveQuickeningHoldsHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &hedge.Adaptive{}
		ctx := context.Background()
		settle(a, ctx)
		calls := func(n int, gap time.Duration) {
			for range n {
				time.Sleep(gap)
				a.Allow(ctx, 0)
			}
		}
		calls(2000, time.Millisecond)
		plan := a.Plan(ctx)
		if d := a.Next(ctx, 0); plan.Hedges == 0 || d != plan.Delay {
			t.Fatalf("at a steady pace: Next = %v, plan %+v; want the plan's delay", d, plan)
		}
		calls(100, 700*time.Microsecond) // 1.43 times as fast
		if d := a.Next(ctx, 0); d >= 0 {
			t.Errorf("100 calls 1.43 times as fast: Next = %v, want no hedge", d)
		}
		calls(100, time.Millisecond)
		if d := a.Next(ctx, 0); d != plan.Delay {
			t.Errorf("100 calls at the old pace again: Next = %v, want the plan's %v", d, plan.Delay)
		}
	})
}
