package hedge_test

import (
	"context"
	"testing"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// A key whose bound is full while its hedges win as often as planned
// spends what its plans left unspent on an earlier hedge, no earlier than
// 0.8× the delay its Load buys; not while its hedges win less often than
// planned.
func TestAdaptiveSpendsWhatItSaved(t *testing.T) {
	// planAfter learns 750 latencies of up, judges 100 hedges of which
	// wins × the plan's win rate win, fills the bound, and returns the
	// plan made from 250 more latencies.
	planAfter := func(up lab.Upstream, wins float64) hedge.Plan {
		a := &hedge.Adaptive{Clock: clock.NewMock()} // no surge: calls all at once
		ctx := context.Background()
		for i := range 750 {
			a.Learn(ctx, up.Latency(i, 0), true)
		}
		settled := a.Plan(ctx)
		if settled.Hedges != 1 {
			t.Fatalf("settled: plan %+v, want one hedge", settled)
		}
		won := int(wins*settled.WinRate*100 + 0.5)
		for i := range 100 {
			for range 11 { // one call in twelve asks: no stale plan
				a.Allow(ctx, 0)
			}
			if !a.Allow(ctx, 1) {
				t.Fatalf("hedge %d refused", i)
			}
			if i < won {
				a.Done(ctx, 1, hedge.Accept)
			} else {
				a.Done(ctx, 1, hedge.Canceled)
			}
		}
		save(a, ctx)
		for i := 750; i < 1000; i++ {
			a.Learn(ctx, up.Latency(i, 0), true)
		}
		return a.Plan(ctx)
	}

	spent, kept := planAfter(lab.Stragglers, 1), planAfter(lab.Stragglers, 0.8)
	if kept.Load > 0.1 {
		t.Errorf("stragglers, hedges win 4/5 as often as planned: plan %+v, want one within Load 0.1", kept)
	}
	if !(spent.Hedges == 1 && spent.Delay < kept.Delay && 5*spent.Delay >= 4*kept.Delay && spent.Load > kept.Load) {
		t.Errorf("stragglers, hedges win as planned: plan %+v, want one hedge earlier than %+v's, and no earlier than 0.8× its delay", spent, kept)
	}
}
