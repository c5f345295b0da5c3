package hedge_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
)

func TestNewBudgetErrors(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	ratio := func(r, minPerSecond float64, window time.Duration) func() (bool, error) {
		return func() (bool, error) {
			b, err := hedge.NewRatioBudget(r, minPerSecond, window, nil)
			return b != nil, err
		}
	}
	bucket := func(maxTokens int, r float64) func() (bool, error) {
		return func() (bool, error) {
			b, err := hedge.NewTokenBucket(maxTokens, r)
			return b != nil, err
		}
	}
	inflight := func(n int) func() (bool, error) {
		return func() (bool, error) {
			l, err := hedge.NewInflightLimit(n)
			return l != nil, err
		}
	}
	tests := []struct {
		name string
		make func() (bool, error)
		ok   bool
	}{
		{"ratio: smallest", ratio(0, 0, time.Second), true},
		{"ratio: largest", ratio(1000, 1e6, time.Minute), true},
		{"ratio: typical", ratio(0.1, 10, 10*time.Second), true},
		{"ratio: negative ratio", ratio(-0.1, 10, 10*time.Second), false},
		{"ratio: ratio above 1000", ratio(1000.5, 10, 10*time.Second), false},
		{"ratio: NaN ratio", ratio(nan, 10, 10*time.Second), false},
		{"ratio: infinite ratio", ratio(inf, 10, 10*time.Second), false},
		{"ratio: negative minPerSecond", ratio(0.1, -1, 10*time.Second), false},
		{"ratio: NaN minPerSecond", ratio(0.1, nan, 10*time.Second), false},
		{"ratio: infinite minPerSecond", ratio(0.1, inf, 10*time.Second), false},
		{"ratio: minPerSecond above 1e6", ratio(0.1, 2e6, 10*time.Second), false},
		{"ratio: window under a second", ratio(0.1, 10, time.Second-1), false},
		{"ratio: zero window", ratio(0.1, 10, 0), false},
		{"ratio: window over a minute", ratio(0.1, 10, time.Minute+time.Second), false},
		{"ratio: window not in whole seconds", ratio(0.1, 10, 1500*time.Millisecond), false},
		{"bucket: smallest", bucket(1, 0.001), true},
		{"bucket: largest", bucket(1000, 1e300), true},
		{"bucket: ratio rounds up to a thousandth", bucket(10, 0.0005), true},
		{"bucket: no tokens", bucket(0, 0.1), false},
		{"bucket: negative tokens", bucket(-1, 0.1), false},
		{"bucket: over 1000 tokens", bucket(1001, 0.1), false},
		{"bucket: zero ratio", bucket(10, 0), false},
		{"bucket: ratio rounds to zero", bucket(10, 0.0004), false},
		{"bucket: negative ratio", bucket(10, -1), false},
		{"bucket: NaN ratio", bucket(10, nan), false},
		{"bucket: infinite ratio", bucket(10, inf), false},
		{"inflight: never hedge", inflight(0), true},
		{"inflight: negative", inflight(-1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			made, err := tt.make()
			switch {
			case tt.ok && (err != nil || !made):
				t.Errorf("got %v, want a budget", err)
			case !tt.ok && (!errors.Is(err, hedge.ErrInvalidBudget) || made):
				t.Errorf("got a budget: %t, error %v; want only an error wrapping ErrInvalidBudget", made, err)
			}
		})
	}
}

// Every budget's zero value is safe to use and refuses every hedge: a
// budget forgotten in a struct fails closed, not open.
func TestBudgetZeroValues(t *testing.T) {
	for name, b := range map[string]hedge.Budget{
		"RatioBudget":   new(hedge.RatioBudget),
		"TokenBucket":   new(hedge.TokenBucket),
		"InflightLimit": new(hedge.InflightLimit),
	} {
		t.Run(name, func(t *testing.T) {
			for _, o := range []hedge.Outcome{hedge.Accept, hedge.Retryable, hedge.Terminal, hedge.Canceled} {
				b.Done(context.Background(), 0, o)
				b.Done(context.Background(), 1, o)
			}
			if !b.Allow(context.Background(), 0) {
				t.Error("Allow(0) = false, want the primary granted")
			}
			if b.Allow(context.Background(), 1) {
				t.Error("Allow(1) = true, want every hedge refused")
			}
		})
	}
}

// Allow and Done run under every hedged call's lock, on every call:
// they must not allocate.
func TestBudgetAllocations(t *testing.T) {
	ratio, _ := hedge.NewRatioBudget(0.5, 10, 10*time.Second, nil)
	bucket, _ := hedge.NewTokenBucket(10, 0.5)
	inflight, _ := hedge.NewInflightLimit(1)
	for name, b := range map[string]hedge.Budget{"ratio": ratio, "bucket": bucket, "inflight": inflight} {
		call := func() {
			b.Allow(context.Background(), 0)
			if b.Allow(context.Background(), 1) {
				b.Done(context.Background(), 1, hedge.Canceled)
			}
			b.Done(context.Background(), 0, hedge.Accept)
			b.Done(context.Background(), 0, hedge.Retryable)
		}
		if n := testing.AllocsPerRun(1000, call); n != 0 {
			t.Errorf("%s: %v allocations per Allow and Done, want 0", name, n)
		}
	}
}

// budgetRace starts n goroutines that run f(i) at once and waits for them.
func budgetRace(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

const budgetRacers = 64

// The budgets are exact under contention: whatever the interleaving, they
// grant what a sequential run would, never one more.
func TestBudgetContention(t *testing.T) {
	t.Run("InflightLimit: 64 goroutines race for 2 permits", func(t *testing.T) {
		for round := range 200 {
			l, _ := hedge.NewInflightLimit(2)
			var granted atomic.Int64
			budgetRace(budgetRacers, func(int) {
				if l.Allow(context.Background(), 1) {
					granted.Add(1)
				}
			})
			if g, in := granted.Load(), l.InFlight(); g != 2 || in != 2 {
				t.Fatalf("round %d: %d granted, %d in flight; want 2 and 2", round, g, in)
			}
		}
	})
	t.Run("InflightLimit: permits churn, never more than 2 held", func(t *testing.T) {
		l, _ := hedge.NewInflightLimit(2)
		var held, most atomic.Int64
		budgetRace(budgetRacers, func(int) {
			for range 200 {
				if !l.Allow(context.Background(), 1) {
					continue
				}
				n := held.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				held.Add(-1)
				l.Done(context.Background(), 1, hedge.Accept)
			}
		})
		if m, in := most.Load(), l.InFlight(); m > 2 || in != 0 {
			t.Errorf("at most %d held at once, %d left in flight; want ≤ 2 and 0", m, in)
		}
	})
	t.Run("TokenBucket: failures and successes add up exactly", func(t *testing.T) {
		b, _ := hedge.NewTokenBucket(100, 0.5)
		budgetRace(budgetRacers, func(int) { b.Done(context.Background(), 1, hedge.Retryable) })
		if got := b.Tokens(); got != 36 {
			t.Fatalf("100 tokens less 64 failures = %v, want 36", got)
		}
		// Between 4 and 68 tokens, clamping never applies, so every
		// interleaving ends on the same count.
		budgetRace(budgetRacers, func(i int) {
			if i%2 == 0 {
				b.Done(context.Background(), 0, hedge.Retryable)
			} else {
				b.Done(context.Background(), 1, hedge.Accept)
			}
		})
		if got := b.Tokens(); got != 36-32+16 {
			t.Fatalf("36 tokens less 32 failures plus 32 successes at 0.5 = %v, want 20", got)
		}
		budgetRace(budgetRacers, func(int) { b.Done(context.Background(), 0, hedge.Retryable) })
		if got := b.Tokens(); got != 0 {
			t.Fatalf("20 tokens less 64 failures = %v, want 0", got)
		}
		small, _ := hedge.NewTokenBucket(3, 0.1)
		budgetRace(3*budgetRacers, func(int) { small.Done(context.Background(), 0, hedge.Retryable) })
		budgetRace(budgetRacers, func(int) { small.Done(context.Background(), 1, hedge.Accept) })
		if got := small.Tokens(); got != 3 {
			t.Fatalf("an empty 3-token bucket after 64 successes at 0.1 holds %v, want 3", got)
		}
	})
	t.Run("RatioBudget: 64 goroutines race for 64 credits", func(t *testing.T) {
		mock := clock.NewMock() // never moved: every call lands in one second
		b, _ := hedge.NewRatioBudget(0.1, 0, 10*time.Second, mock)
		budgetRace(budgetRacers, func(int) {
			for range 10 {
				b.Allow(context.Background(), 0)
			}
		})
		var granted atomic.Int64
		budgetRace(budgetRacers, func(int) {
			for range 4 {
				if b.Allow(context.Background(), 1) {
					granted.Add(1)
				}
			}
		})
		if got := granted.Load(); got != 64 {
			t.Errorf("640 calls at ratio 0.1: %d hedges granted, want 64", got)
		}
	})
}
