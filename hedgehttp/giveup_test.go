package hedgehttp_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// endsAsAHedgeLinks is a request context that ends while a hedge's
// request context links to it: when the context package looks it up
// from hedgehttp's hedge, which it does between its two checks of
// whether the parent has ended, so that the second finds it ended and
// runs the link's cancellation on a goroutine of its own.
type endsAsAHedgeLinks struct {
	context.Context
	cancel context.CancelFunc
	ended  atomic.Bool
}

func (c *endsAsAHedgeLinks) Value(key any) any {
	if _, ok := key.(*int); ok && !c.ended.Load() && linkingAHedge() { // the context package's own key
		c.ended.Store(true)
		c.cancel()
		return nil
	}
	return c.Context.Value(key)
}

// linkingAHedge reports whether the caller runs under hedgehttp's making
// of a hedge.
func linkingAHedge() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "hedgehttp.(*call).hedge") {
			return true
		}
		if !more {
			return false
		}
	}
}

// A caller that gives up just as a hedge is made: the hedge's request
// context, which hears it through the attempt, reads the attempt's values
// on a goroutine of its own while the hedge goes on to be sent, so
// sending it must not write what those values are made of (go test
// -race).
func TestCallerGivesUpAsAHedgeIsMade(t *testing.T) {
	inner, cancel := context.WithCancel(t.Context())
	defer cancel()
	ctx := &endsAsAHedgeLinks{Context: inner, cancel: cancel}
	tr := &hedgehttp.Transport{Base: roundTripFunc(hang), Delay: hedge.Fixed(ms)}
	_, err := tr.RoundTrip(get(t, "http://upstream.test/").WithContext(ctx))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RoundTrip: %v, want context.Canceled", err)
	}
	if !ctx.ended.Load() {
		t.Error("no hedge was made")
	}
}
