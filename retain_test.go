package hedge_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// retainedPerCall makes n calls under parent(t) whose winner waits on its
// context, as net/http and grpc-go do, and returns the heap they leave
// behind after Do returned, per call. The calls run in a bubble of their
// own, so that the figure is the same however the machine schedules them:
// the bubble keeps its timers in one heap of its own, where real time
// would spread them over the heaps of whichever Ps the calls ran on, a
// delay never fires mid-call, and every attempt has ended before the heap
// is measured.
func retainedPerCall(t *testing.T, parent func(*testing.T) context.Context, n int, p hedge.Policy[int], fn func(context.Context) (int, error)) float64 {
	var perCall float64
	synctest.Test(t, func(t *testing.T) {
		ctx := parent(t)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			hedge.Do(ctx, p, fn)
		}
		synctest.Wait()
		runtime.GC()
		runtime.ReadMemStats(&after)
		perCall = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	})
	return perCall
}

// The winner's context lasts until the call's deadline, but what ends it
// then retains a small object of its own, not the call: a long deadline
// must not keep a kilobyte per call alive. A bare context.WithTimeout
// retains about 290 bytes; the goal is at most 400. A winner that stopped
// waiting on its context before it returned, as hedgehttp's attempts do
// once the response's header is in, retains nothing.
func TestWinnerRetainsLittleUntilTheDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap over 20,000 calls")
	}
	const n = 20_000
	waits := func(ctx context.Context) (int, error) { ctx.Done(); return 1, nil }
	stopsWaiting := func(ctx context.Context) (int, error) {
		// As hedgehttp does: a callback on the attempt's context (its
		// AfterFunc method, which makes no Done channel) while the
		// response's header is awaited, removed once it is in.
		stop := ctx.(interface{ AfterFunc(func()) func() bool }).AfterFunc(func() {})
		stop()
		return 1, nil
	}
	background := func(*testing.T) context.Context { return context.Background() }
	callerDeadline := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		t.Cleanup(cancel)
		return ctx
	}
	tests := []struct {
		name string
		ctx  func(*testing.T) context.Context
		p    hedge.Policy[int]
		fn   func(context.Context) (int, error)
		max  float64
	}{
		{"the policy's Timeout", background, hedge.Policy[int]{Timeout: time.Hour}, waits, 400},
		{"the caller's deadline", callerDeadline, hedge.Policy[int]{}, waits, 400},
		{"no longer waited on", background, hedge.Policy[int]{Timeout: time.Hour}, stopsWaiting, 16},
	}
	for _, tt := range tests {
		if got := retainedPerCall(t, tt.ctx, n, tt.p, tt.fn); got > tt.max {
			t.Errorf("%s: %.0f bytes retained per call, want at most %.0f", tt.name, got, tt.max)
		}
	}
}
