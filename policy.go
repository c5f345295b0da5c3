package hedge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
)

// Policy says how Do hedges one kind of call. It is a plain value: copy it,
// print it, share it between goroutines (its func fields make it not
// comparable with ==). State that lives across calls (an adaptive delay, a
// budget, stats) sits behind the interface fields, whose implementations
// must be safe for concurrent use.
//
// Auto returns the production Policy: an Adaptive, which learns the
// plan and bounds and guards the hedges, as both Delay and Budget. The
// zero value is valid and holds no state: a primary and one hedge after
// DefaultDelay, the default classifier, no timeout beyond ctx's, no
// budget, real time.
type Policy[T any] struct {
	// Delay says when to start each hedge. Nil means Fixed(DefaultDelay).
	// An Adaptive plans from what it learns. A negative delay, as
	// Fixed(-1) answers, starts no timed hedge: only an attempt that ends
	// retryable starts the next, at once, which makes the call a retry
	// loop without a backoff.
	Delay Delay

	// MaxAttempts bounds the attempts of one call, the primary included.
	// 0 means 2 (the primary and one hedge), or what a Planner or an
	// Adaptive plans for (up to 3); 1 disables hedging; values below 0
	// or above MaxAttemptsLimit are an ErrInvalidPolicy.
	MaxAttempts int

	// Timeout bounds the whole call, every attempt included: a hedge never
	// gets a fresh timeout. 0 means only ctx's deadline applies; a negative
	// Timeout is an ErrInvalidPolicy.
	Timeout time.Duration

	// Classify tells accept, retryable and terminal results apart. Nil
	// means Classify[T]. It runs on the attempt's goroutine, possibly
	// concurrently with itself.
	Classify func(T, error) Outcome

	// Budget bounds extra attempts across calls. Nil grants every attempt.
	// An Adaptive that is also the Delay bounds its own plan. A budget of
	// this package whose fields are out of range is an ErrInvalidPolicy
	// that also wraps ErrInvalidBudget.
	Budget Budget

	// Discard receives, exactly once, every value fn returned with a nil
	// error that Do did not return: a loser that answered late, a
	// retryable result superseded by a later one. Use it to close a
	// response body. Nil drops them. It runs on an attempt's goroutine and
	// must not panic. When Do returns a result, the values it superseded
	// have been discarded; a loser that answers after the decision is
	// discarded when it answers.
	Discard func(T)

	// Observer receives a summary of every call. Nil observes nothing.
	Observer Observer

	// Clock is the time source for delays and the Timeout. Nil means real
	// time. Cancellation by ctx follows ctx's own clock.
	Clock clock.Clock

	// Inline runs the primary on the caller's goroutine instead of a
	// goroutine of its own, and after it the attempt that its retryable
	// result starts at once, if any, and so on for that attempt's. That
	// saves a goroutine per call, and fn runs on the caller's stack,
	// already grown, where a deep client (a net/http Transport needs
	// about 8 KiB) grows a new goroutine's stack by copying it. The price
	// is the promise that Do returns at the deadline even if fn ignores
	// its context: Do returns once every fn it ran on the caller's
	// goroutine has, and those attempts' Delay and Budget hooks (Next and
	// Allow before fn, Done after it) run there too. So a call that a
	// hedge wins, the slow kind hedging is for, returns only once the
	// primary's fn has returned from its cancellation (hedgehttp's zero
	// Transport leaves it off for that). Set it when fn returns as soon
	// as its context ends, as net/http's, grpc-go's and database/sql's
	// calls do, and the calls rarely need a hedge. A call whose first
	// hedge Do finds due at once before it asks any hook of the user's (a
	// Fixed delay of 0 and no Budget) runs its primary on a goroutine of
	// its own all the same. False, the zero value, runs every attempt on
	// a goroutine of its own.
	Inline bool
}

// Validate reports what Do would reject p for, so that a program can
// check its policies at startup rather than at its first call: a field
// out of range (MaxAttempts, Timeout), a delay of this package whose
// settings are (a Percentile's Quantile, an Adaptive's Load, a
// MaxAttempts that would cut an Adaptive's plans), or a budget of this
// package whose fields are. The error wraps ErrInvalidPolicy, and
// ErrInvalidBudget too for a budget; its message names the field. It is
// nil for the zero Policy.
//
// The delays and budgets of this package read their fields on first
// use, so Validate reads them: set them before. A Keyed delay's Key is
// called with context.Background(), and its New for that key, to check
// the delay it would make. Validate calls nothing else of the user's,
// and is safe to call concurrently with Do on the same delays and
// budgets.
func (p Policy[T]) Validate() error {
	if _, err := p.attempts(); err != nil {
		return err
	}
	if v, ok := p.Delay.(validator); ok {
		if _, err := v.validate(context.Background(), p.MaxAttempts); err != nil {
			return err
		}
	}
	return p.checkBudget()
}

// attempts checks MaxAttempts and Timeout and returns the attempt bound.
func (p *Policy[T]) attempts() (int, error) {
	switch {
	case p.MaxAttempts < 0:
		return 0, fmt.Errorf("%w: Policy.MaxAttempts %d is negative", ErrInvalidPolicy, p.MaxAttempts)
	case p.MaxAttempts > MaxAttemptsLimit:
		return 0, fmt.Errorf("%w: Policy.MaxAttempts %d is above MaxAttemptsLimit %d", ErrInvalidPolicy, p.MaxAttempts, MaxAttemptsLimit)
	case p.Timeout < 0:
		return 0, fmt.Errorf("%w: Policy.Timeout %v is negative", ErrInvalidPolicy, p.Timeout)
	case p.MaxAttempts == 0:
		return 2, nil
	}
	return p.MaxAttempts, nil
}

// checkBudget returns the error of a Budget of this package whose fields
// are out of range, as a Policy's error. After the budget's first use it
// costs a type assertion and an atomic load.
func (p *Policy[T]) checkBudget() error {
	if p.Budget == nil {
		return nil
	}
	if err := checkBudget(p.Budget); err != nil {
		if errors.Is(err, ErrInvalidPolicy) {
			return err // an Adaptive's
		}
		return invalidBudget{err}
	}
	return nil
}
