package hedge_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/hedge"
)

// mutexLimit is the InflightLimit a careful programmer writes first: a
// counter behind a mutex. It is the baseline the atomic budgets must beat
// under contention.
type mutexLimit struct {
	mu       sync.Mutex
	n, taken int
}

func (l *mutexLimit) Allow(_ context.Context, k int) bool {
	if k < 1 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taken >= l.n {
		return false
	}
	l.taken++
	return true
}

func (l *mutexLimit) Done(_ context.Context, k int, _ hedge.Outcome) {
	if k < 1 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taken > 0 {
		l.taken--
	}
}

// One iteration is the budget traffic of one hedged call: ask for the
// hedge, return it, and report the primary.
func budgetCall(b hedge.Budget) {
	b.Allow(context.Background(), 0)
	if b.Allow(context.Background(), 1) {
		b.Done(context.Background(), 1, hedge.Canceled)
	}
	b.Done(context.Background(), 0, hedge.Accept)
}

func BenchmarkBudget(b *testing.B) {
	budgets := []struct {
		name string
		make func() hedge.Budget
	}{
		{"mutex-baseline", func() hedge.Budget { return &mutexLimit{n: 1 << 30} }},
		{"InflightLimit", func() hedge.Budget { l := &hedge.InflightLimit{Max: 1 << 30}; return l }},
		{"TokenBucket", func() hedge.Budget { t := &hedge.TokenBucket{MaxTokens: 100, TokenRatio: 0.1}; return t }},
		// Real time: each Allow and Done reads the clock, as in production.
		{"RatioBudget", func() hedge.Budget {
			r := &hedge.RatioBudget{Ratio: 0.5, MinPerSecond: 10, Window: 10 * time.Second}
			return r
		}},
	}
	for _, bb := range budgets {
		b.Run(bb.name+"/serial", func(b *testing.B) {
			budget := bb.make()
			b.ReportAllocs()
			for b.Loop() {
				budgetCall(budget)
			}
		})
		b.Run(bb.name+"/parallel", func(b *testing.B) {
			budget := bb.make()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					budgetCall(budget)
				}
			})
		})
	}
}
