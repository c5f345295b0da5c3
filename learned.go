package hedge

import (
	"fmt"
	"sync/atomic"
	"time"
)

// bounds are a learned delay's Floor, Ceiling and Initial, with their
// defaults applied: 1ms, 10s, and Ceiling (no hedging before the upstream
// is known).
type bounds struct{ floor, ceiling, initial time.Duration }

func newBounds(kind string, floor, ceiling, initial time.Duration) (bounds, error) {
	b := bounds{floor, ceiling, initial}
	if b.floor == 0 {
		b.floor = time.Millisecond
	}
	if b.ceiling == 0 {
		b.ceiling = 10 * time.Second
	}
	if floor == 0 {
		b.floor = min(b.floor, b.ceiling)
	}
	if b.initial == 0 {
		b.initial = b.ceiling
	}
	switch {
	case floor < 0 || ceiling < 0 || initial < 0:
		return b, fmt.Errorf("%w: negative %s.Floor, Ceiling or Initial", ErrInvalidPolicy, kind)
	case b.floor > b.ceiling:
		return b, fmt.Errorf("%w: %s.Floor %v above Ceiling %v", ErrInvalidPolicy, kind, b.floor, b.ceiling)
	}
	b.initial = b.clamp(b.initial) // the warm-up delay keeps the bounds too
	return b, nil
}

func (b bounds) clamp(d time.Duration) time.Duration { return min(max(d, b.floor), b.ceiling) }

// gens is how many generations of samples rotate. An estimate reads the
// current one and the one before; the one that a generation's first
// sample resets is three windows old, so no estimate still in flight
// reads it.
const gens = 4

// generation returns which of the rotating generations sample i (from 0)
// belongs to, and whether it is the generation's first sample: then the
// caller resets the next generation, so that it starts empty.
func generation(i, window uint64) (gen uint64, fresh bool) {
	return (i / window) % gens, i%window == 0
}

// loadState returns *p, making it with newState on first use. Concurrent
// first uses may each make one; all but the first are dropped, so the
// fields a learned delay reads once are read consistently.
func loadState[S any](p *atomic.Pointer[S], newState func() *S) *S {
	if s := p.Load(); s != nil {
		return s
	}
	p.CompareAndSwap(nil, newState())
	return p.Load()
}
