package hedge

import (
	"errors"
	"time"
)

const (
	// DefaultDelay is the hedge delay a Policy with a nil Delay uses: a
	// conservative guess at the p95 of a call within one data centre. Set
	// a Delay measured on your own upstream instead.
	DefaultDelay = 100 * time.Millisecond

	// MaxAttemptsLimit is the largest MaxAttempts a Policy may ask for.
	// More copies of one request than this only add load: by the time
	// the tenth attempt starts, the first nine have all missed their
	// delay.
	MaxAttemptsLimit = 10
)

var (
	// ErrInvalidPolicy is wrapped by the error that Policy.Validate
	// returns, and Do returns without calling fn, for a Policy that
	// cannot run. The message names the field.
	ErrInvalidPolicy = errors.New("hedge: invalid policy")

	// ErrInvalidBudget is wrapped by the error a budget with a field out
	// of range reports: Policy.Validate and Do return it (wrapping
	// ErrInvalidPolicy too) for a Policy whose Budget it is, and so does
	// the first try of Tries. Such a budget refuses every extra attempt.
	ErrInvalidBudget = errors.New("hedge: invalid budget")

	// ErrNilFunc is returned by Do when fn is nil.
	ErrNilFunc = errors.New("hedge: nil function")

	// ErrRefused is wrapped by the error that a retry of Tries returns,
	// without running its op, when the Budget refuses the retry. That
	// error also wraps the last try's error.
	ErrRefused = errors.New("hedge: retry refused by the budget")

	// ErrSuperseded is the cause with which Do cancels an attempt whose
	// result it will not return because another attempt's result was
	// chosen (a loser), or because a later retryable result replaced it:
	// context.Cause of the attempt's context returns it, while Err
	// returns context.Canceled. It tells instrumentation, logs and fn
	// itself that the attempt lost the race, not that the caller gave up
	// (then the cause is the caller's) or that the deadline passed
	// (context.DeadlineExceeded).
	ErrSuperseded = errors.New("hedge: superseded by another attempt")
)
