package hedge_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/hedge"
)

const raceRounds = 20_000 // enough to cross many rotations under -race

// Every sample is 20ms, so every recomputed delay must be 20ms (±2%).
// Concurrent Learns race the reset of the generation two windows old
// against the recompute that still reads it: quantile() finds fewer
// samples than the total it read first and falls back to the last bucket
// (270s), clamped to the Ceiling.
func TestPercentileUnderConcurrentRotation(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Percentile{Window: 100}
	for range 200 { // past warm-up
		p.Learn(ctx, 20*ms, true)
	}
	var bad atomic.Int64
	var worst atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range raceRounds {
				p.Learn(ctx, 20*ms, true)
				if d := p.Next(ctx, 0); d > 21*ms {
					bad.Add(1)
					worst.Store(int64(d))
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Errorf("constant 20ms upstream: %d reads of a delay above 21ms (e.g. %v)", bad.Load(), time.Duration(worst.Load()))
	}
}

// Same race in the Planner: replan reads the histograms twice (total,
// then per bucket) while Learns add to and reset them.
func TestPlannerUnderConcurrentReplans(t *testing.T) {
	ctx := context.Background()
	const load = 0.15
	p := &hedge.Planner{Load: load, Window: 4}
	for range 4 { // past the first plan
		p.Learn(ctx, 20*ms, true)
	}
	var bad atomic.Int64
	var example atomic.Pointer[hedge.Plan]
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range raceRounds {
				d := 20 * ms
				if (i+g)%10 == 0 {
					d = 500 * ms
				}
				p.Learn(ctx, d, i%3 != 0)
				if pl := p.Plan(); pl.Load > load || pl.Load < 0 || pl.Latency <= 0 {
					bad.Add(1)
					example.Store(&pl)
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Errorf("%d plans outside the budget or with a nonsense latency, e.g. %+v", bad.Load(), *example.Load())
	}
}
