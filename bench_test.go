package hedge_test

import (
	"context"
	"testing"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/baseline"
)

//go:noinline
func answer1(context.Context) (int, error) { return 1, nil }

// hedgeWins is an upstream whose primary hangs until cancelled and whose
// hedge answers at once: every call pays for the hedge firing.
func hedgeWins(ctx context.Context, k int) (int, error) {
	if k == 0 {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return 1, nil
}

func BenchmarkFastPath(b *testing.B) {
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			answer1(ctx)
		}
	})
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			baseline.Floor(ctx, time.Hour, answer1)
		}
	})
	b.Run("handrolled", func(b *testing.B) {
		b.ReportAllocs()
		fn := func(ctx context.Context, _ int) (int, error) { return answer1(ctx) }
		for b.Loop() {
			baseline.HandRolled(ctx, time.Hour, fn)
		}
	})
	b.Run("hedge", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
		for b.Loop() {
			hedge.Do(ctx, p, answer1)
		}
	})
	b.Run("hedge-inline", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Inline: true}
		for b.Loop() {
			hedge.Do(ctx, p, answer1)
		}
	})
	b.Run("hedge-auto", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Auto[int]()
		for b.Loop() {
			hedge.Do(ctx, p, answer1)
		}
	})
	b.Run("hedge-cancelable-ctx", func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
		for b.Loop() {
			hedge.Do(ctx, p, answer1)
		}
	})
}

// Delay 0 makes the hedge fire on every call without measuring the
// timer's resolution instead of the code.
func BenchmarkHedgeFires(b *testing.B) {
	ctx := context.Background()
	b.Run("handrolled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			baseline.HandRolled(ctx, 0, hedgeWins)
		}
	})
	b.Run("hedge", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(0)}
		fn := func(ctx context.Context) (int, error) { return hedgeWins(ctx, hedge.Attempt(ctx)) }
		for b.Loop() {
			hedge.Do(ctx, p, fn)
		}
	})
}

// What a start reported by an attempt costs: the primary reports it and
// answers, alone; or the primary waits in a queue and the hedge, at once,
// reports its start, which cancels the primary, and answers.
func BenchmarkStarted(b *testing.B) {
	ctx := context.Background()
	b.Run("primary", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
		fn := func(ctx context.Context) (int, error) { hedge.Started(ctx); return 1, nil }
		for b.Loop() {
			hedge.Do(ctx, p, fn)
		}
	})
	b.Run("hedge-ties", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(0)}
		fn := func(ctx context.Context) (int, error) {
			k := hedge.Attempt(ctx)
			if k > 0 {
				hedge.Started(ctx)
			}
			return hedgeWins(ctx, k)
		}
		for b.Loop() {
			hedge.Do(ctx, p, fn)
		}
	})
}

func BenchmarkParallelFastPath(b *testing.B) {
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				answer1(ctx)
			}
		})
	})
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				baseline.Floor(ctx, time.Hour, answer1)
			}
		})
	})
	b.Run("handrolled", func(b *testing.B) {
		b.ReportAllocs()
		fn := func(ctx context.Context, _ int) (int, error) { return answer1(ctx) }
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				baseline.HandRolled(ctx, time.Hour, fn)
			}
		})
	})
	// Each delay's fast path: an hour's floor keeps the instant answers
	// from ever hedging, while the learned delays keep learning.
	for _, tt := range []struct {
		name  string
		delay hedge.Delay
	}{
		{"hedge-fixed", hedge.Fixed(time.Hour)},
		{"hedge-percentile", &hedge.Percentile{Floor: time.Hour, Ceiling: time.Hour}},
		{"hedge-planner", &hedge.Planner{Floor: time.Hour, Ceiling: time.Hour}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			var stats hedge.Stats
			p := hedge.Policy[int]{Delay: tt.delay, Observer: &stats}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					hedge.Do(ctx, p, answer1)
				}
			})
		})
	}
	// The production policy: a plan, a bound, a win rate and a breaker,
	// learning from every call.
	b.Run("hedge-inline", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Inline: true}
		for b.Loop() {
			hedge.Do(ctx, p, answer1)
		}
	})
	b.Run("hedge-auto", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Auto[int]()
		p.Observer = &hedge.Stats{}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				hedge.Do(ctx, p, answer1)
			}
		})
	})
}
