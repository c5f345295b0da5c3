package hedge_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// slowGrant grants every extra attempt after a wait, as a remote budget
// would.
type slowGrant time.Duration

func (g slowGrant) Allow(_ context.Context, k int) bool {
	if k > 0 {
		time.Sleep(time.Duration(g))
	}
	return true
}

func (slowGrant) Done(context.Context, int, hedge.Outcome) {}

// The Planner counts only the hedges that ran. Its Load of 0.005 leaves
// it credit for one hedge. The first call's hedge falls due at 10ms, but
// its grant comes at 40ms, after the primary answered at 20ms: that hedge
// never runs, so the credit is still there for the second call, whose
// primary is slow. Counting the hedge that never ran spent the credit and
// left the second call without a hedge: attempts [1 1], not [1 2].
func TestPlannerCountsOnlyHedgesThatRan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var attempts []int
		p := hedge.Policy[int]{
			Delay:    &hedge.Planner{Load: 0.005, Initial: 10 * ms},
			Budget:   slowGrant(30 * ms),
			Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) { attempts = append(attempts, r.Attempts) }),
		}
		for _, primary := range []time.Duration{20 * ms, 100 * ms} {
			hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				if hedge.Attempt(ctx) == 0 {
					time.Sleep(primary)
				}
				return 1, nil
			})
			time.Sleep(time.Second) // the grant that came too late, and the loser, are through
		}
		if diff := cmp.Diff([]int{1, 2}, attempts); diff != "" {
			t.Errorf("attempts per call (-want +got):\n%s", diff)
		}
	})
}
