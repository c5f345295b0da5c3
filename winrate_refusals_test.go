package hedge_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/tailcut/hedge"
)

// While hedges win at least MinWinRate of the time, the budget refuses
// none, however the wins and losses fall: in runs (ten wins, then forty
// losses, over and over), or at random, one win in five or in three, with
// every call asking for a hedge. A credit capped at Burst that runs of
// losses empty refused 11–12 % of such hedges.
func TestWinRateBudgetRefusesNoneWhileHedgesWin(t *testing.T) {
	runs := func(i int, _ *rand.Rand) bool { return i%50 < 10 }
	random := func(w float64) func(int, *rand.Rand) bool {
		return func(_ int, r *rand.Rand) bool { return r.Float64() < w }
	}
	for _, tt := range []struct {
		name string
		wins func(i int, r *rand.Rand) bool // whether granted hedge i wins
	}{
		{"ten wins, then forty losses", runs},
		{"one win in five at random", random(0.2)},
		{"one win in three at random", random(0.3)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(10) {
				b := &hedge.WinRateBudget{}
				ctx := context.Background()
				r := rand.New(rand.NewPCG(seed, 1))
				granted, refused := 0, 0
				for range 20_000 {
					b.Allow(ctx, 0)
					if !b.Allow(ctx, 1) {
						refused++
						continue
					}
					o := hedge.Canceled
					if tt.wins(granted, r) {
						o = hedge.Accept
					}
					granted++
					b.Done(ctx, 1, o)
				}
				if refused > 0 {
					t.Errorf("seed %d: %d of %d hedges refused, want none", seed, refused, granted+refused)
				}
			}
		})
	}
}

// A hedge that a server shed (it failed at once, retryable) is no lost
// race: however many are shed, the hedges that do race and win one time
// in ten are all granted, and each shed hedge's credit comes back.
func TestWinRateBudgetShedHedgesAreNoLosses(t *testing.T) {
	b := &hedge.WinRateBudget{}
	ctx := context.Background()
	refused := 0
	for i := range 10_000 {
		b.Allow(ctx, 0)
		if !b.Allow(ctx, 1) {
			refused++
			continue
		}
		switch {
		case i%2 == 1:
			b.Done(ctx, 1, hedge.Retryable) // shed
		case i%20 == 0:
			b.Done(ctx, 1, hedge.Accept)
		default:
			b.Done(ctx, 1, hedge.Canceled)
		}
	}
	if refused > 0 {
		t.Errorf("%d hedges refused, want none", refused)
	}
}

// Near its threshold, what the budget's doc says: with hedges winning at
// random 0.15 of the time (1.5 × MinWinRate) and one call in ten asking
// for a hedge, the defaults refuse 1.7 % of them, and a Burst of 50
// 0.06 %; every call asking, 24 % and 1.2 %. At MinWinRate itself, the
// defaults refuse 40 % and 90 %. (No goroutine and no clock: the draws
// are seeded, and each count comes out the same on every run.)
func TestWinRateBudgetNearItsThreshold(t *testing.T) {
	for _, tt := range []struct {
		name        string
		burst       int
		win         float64 // the chance that a granted hedge wins
		every       int     // one call in every asks for a hedge
		least, most float64
	}{
		{"defaults, one call in ten asks", 0, 0.15, 10, 0.015, 0.02},
		{"defaults, every call asks", 0, 0.15, 1, 0.22, 0.26},
		{"Burst 50, one call in ten asks", 50, 0.15, 10, 0.0003, 0.001},
		{"Burst 50, every call asks", 50, 0.15, 1, 0.01, 0.015},
		{"at MinWinRate, one call in ten asks", 0, 0.1, 10, 0.38, 0.42},
		{"at MinWinRate, every call asks", 0, 0.1, 1, 0.88, 0.92},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked, refused := 0, 0
			for seed := range uint64(10) {
				b := &hedge.WinRateBudget{Burst: tt.burst}
				ctx := context.Background()
				r := rand.New(rand.NewPCG(seed, 1))
				for i := range 200_000 {
					b.Allow(ctx, 0)
					if i%tt.every != 0 {
						continue
					}
					asked++
					if !b.Allow(ctx, 1) {
						refused++
						continue
					}
					o := hedge.Canceled
					if r.Float64() < tt.win {
						o = hedge.Accept
					}
					b.Done(ctx, 1, o)
				}
			}
			if got := float64(refused) / float64(asked); got < tt.least || got > tt.most {
				t.Errorf("%d of %d hedges refused (%.2f %%), want %.2f–%.2f %%", refused, asked, 100*got, 100*tt.least, 100*tt.most)
			}
		})
	}
}
