package hedge_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// within reports whether got is within rel of want.
func within(got, want time.Duration, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*float64(want)
}

// uniform returns n latencies spread evenly over [lo, hi): their exact
// quantiles are known.
func uniform(n int, lo, hi time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = lo + time.Duration(int64(hi-lo)*int64(i)/int64(n))
	}
	rand.New(rand.NewPCG(5, 6)).Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func TestPercentileLearnsTheQuantile(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Percentile{Quantile: 0.9}
	if got := p.Next(ctx, 0); got != 10*time.Second {
		t.Errorf("before any sample: %v, want the 10s ceiling", got)
	}
	for _, d := range uniform(1000, 10*ms, 110*ms) {
		p.Learn(ctx, d, true)
	}
	if got := p.Next(ctx, 0); !within(got, 100*ms, 0.02) {
		t.Errorf("p90 of uniform 10–110ms: %v, want 100ms ± 2%%", got)
	}
	if p.Next(ctx, 0) != p.Next(ctx, 3) {
		t.Error("the delay differs between attempts")
	}
}

func TestPercentileWarmsUp(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Percentile{Initial: 70 * ms} // p95: 200 samples to warm up
	for i, d := range uniform(200, 10*ms, 20*ms) {
		if got := p.Next(ctx, 0); got != 70*ms {
			t.Fatalf("after %d samples: %v, want the initial 70ms", i, got)
		}
		p.Learn(ctx, d, true)
	}
	if got := p.Next(ctx, 0); !within(got, 19500*time.Microsecond, 0.02) {
		t.Errorf("after warm-up: %v, want the p95, 19.5ms", got)
	}
}

func TestPercentileClamps(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Percentile{Floor: 5 * ms, Ceiling: 50 * ms}
	for _, d := range uniform(500, time.Microsecond*100, time.Microsecond*200) {
		p.Learn(ctx, d, true)
	}
	if got := p.Next(ctx, 0); got != 5*ms {
		t.Errorf("fast upstream: %v, want the 5ms floor", got)
	}
	for _, d := range uniform(3000, time.Second, 2*time.Second) {
		p.Learn(ctx, d, true)
	}
	if got := p.Next(ctx, 0); got != 50*ms {
		t.Errorf("slow upstream: %v, want the 50ms ceiling", got)
	}
}

// After every latency triples, the delay follows within two Windows.
func TestPercentileFollowsAShift(t *testing.T) {
	ctx := context.Background()
	const window = 500
	p := &hedge.Percentile{Window: window}
	for _, d := range uniform(2*window, 20*ms, 40*ms) {
		p.Learn(ctx, d, true)
	}
	if got := p.Next(ctx, 0); !within(got, 39*ms, 0.02) {
		t.Fatalf("before the shift: %v, want 39ms", got)
	}
	for i, d := range uniform(2*window, 60*ms, 120*ms) {
		p.Learn(ctx, d, true)
		if i == window-1 && p.Next(ctx, 0) < 40*ms {
			t.Errorf("one window after the shift: %v, still at the old delay", p.Next(ctx, 0))
		}
	}
	if got := p.Next(ctx, 0); !within(got, 117*ms, 0.02) {
		t.Errorf("two windows after the shift: %v, want 117ms ± 2%%", got)
	}
}

// A lower bound under the current delay says nothing about the quantile:
// the call was cut off before the delay. It is dropped.
func TestPercentileCensoring(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Percentile{Quantile: 0.5}
	for _, d := range uniform(1000, 10*ms, 30*ms) {
		p.Learn(ctx, d, true)
	}
	before := p.Next(ctx, 0)
	for range 1000 {
		p.Learn(ctx, time.Millisecond, false)
	}
	if got := p.Next(ctx, 0); got != before {
		t.Errorf("cut-off calls moved the delay from %v to %v", before, got)
	}
}

func TestPercentileBadInput(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    *hedge.Percentile
	}{
		{"quantile 1", &hedge.Percentile{Quantile: 1}},
		{"negative quantile", &hedge.Percentile{Quantile: -0.5}},
		{"NaN quantile", &hedge.Percentile{Quantile: math.NaN()}},
		{"negative window", &hedge.Percentile{Window: -1}},
		{"negative floor", &hedge.Percentile{Floor: -ms}},
		{"floor above ceiling", &hedge.Percentile{Floor: time.Second, Ceiling: ms}},
		{"keyed, bad delay", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var d hedge.Delay = tt.p
			if tt.p == nil {
				d = &hedge.Keyed{New: func(string) hedge.Delay { return &hedge.Percentile{Quantile: 2} }}
			}
			called := false
			_, err := hedge.Do(context.Background(), hedge.Policy[int]{Delay: d}, func(context.Context) (int, error) {
				called = true
				return 0, nil
			})
			if !errors.Is(err, hedge.ErrInvalidPolicy) || called {
				t.Errorf("Do = %v (fn called: %v), want ErrInvalidPolicy and no call", err, called)
			}
		})
	}
}

func TestPercentileConcurrentLearn(t *testing.T) {
	ctx := context.Background()
	p := &hedge.Percentile{Window: 200}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for _, d := range uniform(2000, 10*ms, 20*ms) {
				p.Learn(ctx, d+time.Duration(g), true)
				p.Next(ctx, 0)
			}
		})
	}
	wg.Wait()
	if got := p.Next(ctx, 0); !within(got, 19500*time.Microsecond, 0.03) {
		t.Errorf("after concurrent learning: %v, want about 19.5ms", got)
	}
}

// amplification runs calls sequentially in virtual time and returns the
// attempts per call over the last steady of them.
func amplification(t *testing.T, d hedge.Delay, calls, steady int) float64 {
	var amp float64
	synctest.Test(t, func(t *testing.T) {
		var warm, all hedge.Stats
		p := hedge.Policy[int]{Delay: d, Observer: &all}
		for i := range calls {
			if i == calls-steady {
				warm = hedge.Stats{}
				p.Observer = &warm
			}
			if _, err := hedge.Do(t.Context(), p, fastSlowCall(i, 1)); err != nil {
				t.Fatal(err)
			}
		}
		amp = warm.Snapshot().Amplification()
	})
	return amp
}

// On the 90/10 upstream at quantile 0.85 the delay sits in the fast mode
// and hedges fire for the 15 % of calls above it: amplification 1.15.
func TestPercentileIsUnbiasedUnderHedging(t *testing.T) {
	if amp := amplification(t, &hedge.Percentile{Quantile: 0.85}, 4000, 3000); math.Abs(amp-1.15) > 0.03 {
		t.Errorf("amplification %.3f in steady state, want 1.15 ± 0.03", amp)
	}
}

// completesOnly is the mistake Percentile avoids: it learns only from
// primaries that answered, so every hedge that wins hides a slow primary.
type completesOnly struct{ *hedge.Percentile }

func (c completesOnly) Learn(ctx context.Context, d time.Duration, complete bool) {
	if complete {
		c.Percentile.Learn(ctx, d, true)
	}
}

func TestDroppingLosersMakesHedgingFeedItself(t *testing.T) {
	amp := amplification(t, completesOnly{&hedge.Percentile{Quantile: 0.85}}, 4000, 3000)
	if amp < 1.2 {
		t.Errorf("amplification %.3f: dropping losers should push it well past 1.15", amp)
	}
	t.Logf("learning only from answered primaries: amplification %.3f", amp)
}
