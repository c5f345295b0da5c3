package hedgehttp

import (
	"fmt"

	"github.com/tailcut/hedge"
)

// Validate reports what would make every hedged request fail, so that a
// program can check its Transport at startup rather than at its first
// request: a pattern of Routes that http.ServeMux rejects, a negative
// MaxRoutes, a MaxAttempts out of range, a Delay or a Budget of the hedge
// package whose settings are (as hedge.Policy.Validate finds them, a
// MaxAttempts that would cut a hedge.Adaptive's plans included), Inline
// with a Delay or a Budget. The
// error wraps hedge.ErrInvalidPolicy and names the field. It is nil for
// the zero Transport.
//
// Validate reads the fields the Transport reads once, as its first
// request would: set them before. It is safe for concurrent use.
func (t *Transport) Validate() error {
	t.once.Do(t.init)
	return t.err
}

// check returns the error of MaxAttempts, Delay and Budget; Routes and
// MaxRoutes are checked as the routes are made.
func (t *Transport) check() error {
	switch {
	case t.Inline && (t.Delay != nil || t.Budget != nil):
		return fmt.Errorf("%w: Transport.Inline needs Delay and Budget nil", hedge.ErrInvalidPolicy)
	case t.MaxAttempts < 0:
		return fmt.Errorf("%w: Transport.MaxAttempts %d is negative", hedge.ErrInvalidPolicy, t.MaxAttempts)
	case t.MaxAttempts > hedge.MaxAttemptsLimit:
		return fmt.Errorf("%w: Transport.MaxAttempts %d is above hedge.MaxAttemptsLimit %d", hedge.ErrInvalidPolicy, t.MaxAttempts, hedge.MaxAttemptsLimit)
	}
	// The Transport wraps its Delay before Do sees it, so it asks here
	// what Do would say of it unwrapped; without one, of the Adaptive
	// each route gets, which a MaxAttempts of 2 would cut.
	delay, field := t.Delay, "Transport.Delay"
	if delay == nil {
		delay, field = &hedge.Adaptive{MaxHedges: t.ownHedges()}, "Transport.MaxAttempts"
	}
	if err := (hedge.Policy[struct{}]{Delay: delay, MaxAttempts: t.maxAttempts}).Validate(); err != nil {
		return fmt.Errorf("%w (%s)", err, field)
	}
	if err := (hedge.Policy[struct{}]{Budget: t.Budget}).Validate(); err != nil {
		return fmt.Errorf("%w (Transport.Budget)", err)
	}
	return nil
}
