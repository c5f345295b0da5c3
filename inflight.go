package hedge

import (
	"context"
	"fmt"
	"sync/atomic"
)

// InflightLimit caps how many extra attempts run at once, across every
// call that shares it: a granted Allow takes a permit, and the attempt's
// Done returns it, whatever the outcome. Primaries never take one, so the
// cap bounds only the load hedging adds. Do returns every permit as soon as
// its attempt's function returns, also after a panic, a cancellation or
// runtime.Goexit.
//
// The zero value has no permits and refuses every extra attempt. An
// InflightLimit is safe for concurrent use and must not be copied after
// first use. Allow and Done are a compare-and-swap each.
type InflightLimit struct {
	n        int64
	inflight atomic.Int64
}

// NewInflightLimit returns an InflightLimit of n permits. n = 0 never
// hedges. For a negative n it returns nil and an error wrapping
// ErrInvalidBudget.
func NewInflightLimit(n int) (*InflightLimit, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: negative inflight limit %d", ErrInvalidBudget, n)
	}
	return &InflightLimit{n: int64(n)}, nil
}

// Allow takes a permit for extra attempt k (k ≥ 1) if one is free. It
// grants the primary (k < 1) without one.
func (l *InflightLimit) Allow(_ context.Context, k int) bool {
	if primary(k) {
		return true
	}
	for {
		v := l.inflight.Load()
		if v >= l.n {
			return false
		}
		if l.inflight.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// Done returns the permit of extra attempt k (k ≥ 1). A Done with no
// permit out is ignored. A stray Done while permits are out frees one
// that an attempt still holds: call Done only for a granted Allow.
func (l *InflightLimit) Done(_ context.Context, k int, _ Outcome) {
	if primary(k) {
		return
	}
	for {
		v := l.inflight.Load()
		if v <= 0 || l.inflight.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// Release returns the permit of extra attempt k (k ≥ 1) for an attempt
// that never started, as Done does: AllOf calls it when another budget
// refused the attempt.
func (l *InflightLimit) Release(ctx context.Context, k int) { l.Done(ctx, k, Canceled) }

// InFlight returns how many permits are taken: the extra attempts whose
// functions have not returned yet.
func (l *InflightLimit) InFlight() int {
	return int(l.inflight.Load())
}
