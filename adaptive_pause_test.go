package hedge_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
)

// A pause is no capacity: a client that resumes at its old pace after
// ten idle minutes is hedged as one that never paused, whether it paused
// between bursts of calls, or between its first call (a warm-up, a
// readiness check) and its traffic. (Were a pause taken as a gap between
// calls, or the first gap as the usual one, the moving averages of the
// gaps would make the resumed pace look like a surge for thousands of
// calls, and no hedge would go out.)
func TestAdaptivePauseIsNoSurge(t *testing.T) {
	for _, tt := range []struct {
		name         string
		before, warm int // calls before the pause, and after it before the 2,000 measured
	}{
		{"between bursts of calls", 8000, 0},
		{"after the first call", 1, 2999},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := hedge.Auto[int]()
				var stats hedge.Stats
				p.Observer = &stats
				calls90(t, p, 0, tt.before)
				time.Sleep(10 * time.Minute) // the client idles, in the bubble's time
				calls90(t, p, tt.before, tt.before+tt.warm)
				stats = hedge.Stats{}
				from := tt.before + tt.warm
				calls90(t, p, from, from+2000)
				wantHedgedAsUsual(t, stats.Snapshot())
			})
		})
	}
}

// wantHedgedAsUsual fails t unless the calls s counts were hedged as on
// the 90/10 upstream without a pause: 1.05 attempts per call or more, and
// most hedges won.
func wantHedgedAsUsual(t *testing.T, s hedge.Snapshot) {
	t.Helper()
	if s.Amplification() < 1.05 || s.WinRate() < 0.6 {
		t.Errorf("%.3f attempts per call, hedges won %.2f; want 1.05 or more, and most hedges won", s.Amplification(), s.WinRate())
	}
}

// Two calls that arrive at one instant right after the pause (two
// clients that resume together, or calls in a synctest bubble or on a
// clock.Mock) give the second gap zero, and a zero second gap caps the
// pause as well: the key is hedged as one that never paused.
func TestAdaptivePauseThenTwoCallsAtOnceIsNoSurge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewMock()
		a := &hedge.Adaptive{Clock: clk}
		var stats hedge.Stats
		p := hedge.Policy[int]{Delay: a, Budget: a, Observer: &stats}
		calls90(t, p, 0, 1)
		clk.Add(10 * time.Minute) // the client idles after its first call
		calls90(t, p, 1, 3)       // the next two at one instant of a's clock
		for i := 3; i < 5000; i++ {
			if i == 3000 {
				stats = hedge.Stats{}
			}
			clk.Add(5 * time.Millisecond)
			calls90(t, p, i, i+1)
		}
		wantHedgedAsUsual(t, stats.Snapshot())
	})
}
