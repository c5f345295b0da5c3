package hedge_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// A learned delay's current answer can be read without calling Next, per
// key of a Keyed, as a metrics adapter reads it.
func TestCurrentDelays(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Percentile{Quantile: 0.5, Window: 100, Ceiling: time.Second}
	if got := p.Current(); got != time.Second {
		t.Errorf("warming up: Current = %v, want the Ceiling", got)
	}
	for range 100 {
		p.Learn(ctx, 20*ms, true)
	}
	if got, next := p.Current(), p.Next(ctx, 0); got != next || got > 21*ms || got < 19*ms {
		t.Errorf("Current = %v, Next = %v; want both about 20ms", got, next)
	}
	if got := (&hedge.Percentile{Quantile: 2}).Current(); got != -1 {
		t.Errorf("invalid Percentile: Current = %v, want -1", got)
	}
	if got := (&hedge.Planner{Initial: 30 * ms}).Current(); got != 30*ms {
		t.Errorf("Planner before its first plan: Current = %v, want Initial", got)
	}

	k := &hedge.Keyed{Key: route, MaxKeys: 2, New: func(key string) hedge.Delay {
		return &hedge.Percentile{Initial: time.Duration(len(key)) * ms}
	}}
	for _, r := range []string{"a", "bb", "ccc", "dddd"} {
		k.Next(withRoute(r), 0)
	}
	got := map[string]time.Duration{}
	k.Range(func(key string, d hedge.Delay) bool {
		got[key] = d.(*hedge.Percentile).Current()
		return true
	})
	want := map[string]time.Duration{"a": ms, "bb": 2 * ms, "": overflowInitial}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Range (-want +got):\n%s", diff)
	}
}

// overflowInitial is the Initial of the delay New makes for the overflow
// key "": zero, so its Ceiling.
const overflowInitial = 10 * time.Second

// Checking a policy with a Keyed delay, as hedgegrpc.New does with a bare
// context, adds no key.
func TestKeyedValidationAddsNoKey(t *testing.T) {
	k := &hedge.Keyed{Key: route, New: func(string) hedge.Delay { return &hedge.Percentile{Quantile: 2} }}
	if _, err := hedge.Do(withRoute("checked"), hedge.Policy[int]{Delay: k},
		func(context.Context) (int, error) { return 1, nil }); err == nil {
		t.Fatal("an invalid delay for the key: want an error before the call")
	}
	n := 0
	k.Range(func(string, hedge.Delay) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d keys after a policy check, want 0", n)
	}
}

// Percentile{Quantile: 0.9} warms up after 10/(1-0.9) = 100 samples.
func TestPercentileWarmsUpAt100(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Percentile{Quantile: 0.9}
	for range 99 {
		p.Learn(ctx, 20*ms, true)
	}
	if got := p.Current(); got != 10*time.Second {
		t.Errorf("after 99 samples: %v, want the Ceiling", got)
	}
	p.Learn(ctx, 20*ms, true)
	if got := p.Current(); got == 10*time.Second {
		t.Errorf("after 100 samples: still %v", got)
	}
}
