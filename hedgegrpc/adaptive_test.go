package hedgegrpc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/codes"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// A method whose Delay is a hedge.Adaptive is bounded by it too: the
// Adaptive hears every attempt of the method's calls, so its breaker
// opens once half of a hundred primaries failed, as it would under Do.
func TestAdaptiveGuardsTheMethod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opened atomic.Int32
		a := &hedge.Adaptive{OnOpen: func(string) { opened.Add(1) }}
		cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
			"": {MaxAttempts: 3, Delay: a, NonFatalStatusCodes: unavailable},
		}}
		e := newEnv(t, cfg, map[string][]step{"down": {fail(ms, codes.Internal)}})
		for range 120 {
			if got := e.run(context.Background(), "down"); got.Code != codes.Internal {
				t.Fatalf("call ended with %v, want the primary's Internal", got.Code)
			}
		}
		if n := opened.Load(); n != 1 {
			t.Errorf("the Adaptive's breaker opened %d times over 120 failed primaries, want once", n)
		}
	})
}

// A hedge.Adaptive plans up to two hedges, which maxAttempts 2 would cut:
// New says so, naming the setting, rather than failing every call.
func TestAdaptiveWithTwoAttemptsFailsInNew(t *testing.T) {
	_, err := hedgegrpc.New(hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
		"pkg.Svc/Get": {MaxAttempts: 2, Delay: &hedge.Adaptive{}},
	}})
	if !errors.Is(err, hedgegrpc.ErrInvalidConfig) || !errors.Is(err, hedge.ErrInvalidPolicy) {
		t.Errorf("New = %v, want an ErrInvalidConfig that wraps hedge.ErrInvalidPolicy", err)
	}
}
