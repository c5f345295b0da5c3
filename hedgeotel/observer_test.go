package hedgeotel_test

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/goleak"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgeotel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// The key of a call, as a test's Key function reads it from the caller's
// context.
type routeKey struct{}

func withRoute(ctx context.Context, route string) context.Context {
	return context.WithValue(ctx, routeKey{}, route)
}

func routeOf(ctx context.Context) string {
	r, _ := ctx.Value(routeKey{}).(string)
	return r
}

// step is what one attempt does: answer after a latency, with err; an
// attempt without a step hangs until its context ends.
type step struct {
	after time.Duration
	err   error
}

// script is an fn for hedge.Do whose attempts follow steps.
func script(steps ...step) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		k := hedge.Attempt(ctx)
		if k >= len(steps) {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		select {
		case <-time.After(steps[k].after):
			return k, steps[k].err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// newReader returns an SDK MeterProvider's ManualReader and an Observer
// that records into that provider.
func newReader(t *testing.T, opts ...hedgeotel.Option) (*sdkmetric.ManualReader, *hedgeotel.Observer) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	obs, err := hedgeotel.New(append([]hedgeotel.Option{hedgeotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return reader, obs
}

// collect returns the Observer's metrics by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != hedgeotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, hedgeotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	return got
}

// attrs makes an attribute set from key, value pairs; an int value makes
// an int attribute.
func attrs(kv ...any) attribute.Set {
	var list []attribute.KeyValue
	for i := 0; i+1 < len(kv); i += 2 {
		k := attribute.Key(kv[i].(string))
		switch v := kv[i+1].(type) {
		case string:
			list = append(list, k.String(v))
		case int:
			list = append(list, k.Int(v))
		}
	}
	return attribute.NewSet(list...)
}

// hist is the data point an explicit-bucket histogram with bounds holds
// after recording values, in that order.
func hist[N int64 | float64](set attribute.Set, bounds []float64, values ...N) metricdata.HistogramDataPoint[N] {
	dp := metricdata.HistogramDataPoint[N]{Attributes: set, Bounds: bounds, BucketCounts: make([]uint64, len(bounds)+1)}
	for _, v := range values {
		dp.BucketCounts[sort.SearchFloat64s(bounds, float64(v))]++
		dp.Count++
		dp.Sum += v
	}
	dp.Min, dp.Max = metricdata.NewExtrema(slices.Min(values)), metricdata.NewExtrema(slices.Max(values))
	return dp
}

func sum(set attribute.Set, v int64) metricdata.DataPoint[int64] {
	return metricdata.DataPoint[int64]{Attributes: set, Value: v}
}

func counter(name, unit, desc string, points ...metricdata.DataPoint[int64]) metricdata.Metrics {
	return metricdata.Metrics{Name: name, Unit: unit, Description: desc, Data: metricdata.Sum[int64]{
		DataPoints: points, Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
	}}
}

var latency = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}

// The Observer records each call of a scripted run, in virtual time, as
// exact durations, attempts, hedges, wins by attempt, budget refusals and
// deadline skips, under the call's key and outcome.
func TestObserverRecordsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, obs := newReader(t, hedgeotel.WithKey(routeOf))
		p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), MaxAttempts: 3, Observer: obs}
		refusing := p
		refusing.Budget = &hedge.InflightLimit{} // the zero value refuses every hedge
		short := p
		short.Timeout = 12 * ms // at 10ms, less than half the delay is left
		retryable := errors.New("retryable")
		calls := []struct {
			route string
			p     hedge.Policy[int]
			fn    func(context.Context) (int, error)
		}{
			{"a", p, script(step{after: 4 * ms})},                                      // the primary answers: 4ms
			{"a", p, script(step{after: time.Hour}, step{after: 5 * ms})},              // the hedge at 10ms wins: 15ms
			{"a", p, script(step{after: 3 * ms, err: retryable}, step{after: 4 * ms})}, // a retry at 3ms wins: 7ms
			{"b", p, script(step{after: 2 * ms, err: hedge.Permanent(retryable)})},     // terminal: 2ms
			{"b", refusing, script(step{after: 30 * ms})},                              // the budget refuses the hedge: 30ms
			{"b", short, script(step{after: 11 * ms})},                                 // the hedge is skipped: 11ms
			{"", p, script(step{after: 1 * ms})},                                       // no key: 1ms
		}
		for _, c := range calls {
			hedge.Do(withRoute(t.Context(), c.route), c.p, c.fn)
		}
		// The caller gives up at 15ms, with the primary and a hedge out.
		ctx, cancel := context.WithCancel(withRoute(t.Context(), "c"))
		time.AfterFunc(15*ms, cancel)
		if _, err := hedge.Do(ctx, p, script()); !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled call returned %v", err)
		}

		got := collect(t, reader)
		want := []metricdata.Metrics{
			{Name: "hedge.call.duration", Unit: "s",
				Description: "How long hedged calls took, from the start of Do to its return, every attempt included.",
				Data: metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality, DataPoints: []metricdata.HistogramDataPoint[float64]{
					hist(attrs("hedge.key", "a", "hedge.outcome", "accept"), latency, 0.004, 0.015, 0.007),
					hist(attrs("hedge.key", "b", "hedge.outcome", "terminal"), latency, 0.002),
					hist(attrs("hedge.key", "b", "hedge.outcome", "accept"), latency, 0.030, 0.011),
					hist(attrs("hedge.outcome", "accept"), latency, 0.001),
					hist(attrs("hedge.key", "c", "hedge.outcome", "canceled"), latency, 0.015),
				}}},
			counter("hedge.call.attempts", "{attempt}", "Attempts started, primaries included: over the calls, the load hedging multiplies the upstream's by.",
				sum(attrs("hedge.key", "a"), 5), sum(attrs("hedge.key", "b"), 3), sum(attrs(), 1), sum(attrs("hedge.key", "c"), 2)),
			counter("hedge.call.hedges", "{attempt}", "Attempts started after the primary: hedges, and retries after retryable results.",
				sum(attrs("hedge.key", "a"), 2), sum(attrs("hedge.key", "c"), 1)),
			counter("hedge.call.hedged", "{call}", "Calls that started more than one attempt.",
				sum(attrs("hedge.key", "a"), 2), sum(attrs("hedge.key", "c"), 1)),
			counter("hedge.call.wins", "{call}", "Calls that returned an accepted answer, by the attempt that gave it (hedge.winner, 0 for the primary).",
				sum(attrs("hedge.key", "a", "hedge.winner", 0), 1),
				sum(attrs("hedge.key", "a", "hedge.winner", 1), 2),
				sum(attrs("hedge.key", "b", "hedge.winner", 0), 2),
				sum(attrs("hedge.winner", 0), 1)),
			counter("hedge.call.budget_refusals", "{attempt}", "Attempts after the primary that the budget refused.",
				sum(attrs("hedge.key", "b"), 1)),
			counter("hedge.call.deadline_skips", "{attempt}", "Attempts after the primary not started because too little of the deadline was left for them to help.",
				sum(attrs("hedge.key", "b"), 1)),
		}
		for _, w := range want {
			metricdatatest.AssertEqual(t, w, got[w.Name], metricdatatest.IgnoreTimestamp())
		}
		if _, ok := got["hedge.breaker.opens"]; ok {
			t.Error("hedge.breaker.opens has data, with no breaker")
		}
	})
}

// Past MaxKeys distinct keys, calls are recorded under "other".
func TestKeysAreBounded(t *testing.T) {
	reader, obs := newReader(t, hedgeotel.WithKey(routeOf), hedgeotel.WithMaxKeys(2))
	for _, route := range []string{"a", "b", "c", "a", "d"} {
		obs.Observe(withRoute(t.Context(), route), hedge.Report{Attempts: 1, Winner: 0})
	}
	want := counter("hedge.call.wins", "{call}", "Calls that returned an accepted answer, by the attempt that gave it (hedge.winner, 0 for the primary).",
		sum(attrs("hedge.key", "a", "hedge.winner", 0), 2),
		sum(attrs("hedge.key", "b", "hedge.winner", 0), 1),
		sum(attrs("hedge.key", "other", "hedge.winner", 0), 2))
	metricdatatest.AssertEqual(t, want, collect(t, reader)["hedge.call.wins"], metricdatatest.IgnoreTimestamp())
}

// Attributes of WithAttributes go on every measurement.
func TestWithAttributes(t *testing.T) {
	reader, obs := newReader(t, hedgeotel.WithAttributes(attribute.String("hedge.policy", "profiles")))
	obs.Observe(t.Context(), hedge.Report{Attempts: 2, Winner: 1})
	want := counter("hedge.call.hedges", "{attempt}", "Attempts started after the primary: hedges, and retries after retryable results.",
		sum(attrs("hedge.policy", "profiles"), 1))
	metricdatatest.AssertEqual(t, want, collect(t, reader)["hedge.call.hedges"], metricdatatest.IgnoreTimestamp())
}

// The gauge hedge.delay reports what each watched delay source hedges at
// now: a Percentile, a Planner, and each key of a Keyed, its overflow
// delay under "other"; a key whose delay cannot say is left out.
func TestDelayGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		warm := &hedge.Percentile{Initial: 250 * ms}
		planner := &hedge.Planner{Load: 0.1}
		keyed := &hedge.Keyed{Key: routeOf, MaxKeys: 2, New: func(route string) hedge.Delay {
			if route == "fixed" {
				return hedge.Fixed(time.Second)
			}
			return &hedge.Percentile{Initial: 40 * ms}
		}}
		reader, obs := newReader(t,
			hedgeotel.WithDelay("warm", warm),
			hedgeotel.WithDelay("planned", planner),
			hedgeotel.WithKeyed(keyed))
		_ = obs
		p := hedge.Policy[int]{Delay: keyed}
		for _, route := range []string{"users", "fixed", "export", "search"} {
			if _, err := hedge.Do(withRoute(t.Context(), route), p, script(step{})); err != nil {
				t.Fatal(err)
			}
		}
		// Teach the planner a latency of 20ms, then have it plan.
		for range 1000 {
			planner.Learn(t.Context(), 20*ms, true)
		}
		plan := planner.Replan()

		want := metricdata.Metrics{Name: "hedge.delay", Unit: "s",
			Description: "The delay a learned delay source hedges at now; -1 when it sends no hedge.",
			Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
				{Attributes: attrs("hedge.key", "warm"), Value: 0.25},
				{Attributes: attrs("hedge.key", "planned"), Value: seconds(plan.Delay)},
				{Attributes: attrs("hedge.key", "users"), Value: 0.04},
				{Attributes: attrs("hedge.key", "other"), Value: 0.04}, // export and search
			}}}
		metricdatatest.AssertEqual(t, want, collect(t, reader)["hedge.delay"], metricdatatest.IgnoreTimestamp())
	})
}

func seconds(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return d.Seconds()
}

// BreakerOpened, a Breaker's OnOpen, counts each time a key's breaker
// opens.
func TestBreakerOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, obs := newReader(t, hedgeotel.WithKey(routeOf))
		breaker, err := hedge.NewBreaker(hedge.BreakerConfig{Key: routeOf, Samples: 2, OnOpen: obs.BreakerOpened})
		if err != nil {
			t.Fatal(err)
		}
		p := hedge.Policy[int]{Budget: breaker, Delay: hedge.Fixed(time.Hour)}
		failing := script(step{after: ms, err: hedge.Permanent(errors.New("down"))})
		for _, route := range []string{"a", "a", "b"} {
			hedge.Do(withRoute(t.Context(), route), p, failing)
		}
		want := counter("hedge.breaker.opens", "{open}", "Times a hedge.Breaker opened and stopped a key's hedges.",
			sum(attrs("hedge.key", "a"), 1))
		metricdatatest.AssertEqual(t, want, collect(t, reader)["hedge.breaker.opens"], metricdatatest.IgnoreTimestamp())
	})
}

// Options out of range make New fail; a nil Observer records nothing.
func TestBadOptions(t *testing.T) {
	for name, opt := range map[string]hedgeotel.Option{
		"negative MaxKeys": hedgeotel.WithMaxKeys(-1),
		"nil delay":        hedgeotel.WithDelay("x", nil),
		"nil Keyed":        hedgeotel.WithKeyed(nil),
	} {
		if _, err := hedgeotel.New(opt); !errors.Is(err, hedgeotel.ErrInvalidOption) {
			t.Errorf("%s: New returned %v, want ErrInvalidOption", name, err)
		}
	}
	var nilObs *hedgeotel.Observer
	nilObs.Observe(t.Context(), hedge.Report{Attempts: 1})
	nilObs.BreakerOpened("a")
	(&hedgeotel.Observer{}).Observe(t.Context(), hedge.Report{Attempts: 1})
}

// Observing a call of a key seen before allocates nothing, and a Do with
// the Observer attached allocates no more than a Do without one.
func TestObserveAllocatesNothing(t *testing.T) {
	_, obs := newReader(t, hedgeotel.WithKey(routeOf))
	ctx := withRoute(t.Context(), "users")
	reports := []hedge.Report{
		{Attempts: 1, Winner: 0, Elapsed: 3 * ms},
		{Attempts: 3, Winner: 2, BudgetRefusals: 1, DeadlineSkips: 1, Elapsed: 30 * ms},
		{Attempts: 2, Winner: -1, Outcome: hedge.Canceled, Elapsed: time.Second},
	}
	for _, r := range reports {
		obs.Observe(ctx, r) // the key's first call makes its attribute sets
		if n := testing.AllocsPerRun(1000, func() { obs.Observe(ctx, r) }); n != 0 {
			t.Errorf("Observe(%+v): %v allocations, want 0", r, n)
		}
	}

	bg := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	bare := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
	observed := bare
	observed.Observer = obs
	hedge.Do(bg, observed, fn)
	nBare := testing.AllocsPerRun(1000, func() { hedge.Do(bg, bare, fn) })
	nObserved := testing.AllocsPerRun(1000, func() { hedge.Do(bg, observed, fn) })
	if nObserved > nBare {
		t.Errorf("Do: %v allocations with the Observer, %v without", nObserved, nBare)
	}
}
