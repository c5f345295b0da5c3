package hedge

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Percentile is a Delay that hedges at a quantile of the primary's recent
// latency, learned from the calls it schedules (it has Learn: see Delay). Usable
// as &hedge.Percentile{Quantile: 0.9}; the zero value is valid and hedges
// at the p95. Use one Percentile per upstream (or a Keyed per route): it
// is safe for any number of goroutines and policies sharing it. Its
// fields are read once, on first use; do not change or copy it after.
//
// The estimate is the Quantile of the last one to two Windows of
// samples, within 2 % (log-spaced buckets), recomputed every Window/8
// samples and at the start of every Window. After the upstream's latency
// shifts, the delay follows within two Windows of calls. Primaries that lost count at how long they had run,
// a lower bound above the current delay, so the estimate neither sinks
// nor rises as hedges win. Recording takes two atomic adds: no lock.
//
// Do reports a bad setting (Quantile outside (0, 1) or NaN, a negative
// Window, Floor or Ceiling, Floor above Ceiling) as an error wrapping
// ErrInvalidPolicy from every call, without calling fn.
type Percentile struct {
	// Quantile of the primary's latency to hedge at, in (0, 1). 0 means
	// 0.95: about one call in twenty is hedged.
	Quantile float64
	// Window is how many samples make one generation of the estimate.
	// 0 means 1000.
	Window int
	// Floor and Ceiling bound the delay. 0 means 1ms and 10s.
	Floor, Ceiling time.Duration
	// Initial is the delay until 10/(1-Quantile) samples (200 at p95,
	// at least 20, at most Window) have been seen. 0 means Ceiling: no
	// hedging before the upstream is known.
	Initial time.Duration

	state atomic.Pointer[percentileState]
}

type percentileState struct {
	err          error
	q            float64
	window, warm uint64
	every        uint64 // samples between recomputations
	bounds

	delay atomic.Int64 // the current answer, in ns: read by every call
	_     [56]byte     // keep the writes to n off delay's cache line
	n     atomic.Uint64
	gens  [gens]histogram // current, previous, and the next, cleared ahead
}

// Current returns the delay Next answers now: the learned quantile
// clamped to [Floor, Ceiling], Initial during warm-up, or -1 for invalid
// settings. It is what a metrics adapter reports as the route's delay.
func (p *Percentile) Current() time.Duration { return time.Duration(p.load().delay.Load()) }

// Next returns the current delay, whatever the attempt.
func (p *Percentile) Next(context.Context, int) time.Duration {
	return time.Duration(p.load().delay.Load())
}

// Learn records how long a primary ran. A lower bound below the current
// delay is dropped: the call was cut off before it could tell whether
// the primary would have beaten the delay.
func (p *Percentile) Learn(_ context.Context, primary time.Duration, complete bool) {
	s := p.load()
	if s.err != nil || (!complete && primary < time.Duration(s.delay.Load())) {
		return
	}
	i := s.n.Add(1) - 1
	gen, fresh := generation(i, s.window)
	if fresh {
		s.gens[(gen+1)%gens].reset()
	}
	s.gens[gen].add(primary)
	if i+1 >= s.warm && (i+1 == s.warm || (i+1)%s.every == 0 || fresh) {
		d, _ := quantile(s.q, &s.gens[gen], &s.gens[(gen+gens-1)%gens])
		s.delay.Store(int64(s.clamp(d)))
	}
}

func (p *Percentile) validate(context.Context, int) (int, error) { return 0, p.load().err }

func (p *Percentile) load() *percentileState { return loadState(&p.state, p.newState) }

func (p *Percentile) newState() *percentileState {
	s := &percentileState{q: p.Quantile}
	if s.q == 0 {
		s.q = 0.95
	}
	window := p.Window
	if window == 0 {
		window = 1000
	}
	s.bounds, s.err = newBounds("Percentile", p.Floor, p.Ceiling, p.Initial)
	switch {
	case math.IsNaN(s.q) || s.q <= 0 || s.q >= 1:
		s.err = fmt.Errorf("%w: Percentile.Quantile %v is outside (0, 1)", ErrInvalidPolicy, p.Quantile)
	case window < 0:
		s.err = fmt.Errorf("%w: negative Percentile.Window %d", ErrInvalidPolicy, p.Window)
	}
	if s.err != nil {
		s.delay.Store(-1)
		return s
	}
	s.window = uint64(window)
	s.every = max(s.window/8, 1)
	// 10/(1-0.9) is a hair above 100 in float64: round it before the
	// ceiling, so that p90 warms up after 100 samples, not 101.
	s.warm = min(max(uint64(math.Ceil(math.Round(10/(1-s.q)*1e6)/1e6)), 20), s.window)
	s.delay.Store(int64(s.initial))
	return s
}
