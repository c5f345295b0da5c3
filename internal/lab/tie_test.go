package lab

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// RunPlan plays ties and the two-class queue as RunLoad does through Do:
// the same row to the nanosecond, with the signal at once or a round trip
// later, hedges turned away by a full queue or after a wait (and the next
// attempt started at once, as Do starts it), in both cancellation modes.
func TestRunPlanMatchesRunLoadTied(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     Load
		plans []FixedPlan
	}{
		{"tied, cancel running", Load{Rho: 0.7, Tie: Tie{On: true}},
			[]FixedPlan{{Delay: 40 * ms, Hedges: 1}, {Delay: 10 * ms, Hedges: 2}}},
		{"tied, signal after 1ms, cancel queued only, ρ 0.95", Load{Rho: 0.95, Cancel: CancelQueued, Tie: Tie{On: true, Signal: ms}},
			[]FixedPlan{{Delay: 3 * ms / 2, Hedges: 1}, {Delay: 30 * ms, Hedges: 2}}},
		{"primaries first, queue 2, hedges wait 25ms", Load{Rho: 0.9, Cancel: CancelQueued, Admit: Admit{On: true, Queue: 2, HedgeWait: 25 * ms}},
			[]FixedPlan{{Delay: 40 * ms, Hedges: 1}, {Delay: 15 * ms, Hedges: 3}}},
		{"tied, primaries first, an overload", Load{Rho: 0.6, Tie: Tie{On: true, Signal: ms / 2}, Admit: Admit{On: true, Queue: 4, HedgeWait: 100 * ms},
			Overload: Overload{Rho: 1.3, Period: Period{800, 1200}}},
			[]FixedPlan{{Delay: 20 * ms, Hedges: 2}}},
	} {
		tc.l.Warm, tc.l.Calls, tc.l.Block = 500, 1500, 500
		for _, p := range tc.plans {
			t.Run(fmt.Sprintf("%s, %v", tc.name, p), func(t *testing.T) {
				got, err := RunPlan(tc.l, p)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(RunLoad(t, tc.l, p.Contender()), got); diff != "" {
					t.Errorf("RunPlan differs from RunLoad (-RunLoad +RunPlan):\n%s", diff)
				}
				if got.HedgeRate == 0 || got.WinRate == 0 {
					t.Errorf("the plan never hedged, or never won: %v", got)
				}
				if tc.l.Admit.On && got.Shed == 0 {
					t.Errorf("the admission turned no hedge away: %v", got)
				}
				t.Logf("%v wasted %.4f both %.4f", got, got.Wasted, got.Both)
			})
		}
	}
}
