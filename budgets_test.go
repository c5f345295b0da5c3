package hedge_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
)

// Allow and Done run under every hedged call's lock, on every call:
// they must not allocate.
func TestBudgetAllocations(t *testing.T) {
	ratio := &hedge.RatioBudget{Ratio: 0.5, MinPerSecond: 10, Window: 10 * time.Second}
	bucket := &hedge.TokenBucket{MaxTokens: 10, TokenRatio: 0.5}
	inflight := &hedge.InflightLimit{Max: 1}
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
			l := &hedge.InflightLimit{Max: 2}
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
		l := &hedge.InflightLimit{Max: 2}
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
		b := &hedge.TokenBucket{MaxTokens: 100, TokenRatio: 0.5}
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
		small := &hedge.TokenBucket{MaxTokens: 3, TokenRatio: 0.1}
		budgetRace(3*budgetRacers, func(int) { small.Done(context.Background(), 0, hedge.Retryable) })
		budgetRace(budgetRacers, func(int) { small.Done(context.Background(), 1, hedge.Accept) })
		if got := small.Tokens(); got != 3 {
			t.Fatalf("an empty 3-token bucket after 64 successes at 0.1 holds %v, want 3", got)
		}
	})
	t.Run("RatioBudget: 64 goroutines race for 64 credits", func(t *testing.T) {
		mock := clock.NewMock() // never moved: every call lands in one second
		b := &hedge.RatioBudget{Ratio: 0.1, Window: 10 * time.Second, Clock: mock}
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
