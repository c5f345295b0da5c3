package hedge

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
)

// Tries returns op as the tries of one retry loop that draws on b, for
// the loop of a retry library (cenkalti/backoff, avast/retry-go, ...):
//
//	v, err := backoff.Retry(ctx, hedge.Tries(ctx, budget, func(ctx context.Context) (Profile, error) {
//		return hedge.Do(ctx, policy, fetch)
//	}, backoff.Permanent))
//
// The first call of the returned function is the call's first try: b
// hears Allow(ctx, 0), whose answer is ignored, as Do ignores it for a
// primary. Every later call is a retry, which runs op only if b grants it
// with Allow(ctx, k), k being the retry's attempt number (below); a
// refused retry returns, through stop, an error that wraps ErrRefused and
// op's last error.
//
// op gets the try's context, derived from ctx. Passed to Do (directly, or
// through hedgehttp or hedgegrpc), it makes the Do the try, so that one
// request is counted once:
//
//   - Attempts are numbered across the loop: the try's Do starts at the
//     number after the last attempt of the try before, so Attempt, and
//     replicas[hedge.Attempt(ctx)%len(replicas)], spread the tries over
//     replicas as hedges are spread. Outside Do, Attempt of the try's
//     context is the try's number.
//   - If its Policy's Budget is b (the same pointer), Do does not ask b
//     again for its primary, which the loop's Allow granted, numbers its
//     attempts to b as above, and reports Done for each of them; the
//     loop adds nothing. Any other Budget counts the Do as a call of its
//     own, and the loop reports the try to b with Done(ctx, k, o).
//   - A retryable result does not start the next attempt at once, as it
//     does in a Do of its own: the loop retries it, after its backoff (a
//     Failed result does the same anywhere). Timed hedges still start.
//   - The loop learns how Do classified its result: a Terminal result,
//     and an error that Do accepted, are passed through stop and end the
//     loop; a Canceled one (the context's error) is returned as it is.
//
// An op that does not call Do is one attempt: after it returns, b hears
// Done(ctx, k, o), o being Accept for a nil error, Terminal for a
// Permanent one, Retryable for any other, and a Permanent error goes
// through stop. Only the first Do that op calls with the try's context
// is the try; Do calls inside fn, or more Do calls in op, are calls of
// their own.
//
// stop, if not nil, marks an error that must end the loop, in the retry
// library's own terms: backoff.Permanent, retry.Unrecoverable. A nil b
// grants every try. A budget of this package whose fields are out of
// range ends the loop at its first try, with an error wrapping
// ErrInvalidBudget, through stop, without running op.
//
// The returned function counts the tries of one loop: use a new one for
// each call, from one goroutine at a time.
func Tries[T any](ctx context.Context, b Budget, op func(context.Context) (T, error), stop func(error) error) func() (T, error) {
	if stop == nil {
		stop = func(err error) error { return err }
	}
	next, retries := 0, 0
	var last error
	return func() (T, error) {
		var zero T
		t := &try{Context: ctx, n: next, budget: b}
		if t.n > 0 {
			retries++
			if b != nil && !b.Allow(ctx, t.n) {
				return zero, stop(fmt.Errorf("%w (retry %d): %w", ErrRefused, retries, last))
			}
		} else if b != nil {
			if err := checkBudget(b); err != nil {
				return zero, stop(err)
			}
			b.Allow(ctx, 0)
		}
		reported := false
		if b != nil {
			defer func() {
				if !reported && !t.counted { // op panicked or called runtime.Goexit
					b.Done(ctx, t.n, Terminal)
				}
			}()
		}
		v, err := op(t)
		o := classifyErr(err)
		next = t.n + 1
		if t.taken.Load() {
			o = t.outcome
			next = t.n + max(t.started, 1)
		}
		if b != nil && !t.counted {
			if t.taken.Load() && t.started == 0 {
				release(ctx, []Budget{b}, t.n) // Do ran nothing: bad input, or ctx was done
			} else {
				b.Done(ctx, t.n, o)
			}
		}
		reported = true
		last = err
		if o == Terminal || o == Accept && err != nil {
			return v, stop(err)
		}
		return v, err
	}
}

// try is the context of one try of a Tries loop. The first Do that gets
// it (taken) runs the try, and reports back what it did.
type try struct {
	context.Context
	n      int    // the try's attempt number
	budget Budget // the loop's
	taken  atomic.Bool

	// Written by the Do that took the try, before it returns.
	counted bool    // Do counts the try on the loop's budget, primary included
	started int     // the attempts it started
	outcome Outcome // how it classified what it returned
}

type tryKey struct{}

func (t *try) String() string { return fmt.Sprintf("%v.WithTry(%d)", t.Context, t.n) }

func (t *try) Value(key any) any {
	switch key {
	case tryKey{}:
		return t
	case attemptKey{}:
		return t.n
	}
	return t.Context.Value(key)
}

// takeTry returns the try of a Tries loop that ctx belongs to, if no Do
// took it yet, and takes it.
func takeTry(ctx context.Context) *try {
	if t, ok := ctx.Value(tryKey{}).(*try); ok && t.taken.CompareAndSwap(false, true) {
		return t
	}
	return nil
}

// sameBudget reports whether a and b are one budget. Only values that
// compare without a panic are compared: pointers, as budgets are, and the
// like; a struct may hold what == cannot compare.
func sameBudget(a, b Budget) bool {
	if a == nil || b == nil {
		return false
	}
	ta := reflect.TypeOf(a)
	switch ta.Kind() {
	case reflect.Struct, reflect.Array, reflect.Interface:
		return false
	}
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}
