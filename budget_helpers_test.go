package hedge_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tailcut/hedge"
)

// configCase is one configuration of a budget's constructor, and whether
// the constructor must accept it.
type configCase[C any] struct {
	name string
	c    C
	ok   bool
}

// checkConstructor checks that newBudget accepts the good configurations
// and refuses the others with an error wrapping ErrInvalidBudget and no
// budget.
func checkConstructor[C any, B any](t *testing.T, newBudget func(C) (*B, error), cases []configCase[C]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			b, err := newBudget(tt.c)
			switch {
			case tt.ok && (err != nil || b == nil):
				t.Errorf("got %v, want a budget", err)
			case !tt.ok && (!errors.Is(err, hedge.ErrInvalidBudget) || b != nil):
				t.Errorf("got a budget: %t, error %v; want only an error wrapping ErrInvalidBudget", b != nil, err)
			}
		})
	}
}

// checkZeroBudget checks that a budget's zero value hears every outcome
// without panicking, grants the primary and refuses every hedge.
func checkZeroBudget(t *testing.T, b interface {
	hedge.Budget
	hedge.Releaser
}) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []hedge.Outcome{hedge.Accept, hedge.Retryable, hedge.Terminal, hedge.Canceled, hedge.Failed, hedge.TimedOut} {
		b.Done(ctx, 0, o)
		b.Done(ctx, 1, o)
	}
	b.Release(ctx, 1)
	if !b.Allow(ctx, 0) || b.Allow(ctx, 1) {
		t.Error("want the primary granted and the hedge refused")
	}
}
