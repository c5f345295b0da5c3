package hedge

import (
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
)

// MaxAttemptsLimit is the largest MaxAttempts a Policy may ask for. More
// copies of one request than this only add load: by the time the tenth
// attempt starts, the first nine have all missed their delay.
const MaxAttemptsLimit = 10

// ErrInvalidPolicy is wrapped by the error Do returns, without calling fn,
// for a Policy it cannot run.
var ErrInvalidPolicy = errors.New("hedge: invalid policy")

// ErrNilFunc is returned by Do when fn is nil.
var ErrNilFunc = errors.New("hedge: nil function")

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
	// An Adaptive plans from what it learns.
	Delay Delay

	// MaxAttempts bounds the attempts of one call, the primary included.
	// 0 means 2 (the primary and one hedge), or what a Planner or an
	// Adaptive plans for (up to 3); 1 disables hedging; values
	// below 0 or above MaxAttemptsLimit are an ErrInvalidPolicy.
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
	// An Adaptive that is also the Delay bounds its own plan.
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
}

// attempts validates the policy and returns its attempt bound.
func (p *Policy[T]) attempts() (int, error) {
	switch {
	case p.MaxAttempts < 0 || p.MaxAttempts > MaxAttemptsLimit:
		return 0, fmt.Errorf("%w: MaxAttempts %d is outside 0..%d", ErrInvalidPolicy, p.MaxAttempts, MaxAttemptsLimit)
	case p.Timeout < 0:
		return 0, fmt.Errorf("%w: negative Timeout %v", ErrInvalidPolicy, p.Timeout)
	case p.MaxAttempts == 0:
		return 2, nil
	}
	return p.MaxAttempts, nil
}
