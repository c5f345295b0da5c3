package hedge_test

import (
	"context"
	"net/http"
	"testing"
	"time"
	"unsafe"

	"github.com/tailcut/hedge"
)

// stackAddr returns an address in its own frame.
//
//go:noinline
func stackAddr() uintptr {
	var b byte
	return uintptr(unsafe.Pointer(&b))
}

// depthBudget notes where the stack stands in the budget's Done for the
// primary, to set against where it stood in fn.
type depthBudget struct{ fn, done uintptr }

func (b *depthBudget) Allow(context.Context, int) bool { return true }

func (b *depthBudget) Done(_ context.Context, k int, o hedge.Outcome) {
	if k == 0 && o == hedge.Accept {
		b.done = stackAddr()
	}
}

// A budget that keeps state per key (an Adaptive, with its breaker) is
// deep, and an attempt's goroutine starts with a small stack: the
// budget's Done for the attempt that decided the call runs with the frames
// that recorded the result off the stack, at most a few hundred bytes
// below fn's own, so that the stack need not grow on every call.
func TestBudgetDoneIsShallow(t *testing.T) {
	type response struct { // the shape of hedgehttp's result
		resp *http.Response
		o    hedge.Outcome
		a    *int
	}
	b := &depthBudget{}
	p := hedge.Policy[response]{Delay: hedge.Fixed(time.Hour), Budget: b}
	hedge.Do(context.Background(), p, func(context.Context) (response, error) {
		b.fn = stackAddr()
		return response{resp: &http.Response{}, o: hedge.Accept, a: new(int)}, nil
	})
	// 152 bytes on amd64 (224 under the race detector); 456 (864) when
	// Done ran under record's frames.
	if depth := int(b.fn) - int(b.done); depth < 0 || depth > 320 {
		t.Errorf("the budget's Done ran %d bytes below fn's frame, want at most 320", depth)
	}
}
