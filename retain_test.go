package hedge_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/tailcut/hedge"
)

// retainedPerCall makes n calls whose winner waits on its context, as
// net/http and grpc-go do, and returns the heap they leave behind after
// Do returned, per call.
func retainedPerCall(ctx context.Context, n int, p hedge.Policy[int], fn func(context.Context) (int, error)) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		hedge.Do(ctx, p, fn)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
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
	callerDeadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	tests := []struct {
		name string
		ctx  context.Context
		p    hedge.Policy[int]
		fn   func(context.Context) (int, error)
		max  float64
	}{
		{"the policy's Timeout", context.Background(), hedge.Policy[int]{Timeout: time.Hour}, waits, 400},
		{"the caller's deadline", callerDeadline, hedge.Policy[int]{}, waits, 400},
		{"no longer waited on", context.Background(), hedge.Policy[int]{Timeout: time.Hour}, stopsWaiting, 16},
	}
	for _, tt := range tests {
		if got := retainedPerCall(tt.ctx, n, tt.p, tt.fn); got > tt.max {
			t.Errorf("%s: %.0f bytes retained per call, want at most %.0f", tt.name, got, tt.max)
		}
	}
}
