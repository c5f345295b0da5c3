package hedge

import "errors"

// Outcome is how Do treats one attempt's result. The zero value is Accept.
type Outcome int

const (
	// Accept ends the call with this result; the other attempts are cancelled.
	Accept Outcome = iota
	// Retryable keeps the call going: the other attempts run on, and the
	// next attempt may start at once. If nothing else is left, Do returns
	// the last retryable result.
	Retryable
	// Terminal ends the call with this result at once; the other attempts
	// are cancelled. A classifier's answer outside Accept, Retryable and
	// Terminal is treated as Terminal.
	Terminal
	// Canceled is what Do reports to a Budget for an attempt whose result
	// did not count: a loser (also one that answered in the same instant
	// as the winner), or an attempt cut off because the caller gave up.
	// Classifiers do not return it; if one does, Do treats it as Terminal.
	Canceled
	// Failed is a failure that starts nothing at once: the other attempts
	// run on and the hedges already scheduled still come, but unlike
	// Retryable it does not start the next attempt now. If nothing else is
	// left, Do returns it as it returns a Retryable result. A retry loop
	// of Tries around Do treats every Retryable result so, without a
	// classifier of its own: a failure is retried once, by the loop, after
	// its backoff, not at once by Do as well.
	Failed
	// TimedOut is what Do reports to a Budget for an attempt that the
	// call's deadline (the Timeout's or ctx's) cut off before it answered.
	// Unlike a loser's Canceled, it says something of the upstream: a
	// primary that never answered in time is a failure to a Breaker.
	// Classifiers do not return it; if one does, Do treats it as Terminal.
	TimedOut
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Accept:
		return "Accept"
	case Retryable:
		return "Retryable"
	case Terminal:
		return "Terminal"
	case Canceled:
		return "Canceled"
	case Failed:
		return "Failed"
	case TimedOut:
		return "TimedOut"
	}
	return "Outcome(?)"
}

// Classify is the default classifier: a nil error is Accept, an error
// marked with Permanent is Terminal, and any other error is Retryable.
// It ignores the value.
func Classify[T any](_ T, err error) Outcome { return classifyErr(err) }

func classifyErr(err error) Outcome {
	if err == nil {
		return Accept
	}
	var p *permanentError
	if errors.As(err, &p) {
		return Terminal
	}
	return Retryable
}

// Permanent marks err as terminal for the default classifier: Do returns it
// at once and cancels the other attempts, as it would for a request that a
// duplicate cannot fix (bad input, not found, permission denied). The
// marked error wraps err, so errors.Is and errors.As see through it.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }
