package hedge

import (
	"context"
	"errors"
	"fmt"
)

// ErrRefused is wrapped by the error that a retry of Tries returns,
// without running its op, when the Budget refuses the retry. That error
// also wraps the last try's error.
var ErrRefused = errors.New("hedge: retry refused by the budget")

// Tries returns op as the tries of one retry loop that draws on b, so
// that the loop of a retry library (cenkalti/backoff, avast/retry-go, ...)
// shares b with Do's hedges without bookkeeping. The first call of the
// returned function is the call's first try: b hears Allow(ctx, 0), whose
// answer is ignored, as Do ignores it for a primary. Every later call is
// retry k, which runs op only if b.Allow(ctx, k) grants it. After each
// try, b hears Done(ctx, k, o), o being Classify's verdict on op's result:
// Accept for a nil error, Terminal for a Permanent one, Retryable for any
// other.
//
// stop, if not nil, marks an error that must end the loop, in the retry
// library's own terms: backoff.Permanent, retry.Unrecoverable. The
// returned function passes through it a Permanent error of op, and the
// error of a refused retry, which wraps ErrRefused and op's last error. A
// nil b grants every try.
//
// The returned function counts the tries of one loop: use a new one for
// each call, from one goroutine at a time. A retry loop around Do learns
// from DoOutcome whether Do's result was terminal, and returns it marked
// Permanent, without classifying it again.
func Tries[T any](ctx context.Context, b Budget, op func() (T, error), stop func(error) error) func() (T, error) {
	if stop == nil {
		stop = func(err error) error { return err }
	}
	k := 0
	var last error
	return func() (T, error) {
		var zero T
		try := k
		k++
		if b != nil && !b.Allow(ctx, try) && try > 0 {
			return zero, stop(fmt.Errorf("%w (retry %d): %w", ErrRefused, try, last))
		}
		reported := false
		if b != nil {
			defer func() {
				if !reported { // op panicked or called runtime.Goexit
					b.Done(ctx, try, Terminal)
				}
			}()
		}
		v, err := op()
		o := classifyErr(err)
		if b != nil {
			reported = true
			b.Done(ctx, try, o)
		}
		last = err
		if o == Terminal {
			return v, stop(err)
		}
		return v, err
	}
}

// DoOutcome is Do that also returns how the result it returns was
// classified: Accept; Retryable or Failed when the call ran out of
// attempts with that result; Terminal; Canceled when it returned the
// context's error. A retry loop around it decides from the outcome whether
// to try again, without running the classifier again.
func DoOutcome[T any](ctx context.Context, p Policy[T], fn func(context.Context) (T, error)) (T, Outcome, error) {
	var o Outcome
	v, err := do(ctx, p, fn, &o)
	return v, o, err
}
