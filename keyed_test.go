package hedge_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

type routeKey struct{}

func withRoute(route string) context.Context {
	return context.WithValue(context.Background(), routeKey{}, route)
}

func route(ctx context.Context) string { s, _ := ctx.Value(routeKey{}).(string); return s }

// A slow export does not skew a fast lookup's delay on the same policy.
func TestKeyedSeparatesRoutes(t *testing.T) {
	k := &hedge.Keyed{Key: route}
	lookup, export := withRoute("GET /users/{id}"), withRoute("GET /export")
	for i, d := range uniform(1000, 10*ms, 20*ms) {
		k.Learn(lookup, d, true)
		k.Learn(export, 100*d, true)
		_ = i
	}
	if got := k.Next(lookup, 0); !within(got, 19500*time.Microsecond, 0.02) {
		t.Errorf("lookup delay %v, want its own p95, 19.5ms", got)
	}
	if got := k.Next(export, 0); !within(got, 1950*ms, 0.02) {
		t.Errorf("export delay %v, want its own p95, 1.95s", got)
	}
}

func TestKeyedBoundsMemory(t *testing.T) {
	made := 0
	k := &hedge.Keyed{Key: route, MaxKeys: 2, New: func(string) hedge.Delay {
		made++
		return hedge.Fixed(time.Duration(made) * ms)
	}}
	got := map[string]time.Duration{}
	for _, r := range []string{"a", "b", "c", "d", "a", "b", "c"} {
		got[r] = k.Next(withRoute(r), 0)
	}
	if got["a"] == got["b"] || got["c"] != got["d"] || got["c"] == got["a"] || got["c"] == got["b"] {
		t.Errorf("delays %v: want a and b their own, c and d the shared overflow", got)
	}
	if made != 3 {
		t.Errorf("made %d delays for MaxKeys 2, want 3 (two keys and the overflow)", made)
	}
}

func TestKeyedZeroValueLearnsThroughDo(t *testing.T) {
	// In a bubble an instant call takes exactly no time, however loaded
	// the machine.
	synctest.Test(t, func(t *testing.T) {
		k := &hedge.Keyed{}
		p := hedge.Policy[int]{Delay: k, MaxAttempts: 1}
		for range 300 {
			hedge.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		}
		if got := k.Next(t.Context(), 0); got != time.Millisecond {
			t.Errorf("after 300 instant calls: %v, want the 1ms floor", got)
		}
	})
}
