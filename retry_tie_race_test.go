package hedge_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// A primary that has started and fails retryable in the instant its
// hedge falls due is owed an attempt at once, also by a key that queues:
// the hedge is refused as it races running work, but the refusal says
// nothing of the retry, which the budget grants. Whichever of the two
// the call takes in first, the retry is sent.
func TestAdaptiveQueueingKeyRetriesAPrimaryThatFailsAsItsHedgeIsDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &hedge.Adaptive{Clock: clock.NewMock()}
		ctx := context.Background()
		settle(a, ctx)
		save(a, ctx)
		p := hedge.Policy[int]{Delay: a, Budget: a}
		calls90Tied(t, p, 2.0/3, 0, 600) // the key learns that calls queue
		var r hedge.Report
		probe := p
		probe.Observer = hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got })
		busy := errors.New("busy")
		lost, probed, held := 0, 0, 0
		for i := range 1000 {
			calls90Tied(t, p, 2.0/3, 600+5*i, 605+5*i) // keeps the breaker closed
			save(a, ctx)
			plan := a.Plan(ctx)
			if plan.Hedges == 0 {
				continue // replanning
			}
			probed++
			r = hedge.Report{}
			_, err := hedge.Do(t.Context(), probe, func(ctx context.Context) (int, error) {
				hedge.Started(ctx)
				if k := hedge.Attempt(ctx); k > 0 {
					return k, nil
				}
				if err := lab.Wait(ctx, plan.Delay); err != nil {
					return -1, err
				}
				return -1, busy // as the hedge falls due
			})
			synctest.Wait()
			switch {
			case err != nil && r.Attempts == 1 && r.BudgetRefusals == 1:
				lost++ // the retry was never asked for
			case r.BudgetRefusals == 1:
				held++ // the hedge came first, and was refused
			}
		}
		if probed < 300 {
			t.Fatalf("%d probes, want at least 300", probed)
		}
		if held == 0 {
			t.Fatalf("no hedge of %d probes was held back: the key does not queue", probed)
		}
		if lost > 0 {
			t.Errorf("%d of %d primaries that failed as their hedge fell due were owed a retry that was never sent", lost, probed)
		}
	})
}
