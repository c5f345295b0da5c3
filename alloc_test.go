package hedge_test

import (
	"context"
	"testing"
	"time"

	"github.com/tailcut/hedge"
)

// The fast path, a primary that answers before its hedge is due, costs
// three allocations: the call's state, its step function and its timer.
func TestFastPathAllocations(t *testing.T) {
	p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
	fn := func(context.Context) (int, error) { return 1, nil }
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { hedge.Do(ctx, p, fn) }); n > 3 {
		t.Errorf("fast path: %v allocations per call, want at most 3", n)
	}
	// The production policy adds none: its key's state is made once.
	auto := hedge.Auto[int]()
	if n := testing.AllocsPerRun(1000, func() { hedge.Do(ctx, auto, fn) }); n > 3 {
		t.Errorf("Auto: %v allocations per call, want at most 3", n)
	}
	// The primary on the caller's goroutine costs no allocation either.
	p.Inline = true
	if n := testing.AllocsPerRun(1000, func() { hedge.Do(ctx, p, fn) }); n > 3 {
		t.Errorf("Inline: %v allocations per call, want at most 3", n)
	}
	// Without a timed hedge and a timeout there is no timer at all.
	p = hedge.Policy[int]{MaxAttempts: 1}
	if n := testing.AllocsPerRun(1000, func() { hedge.Do(ctx, p, fn) }); n > 2 {
		t.Errorf("MaxAttempts 1: %v allocations per call, want at most 2", n)
	}
}

// A start reported by an attempt costs no allocation: the fast path with
// a primary that reports its start stays at three.
func TestStartedAllocations(t *testing.T) {
	p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
	fn := func(ctx context.Context) (int, error) { hedge.Started(ctx); return 1, nil }
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { hedge.Do(ctx, p, fn) }); n > 3 {
		t.Errorf("fast path reporting its start: %v allocations per call, want at most 3", n)
	}
}
