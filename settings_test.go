package hedge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// A learned delay's Initial is clamped to [Floor, Ceiling], as the
// delay it learns is.
func TestInitialIsClamped(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		d    hedge.Delay
		want time.Duration
	}{
		{"Percentile above its Ceiling", &hedge.Percentile{Ceiling: time.Second, Initial: time.Minute}, time.Second},
		{"Percentile below its Floor", &hedge.Percentile{Floor: 5 * ms, Initial: ms}, 5 * ms},
		{"Planner above its Ceiling", &hedge.Planner{Ceiling: time.Second, Initial: time.Minute}, time.Second},
		{"Planner below its Floor", &hedge.Planner{Floor: 5 * ms, Initial: ms}, 5 * ms},
	}
	for _, tt := range tests {
		if got := tt.d.Next(ctx, 0); got != tt.want {
			t.Errorf("%s: Next = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A Keyed whose New makes an invalid delay for one key fails the calls of
// that key with ErrInvalidPolicy instead of silently not hedging them;
// other keys run.
func TestKeyedRejectsAnInvalidDelayForAKey(t *testing.T) {
	k := &hedge.Keyed{Key: route, New: func(key string) hedge.Delay {
		if key == "bad" {
			return &hedge.Percentile{Quantile: 2}
		}
		return &hedge.Percentile{}
	}}
	p := hedge.Policy[int]{Delay: k}
	one := func(context.Context) (int, error) { return 1, nil }
	if _, err := hedge.Do(withRoute("bad"), p, one); !errors.Is(err, hedge.ErrInvalidPolicy) {
		t.Errorf("key with an invalid delay: err = %v, want ErrInvalidPolicy", err)
	}
	if v, err := hedge.Do(withRoute("good"), p, one); v != 1 || err != nil {
		t.Errorf("valid key: Do = %v, %v", v, err)
	}
}

// A Planner plans up to MaxHedges hedges. MaxAttempts 0 follows it; a
// MaxAttempts that would cut its plans is an error; 1 still turns
// hedging off.
func TestPlannerAndMaxAttempts(t *testing.T) {
	if _, err := hedge.Do(context.Background(), hedge.Policy[int]{Delay: &hedge.Planner{}, MaxAttempts: 2},
		func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, hedge.ErrInvalidPolicy) {
		t.Errorf("MaxAttempts 2 with a two-hedge Planner: err = %v, want ErrInvalidPolicy", err)
	}
	synctest.Test(t, func(t *testing.T) {
		// Initial 10ms: the Planner starts with one hedge, then plans.
		// Feed it a 90/10 upstream until it plans two hedges.
		pl := &hedge.Planner{Load: 0.3, Window: 200}
		for i := range 400 {
			d := 20 * ms
			if i%10 == 0 {
				d = 500 * ms
			}
			pl.Learn(context.Background(), d, true)
		}
		if plan := pl.Plan(); plan.Hedges != 2 {
			t.Fatalf("plan %+v, want two hedges for this test", plan)
		}
		for _, tt := range []struct{ max, want int }{{0, 3}, {1, 1}, {3, 3}} {
			var stats hedge.Stats
			hedge.Do(t.Context(), hedge.Policy[int]{Delay: pl, MaxAttempts: tt.max, Timeout: 10 * time.Second, Observer: &stats},
				func(ctx context.Context) (int, error) {
					if hedge.Attempt(ctx) < 2 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return 1, nil
				})
			if got := stats.Snapshot().Attempts; got != int64(tt.want) {
				t.Errorf("MaxAttempts %d: %d attempts, want %d", tt.max, got, tt.want)
			}
		}
	})
}

// A nil ctx is a programming error: Do panics with a message naming it,
// as net/http does, rather than with a nil-pointer dereference.
func TestNilContextPanicsClearly(t *testing.T) {
	defer func() {
		if s, _ := recover().(string); !strings.Contains(s, "nil Context") {
			t.Errorf("recovered %q, want a panic naming the nil Context", s)
		}
	}()
	//lint:ignore SA1012 the nil context is what is under test
	hedge.Do(nil, hedge.Policy[int]{}, func(context.Context) (int, error) { return 1, nil })
}
