package hedge_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
)

// A client that pauses between bursts of calls is not surging when it
// resumes at its old pace: after ten idle minutes, the next calls are
// hedged as before. (Were the pause taken as gaps between calls, the
// moving average of the gaps would make the resumed pace look like a
// surge for thousands of calls, and no hedge would go out.)
func TestAdaptivePauseIsNoSurge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.Auto[int]()
		var stats hedge.Stats
		p.Observer = &stats
		calls := func(from, to int) { calls90(t, p, from, to) }
		calls(0, 8000)
		time.Sleep(10 * time.Minute) // the client idles, in the bubble's time
		stats = hedge.Stats{}
		calls(8000, 10000)
		if s := stats.Snapshot(); s.Amplification() < 1.05 || s.WinRate() < 0.6 {
			t.Errorf("the 2,000 calls after a pause: %.3f attempts per call, hedges won %.2f; want 1.05 or more, and most hedges won",
				s.Amplification(), s.WinRate())
		}
	})
}

// A pause between a key's first call and the next is no capacity either:
// a client that makes one call as it starts (a warm-up, a readiness
// check) and its traffic only minutes later is hedged as one that never
// paused. (Were the first gap the usual one, the long average of the
// gaps would hold the pause for thousands of calls, the calls would look
// like a surge all that time, and no hedge would go out.)
func TestAdaptivePauseAfterTheFirstCallIsNoSurge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.Auto[int]()
		var stats hedge.Stats
		p.Observer = &stats
		calls := func(from, to int) { calls90(t, p, from, to) }
		calls(0, 1)
		time.Sleep(10 * time.Minute) // the client idles after its first call
		calls(1, 3000)
		stats = hedge.Stats{}
		calls(3000, 5000)
		if s := stats.Snapshot(); s.Amplification() < 1.05 || s.WinRate() < 0.6 {
			t.Errorf("calls 3,000 to 5,000 after a pause that followed the first: %.3f attempts per call, hedges won %.2f; want 1.05 or more, and most hedges won",
				s.Amplification(), s.WinRate())
		}
	})
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
		if s := stats.Snapshot(); s.Amplification() < 1.05 || s.WinRate() < 0.6 {
			t.Errorf("calls 3,000 to 5,000 after a pause and two calls at once: %.3f attempts per call, hedges won %.2f; want 1.05 or more, and most hedges won",
				s.Amplification(), s.WinRate())
		}
	})
}
