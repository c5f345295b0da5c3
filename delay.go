package hedge

import (
	"context"
	"time"
)

// Delay decides when to hedge. Next returns how long after attempt k
// started Do should start attempt k+1 (k = 0 is the primary). Zero starts
// it at once; a negative answer means no timed hedge after attempt k
// (a retryable failure may still start the next attempt at once). Do
// calls Next as attempt k starts, when another attempt may follow it.
//
// ctx is the caller's context, so a source can keep one delay per route it
// finds there. Next is called without any lock of Do's held, on one of
// the call's goroutines (the primary's for k = 0, a timer's or an
// attempt's): it must be fast and safe for concurrent use. A slow Next
// holds back the attempts it is asked for, never Do's deadline. A panic in it is re-raised in the caller's
// goroutine as a *PanicError; runtime.Goexit ends the call as an
// attempt's would.
//
// A Delay that also has a method
//
//	Learn(ctx context.Context, primary time.Duration, complete bool)
//
// learns from the calls it schedules, as Percentile, Planner, Keyed and
// Adaptive do. After every call, Do tells it how long the primary ran. If
// the primary answered with an accepted result, primary is its latency
// and complete is true. If the primary was still running when the call
// was decided (a hedge won, or the deadline or the caller cut the call
// off), primary is how long it had run, a lower bound on its latency, and
// complete is false. Recording that bound, rather than dropping the
// primaries that lost, is what keeps a learned percentile from sinking
// and making hedging feed itself. Do does not call Learn when the primary
// answered with a retryable or terminal result, or panicked: such an
// answer says nothing about how long a good one takes. Learn runs on the
// caller's goroutine, once per call, after the decision and before Do
// returns; it must be safe for concurrent use.
type Delay interface {
	Next(ctx context.Context, k int) time.Duration
}

// Fixed returns a Delay that answers d for every attempt. A negative d
// disables timed hedges.
func Fixed(d time.Duration) Delay { return fixed(d) }

type fixed time.Duration

func (f fixed) Next(context.Context, int) time.Duration { return time.Duration(f) }

// DelayFunc adapts a function to a Delay, for a delay that depends on the
// attempt or on the context. It must be safe for concurrent use.
type DelayFunc func(ctx context.Context, k int) time.Duration

// Next calls f(ctx, k).
func (f DelayFunc) Next(ctx context.Context, k int) time.Duration { return f(ctx, k) }

// learner is a Delay that learns from the calls it schedules: see
// Delay.
type learner interface {
	Delay
	Learn(ctx context.Context, primary time.Duration, complete bool)
}

// quickDelay reports whether d is a delay of this package that runs no
// code of the user's: its Next and began neither block nor panic.
func quickDelay(d Delay) bool {
	switch d := d.(type) {
	case fixed:
		return true
	case *Percentile:
		return d != nil
	case *Planner:
		return d != nil
	}
	return false
}

// counter is a Delay of this package that counts the attempts it causes:
// Do calls began(ctx, k) as attempt k starts (the primary included, first),
// before Next, and gaveBack(ctx, k) for an extra attempt k ≥ 1 that it
// told began of but did not run, because the call ended first. A Planner
// keeps what it spends to its Load with them.
type counter interface {
	began(ctx context.Context, k int)
	gaveBack(ctx context.Context, k int)
}

// validator is a Delay of this package whose settings can be wrong; Do
// reports the error, wrapping ErrInvalidPolicy, without calling fn. It
// gets the caller's context (a Keyed delay checks the delay of the call's
// key) and the Policy's MaxAttempts as set, and returns the attempts the
// delay plans for when MaxAttempts is 0 (0: the default).
type validator interface {
	validate(ctx context.Context, maxAttempts int) (attempts int, err error)
}
