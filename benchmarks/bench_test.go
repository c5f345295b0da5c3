package benchmarks

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/baseline"
)

//go:noinline
func answer(context.Context) (int, error) { return 1, nil }

// hangsUnlessHedge is an upstream whose primary hangs until cancelled and
// whose hedge answers at once: every call pays for the hedge firing.
func hangsUnlessHedge(ctx context.Context, hedged bool) (int, error) {
	if !hedged {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return 1, nil
}

// failsafeDo runs fn through a failsafe-go executor the cheapest correct
// way: GetWithExecution, so that each attempt gets its own context and the
// losers are cancelled.
func failsafeDo(ctx context.Context, exec failsafe.Executor[int], fn func(context.Context, bool) (int, error)) (int, error) {
	return exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[int]) (int, error) {
		return fn(e.Context(), e.IsHedge())
	})
}

func BenchmarkFastPath(b *testing.B) {
	ctx := context.Background()
	fast := func(ctx context.Context, _ bool) (int, error) { return answer(ctx) }
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			answer(ctx)
		}
	})
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			baseline.Floor(ctx, time.Hour, answer)
		}
	})
	b.Run("handrolled", func(b *testing.B) {
		b.ReportAllocs()
		fn := func(ctx context.Context, _ int) (int, error) { return answer(ctx) }
		for b.Loop() {
			baseline.HandRolled(ctx, time.Hour, fn)
		}
	})
	b.Run("failsafe", func(b *testing.B) {
		b.ReportAllocs()
		exec := failsafe.With[int](hedgepolicy.NewWithDelay[int](time.Hour))
		for b.Loop() {
			failsafeDo(ctx, exec, fast)
		}
	})
	b.Run("hedge", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
		for b.Loop() {
			hedge.Do(ctx, p, answer)
		}
	})
	// The primary on the caller's goroutine, for an fn that honours its
	// context: below the floor's promise, so not held to it.
	b.Run("hedge-inline", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Inline: true}
		for b.Loop() {
			hedge.Do(ctx, p, answer)
		}
	})
}

// Delay 0 makes the hedge fire on every call without measuring the
// timer's resolution instead of the code.
func BenchmarkHedgeFires(b *testing.B) {
	ctx := context.Background()
	b.Run("handrolled", func(b *testing.B) {
		b.ReportAllocs()
		fn := func(ctx context.Context, k int) (int, error) { return hangsUnlessHedge(ctx, k > 0) }
		for b.Loop() {
			baseline.HandRolled(ctx, 0, fn)
		}
	})
	b.Run("failsafe", func(b *testing.B) {
		b.ReportAllocs()
		exec := failsafe.With[int](hedgepolicy.NewWithDelay[int](0))
		for b.Loop() {
			failsafeDo(ctx, exec, hangsUnlessHedge)
		}
	})
	b.Run("hedge", func(b *testing.B) {
		b.ReportAllocs()
		p := hedge.Policy[int]{Delay: hedge.Fixed(0)}
		fn := func(ctx context.Context) (int, error) { return hangsUnlessHedge(ctx, hedge.Attempt(ctx) > 0) }
		for b.Loop() {
			hedge.Do(ctx, p, fn)
		}
	})
}

func BenchmarkParallelFastPath(b *testing.B) {
	ctx := context.Background()
	fast := func(ctx context.Context, _ bool) (int, error) { return answer(ctx) }
	parallel := func(b *testing.B, call func()) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				call()
			}
		})
	}
	b.Run("bare", func(b *testing.B) { parallel(b, func() { answer(ctx) }) })
	b.Run("floor", func(b *testing.B) { parallel(b, func() { baseline.Floor(ctx, time.Hour, answer) }) })
	b.Run("handrolled", func(b *testing.B) {
		fn := func(ctx context.Context, _ int) (int, error) { return answer(ctx) }
		parallel(b, func() { baseline.HandRolled(ctx, time.Hour, fn) })
	})
	b.Run("failsafe-fixed", func(b *testing.B) {
		exec := failsafe.With[int](hedgepolicy.NewWithDelay[int](time.Hour))
		parallel(b, func() { failsafeDo(ctx, exec, fast) })
	})
	b.Run("hedge-fixed", func(b *testing.B) {
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
		parallel(b, func() { hedge.Do(ctx, p, answer) })
	})
	// Adaptive delays whose answers stay far above the instant calls: the
	// fast path, learning on every call.
	b.Run("failsafe-quantile", func(b *testing.B) {
		exec := failsafe.With[int](hedgepolicy.NewWithDelayQuantile[int](0.95, 1000, 100))
		parallel(b, func() { failsafeDo(ctx, exec, fast) })
	})
	b.Run("hedge-percentile", func(b *testing.B) {
		p := hedge.Policy[int]{Delay: &hedge.Percentile{Floor: time.Hour, Ceiling: time.Hour}}
		parallel(b, func() { hedge.Do(ctx, p, answer) })
	})
}
