package hedge

import (
	"context"
	"sync/atomic"
)

// defaultInflight is the cap of an InflightLimit whose Max is 0.
const defaultInflight = 10

// InflightLimit caps how many extra attempts run at once, across every
// call that shares it: a granted Allow takes a permit, and the attempt's
// Done returns it, whatever the outcome. Primaries never take one, so the
// cap bounds only the load hedging adds. Do returns every permit as soon as
// its attempt's function returns, also after a panic, a cancellation or
// runtime.Goexit.
//
// The zero value is ready: 10 permits. Max is read once, on first use,
// under the limit's lock; set it before. A negative Max is an error
// wrapping ErrInvalidBudget, which Policy.Validate and Do report; such a
// limit refuses every extra attempt. An InflightLimit is safe for
// concurrent use and must not be copied after first use. Allow and Done
// are a compare-and-swap each.
type InflightLimit struct {
	// Max is how many extra attempts may run at once. 0 means 10. (Use
	// MaxAttempts 1 to turn hedging off.)
	Max int

	settings settings[inflightSettings]
	inflight atomic.Int64
}

// inflightSettings is what an InflightLimit reads from Max.
type inflightSettings struct {
	err error
	n   int64
}

func (l *InflightLimit) load() *inflightSettings { return l.settings.load(l.read) }

func (l *InflightLimit) read() *inflightSettings {
	if l.Max < 0 {
		return &inflightSettings{err: fieldError("InflightLimit.Max", "%d is negative", l.Max)}
	}
	return &inflightSettings{n: int64(orDefault(l.Max, defaultInflight))}
}

func (l *InflightLimit) check() error { return l.load().err }

// Allow takes a permit for extra attempt k (k ≥ 1) if one is free. It
// grants the primary (k < 1) without one.
func (l *InflightLimit) Allow(_ context.Context, k int) bool {
	if primary(k) {
		return true
	}
	n := l.load().n // 0 for a negative Max
	for {
		v := l.inflight.Load()
		if v >= n {
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
