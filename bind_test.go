package hedge_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/hedge"
)

// countingAdaptive is a user's Budget and Delay that wraps an Adaptive,
// embedding it, and counts the calls Do makes to its own Allow and Next.
type countingAdaptive struct {
	*hedge.Adaptive
	allows, nexts *atomic.Int32
}

func (c countingAdaptive) Allow(ctx context.Context, k int) bool {
	c.allows.Add(1)
	return c.Adaptive.Allow(ctx, k)
}

func (c countingAdaptive) Next(ctx context.Context, k int) time.Duration {
	c.nexts.Add(1)
	return c.Adaptive.Next(ctx, k)
}

// A Delay or Budget of the user's that embeds an Adaptive is the user's:
// Do calls its methods, not those of the Adaptive's key behind it.
func TestWrappedAdaptiveHooksAreCalled(t *testing.T) {
	w := countingAdaptive{&hedge.Adaptive{}, new(atomic.Int32), new(atomic.Int32)}
	for _, tc := range []struct {
		name string
		p    hedge.Policy[int]
	}{
		{"budget", hedge.Policy[int]{Budget: w, Delay: hedge.Fixed(time.Hour)}},
		{"delay", hedge.Policy[int]{Delay: w}},
		{"both", hedge.Policy[int]{Delay: w, Budget: w}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.allows.Store(0)
			w.nexts.Store(0)
			if _, err := hedge.Do(context.Background(), tc.p, func(context.Context) (int, error) { return 1, nil }); err != nil {
				t.Fatal(err)
			}
			if tc.p.Budget != nil && w.allows.Load() == 0 {
				t.Errorf("the wrapper's Allow was not called")
			}
			if tc.p.Delay == hedge.Delay(w) && w.nexts.Load() == 0 {
				t.Errorf("the wrapper's Next was not called")
			}
		})
	}
}
