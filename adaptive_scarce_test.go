package hedge_test

import (
	"context"
	"testing"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
)

// While a key's bound holds less than a tenth of what it may save, its
// hedges wait twice the plan's delay, so that what is left pays for the
// slowest calls; once it has saved that much again, they go out at the
// plan's delay.
func TestAdaptiveScarceBoundWaitsLonger(t *testing.T) {
	a := &hedge.Adaptive{Clock: clock.NewMock()}
	ctx := context.Background()
	settle(a, ctx)
	save(a, ctx) // 100 hedges' worth
	plan := a.Plan(ctx)
	if plan.Hedges == 0 {
		t.Fatalf("settled: plan %+v, want hedges", plan)
	}
	if d := a.Next(ctx, 0); d != plan.Delay {
		t.Fatalf("a full bound: Next = %v, want the plan's %v", d, plan.Delay)
	}
	for i := range 90 {
		if !a.Allow(ctx, 1) {
			t.Fatalf("hedge %d of a full bound refused", i)
		}
		a.Done(ctx, 1, hedge.Accept)
	}
	if d := a.Next(ctx, 0); d != plan.Delay {
		t.Errorf("10 hedges' worth left: Next = %v, want the plan's %v", d, plan.Delay)
	}
	a.Allow(ctx, 1)
	a.Done(ctx, 1, hedge.Accept)
	if d := a.Next(ctx, 0); d != 2*plan.Delay {
		t.Errorf("9 hedges' worth left: Next = %v, want twice the plan's %v", d, plan.Delay)
	}
	for range 10 { // one more hedge's worth
		a.Allow(ctx, 0)
	}
	if d := a.Next(ctx, 0); d != plan.Delay {
		t.Errorf("10 hedges' worth again: Next = %v, want the plan's %v", d, plan.Delay)
	}
}
