package hedgeotel_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
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

// The descriptions the Observer gives its instruments, as a test expects
// to read them back.
const (
	descDuration = "How long hedged calls took until they were decided (the answer taken, " +
		"the deadline passed or the caller gave up), every attempt included."
	descHedges = "Attempts after the primary in each call that started one, hedges and " +
		"retries after retryable results alike: a call without one is not recorded, as in gRFC A96."
	descFired = "How long after the attempt before it each hedge started: the delay it fired at. " +
		"Retries, started at once when the attempt before them ended retryable, are not recorded."
	descAttempt = "How long the attempts of hedged calls that returned an accepted answer ran: " +
		"the winner until its answer, each loser until the call was decided and cancelled it."
	descAttempts = "Attempts started, primaries included: over the calls, the load hedging multiplies the upstream's by."
	descHedged   = "Calls that started more than one attempt."
	descRetries  = "Attempts after the primary started at once because an attempt before them ended retryable: retries, not hedges."
	descTied     = "Attempts cancelled while they still waited in a server's queue, because a sibling reported its start (hedge.Started): they did no work."
	descWins     = "Calls that returned an accepted answer, by the attempt that gave it (hedge.winner, 0 for the primary)."
	descRefusals = "Attempts after the primary that the budget refused."
	descSkips    = "Attempts after the primary not started because too little of the deadline was left for them to help."
	descPanics   = "Calls in which an attempt or a hook panicked or called runtime.Goexit, re-raised in the caller."
	descOpens    = "Times a hedge.Breaker opened and stopped a key's hedges."
	descDelay    = "The delay a learned delay source hedges at now; no point while it sends no hedge."
	descCeiling  = "The most a learned delay source may hedge at (its Ceiling): hedge.delay at it is pinned."
)

// histogram is an explicit-bucket histogram metric of cumulative points.
func histogram[N int64 | float64](name, unit, desc string, points ...metricdata.HistogramDataPoint[N]) metricdata.Metrics {
	return metricdata.Metrics{Name: name, Unit: unit, Description: desc, Data: metricdata.Histogram[N]{
		Temporality: metricdata.CumulativeTemporality, DataPoints: points,
	}}
}

// perKey is one point of a counter for each key, in the order of keys:
// "" for the calls without one.
func perKey(keys []string, values ...int64) []metricdata.DataPoint[int64] {
	var points []metricdata.DataPoint[int64]
	for i, k := range keys {
		set := attrs()
		if k != "" {
			set = attrs("hedge.key", k)
		}
		points = append(points, sum(set, values[i]))
	}
	return points
}

var hedgeBounds = []float64{1, 2, 3, 4, 5}

// The Observer records each call of a scripted run, in virtual time, as
// exact durations, attempts, hedges, the delays they fired at, how long
// the winner and the losers ran, wins by attempt, budget refusals and
// deadline skips, under the call's key and outcome; every counter of a
// key is there, at 0 where it counted nothing.
func TestObserverRecordsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, obs := newReader(t, hedgeotel.WithKey(routeOf))
		p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), MaxAttempts: 3, Observer: obs}
		refusing := p
		full := &hedge.InflightLimit{Max: 1}
		full.Allow(t.Context(), 1) // its one permit taken: it refuses every hedge
		refusing.Budget = full
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
		keys := []string{"a", "b", "", "c"}
		want := []metricdata.Metrics{
			histogram("hedge.call.duration", "s", descDuration,
				hist(attrs("hedge.key", "a", "hedge.outcome", "accept"), latency, 0.004, 0.015, 0.007),
				hist(attrs("hedge.key", "b", "hedge.outcome", "terminal"), latency, 0.002),
				hist(attrs("hedge.key", "b", "hedge.outcome", "accept"), latency, 0.030, 0.011),
				hist(attrs("hedge.outcome", "accept"), latency, 0.001),
				hist(attrs("hedge.key", "c", "hedge.outcome", "canceled"), latency, 0.015)),
			histogram("hedge.call.hedges", "{hedge}", descHedges,
				hist[int64](attrs("hedge.key", "a"), hedgeBounds, 1, 1),
				hist[int64](attrs("hedge.key", "c"), hedgeBounds, 1)),
			// The retry at 3ms fired at no delay: it is a retry, not a hedge.
			histogram("hedge.attempt.delay", "s", descFired,
				hist(attrs("hedge.key", "a"), latency, 0.010),
				hist(attrs("hedge.key", "c"), latency, 0.010)),
			// The winners ran 5ms and 4ms; the loser, the primary the
			// hedge beat, 15ms. The primary that failed at 3ms lost no
			// race, and the call cut off at 15ms had no winner.
			histogram("hedge.attempt.duration", "s", descAttempt,
				hist(attrs("hedge.key", "a", "hedge.role", "winner"), latency, 0.005, 0.004),
				hist(attrs("hedge.key", "a", "hedge.role", "loser"), latency, 0.015)),
			counter("hedge.call.attempts", "{attempt}", descAttempts, perKey(keys, 5, 3, 1, 2)...),
			counter("hedge.call.hedged", "{call}", descHedged, perKey(keys, 2, 0, 0, 1)...),
			counter("hedge.call.retries", "{attempt}", descRetries, perKey(keys, 1, 0, 0, 0)...),
			counter("hedge.call.tied", "{attempt}", descTied, perKey(keys, 0, 0, 0, 0)...),
			counter("hedge.call.wins", "{call}", descWins,
				sum(attrs("hedge.key", "a", "hedge.winner", 0), 1),
				sum(attrs("hedge.key", "a", "hedge.winner", 1), 2),
				sum(attrs("hedge.key", "b", "hedge.winner", 0), 2),
				sum(attrs("hedge.key", "b", "hedge.winner", 1), 0),
				sum(attrs("hedge.winner", 0), 1),
				sum(attrs("hedge.winner", 1), 0),
				sum(attrs("hedge.key", "c", "hedge.winner", 0), 0),
				sum(attrs("hedge.key", "c", "hedge.winner", 1), 0)),
			counter("hedge.call.budget_refusals", "{attempt}", descRefusals, perKey(keys, 0, 1, 0, 0)...),
			counter("hedge.call.deadline_skips", "{attempt}", descSkips, perKey(keys, 0, 1, 0, 0)...),
			counter("hedge.call.panics", "{call}", descPanics, perKey(keys, 0, 0, 0, 0)...),
			counter("hedge.breaker.opens", "{open}", descOpens, perKey(keys, 0, 0, 0, 0)...),
		}
		for _, w := range want {
			metricdatatest.AssertEqual(t, w, got[w.Name], metricdatatest.IgnoreTimestamp())
		}
		if len(got) != len(want) {
			t.Errorf("%d metrics, want %d: %v", len(got), len(want), slices.Sorted(maps.Keys(got)))
		}
	})
}

// An attempt that a sibling's start cancelled while it still waited is
// counted as tied, and the call as hedged: the queued primary did no work.
func TestObserverCountsTies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, obs := newReader(t, hedgeotel.WithKey(routeOf))
		p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Observer: obs}
		v, err := hedge.Do(withRoute(t.Context(), "a"), p, func(ctx context.Context) (int, error) {
			if hedge.Attempt(ctx) == 0 {
				<-ctx.Done() // queued behind other work until the tie cancels it
				return 0, ctx.Err()
			}
			hedge.Started(ctx) // the hedge's server began executing it at once
			time.Sleep(5 * ms)
			return 1, nil
		})
		if v != 1 || err != nil {
			t.Fatalf("Do = %d, %v; want the hedge's 1", v, err)
		}
		got := collect(t, reader)
		for _, want := range []metricdata.Metrics{
			counter("hedge.call.tied", "{attempt}", descTied, sum(attrs("hedge.key", "a"), 1)),
			counter("hedge.call.hedged", "{call}", descHedged, sum(attrs("hedge.key", "a"), 1)),
			counter("hedge.call.retries", "{attempt}", descRetries, sum(attrs("hedge.key", "a"), 0)),
		} {
			metricdatatest.AssertEqual(t, want, got[want.Name], metricdatatest.IgnoreTimestamp())
		}
	})
}

// Every counter of a key exists from the key's first call, at 0 where it
// counted nothing, and a winner's series from the first call that
// started that many attempts: a rate over them sees their first
// increase, such as a breaker's first opening.
func TestCountersStartAtZero(t *testing.T) {
	reader, obs := newReader(t, hedgeotel.WithKey(routeOf))
	obs.Observe(withRoute(t.Context(), "a"), hedge.Report{Attempts: 1, Winner: 0, Elapsed: ms})
	got := collect(t, reader)
	for _, name := range []string{"hedge.call.attempts", "hedge.call.hedged", "hedge.call.retries", "hedge.call.tied", "hedge.call.budget_refusals",
		"hedge.call.deadline_skips", "hedge.call.panics", "hedge.breaker.opens", "hedge.call.wins"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s after the first call of a key", name)
		}
	}
	want := counter("hedge.breaker.opens", "{open}", descOpens, sum(attrs("hedge.key", "a"), 0))
	metricdatatest.AssertEqual(t, want, got[want.Name], metricdatatest.IgnoreTimestamp())
	want = counter("hedge.call.wins", "{call}", descWins,
		sum(attrs("hedge.key", "a", "hedge.winner", 0), 1), sum(attrs("hedge.key", "a", "hedge.winner", 1), 0))
	metricdatatest.AssertEqual(t, want, got[want.Name], metricdatatest.IgnoreTimestamp())

	// A call of four attempts brings the winners 2 and 3 in.
	obs.Observe(withRoute(t.Context(), "a"), hedge.Report{Attempts: 4, Winner: 1, Started: [10]time.Duration{0, ms, 2 * ms, 3 * ms}, Elapsed: 4 * ms})
	want = counter("hedge.call.wins", "{call}", descWins,
		sum(attrs("hedge.key", "a", "hedge.winner", 0), 1), sum(attrs("hedge.key", "a", "hedge.winner", 1), 1),
		sum(attrs("hedge.key", "a", "hedge.winner", 2), 0), sum(attrs("hedge.key", "a", "hedge.winner", 3), 0))
	metricdatatest.AssertEqual(t, want, collect(t, reader)[want.Name], metricdatatest.IgnoreTimestamp())
}

// A call whose result the classifier says Failed is recorded as
// hedge.outcome="failed", not as terminal: an alert on terminal errors
// must not fire on ordinary failures.
func TestFailedOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, obs := newReader(t)
		down := errors.New("down")
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Observer: obs,
			Classify: func(_ int, err error) hedge.Outcome {
				if err != nil {
					return hedge.Failed
				}
				return hedge.Accept
			}}
		if _, err := hedge.Do(t.Context(), p, script(step{after: 2 * ms, err: down})); !errors.Is(err, down) {
			t.Fatalf("Do: %v, want %v", err, down)
		}
		want := histogram("hedge.call.duration", "s", descDuration,
			hist(attrs("hedge.outcome", "failed"), latency, 0.002))
		metricdatatest.AssertEqual(t, want, collect(t, reader)[want.Name], metricdatatest.IgnoreTimestamp())
	})
}

// A call in which an attempt panicked is counted in hedge.call.panics.
func TestPanicsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, obs := newReader(t)
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Observer: obs}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Do did not re-raise the panic")
				}
			}()
			hedge.Do(t.Context(), p, func(context.Context) (int, error) { panic("boom") })
		}()
		hedge.Do(t.Context(), p, script(step{after: ms}))
		want := counter("hedge.call.panics", "{call}", descPanics, sum(attrs(), 1))
		metricdatatest.AssertEqual(t, want, collect(t, reader)[want.Name], metricdatatest.IgnoreTimestamp())
	})
}

// Past MaxKeys distinct keys, calls are recorded under OverflowKey, which
// no route can be named: a key "other" is a key like any other.
func TestKeysAreBounded(t *testing.T) {
	reader, obs := newReader(t, hedgeotel.WithKey(routeOf), hedgeotel.WithMaxKeys(2))
	for _, route := range []string{"a", "b", "c", "a", "other"} {
		obs.Observe(withRoute(t.Context(), route), hedge.Report{Attempts: 1, Winner: 0})
	}
	want := counter("hedge.call.wins", "{call}", descWins,
		sum(attrs("hedge.key", "a", "hedge.winner", 0), 2),
		sum(attrs("hedge.key", "a", "hedge.winner", 1), 0),
		sum(attrs("hedge.key", "b", "hedge.winner", 0), 1),
		sum(attrs("hedge.key", "b", "hedge.winner", 1), 0),
		sum(attrs("hedge.key", hedgeotel.OverflowKey, "hedge.winner", 0), 2),
		sum(attrs("hedge.key", hedgeotel.OverflowKey, "hedge.winner", 1), 0))
	metricdatatest.AssertEqual(t, want, collect(t, reader)["hedge.call.wins"], metricdatatest.IgnoreTimestamp())
}

// Attributes of WithAttributes go on every measurement.
func TestWithAttributes(t *testing.T) {
	reader, obs := newReader(t, hedgeotel.WithAttributes(attribute.String("hedge.policy", "profiles")))
	obs.Observe(t.Context(), hedge.Report{Attempts: 2, Winner: 1})
	want := counter("hedge.call.hedged", "{call}", descHedged, sum(attrs("hedge.policy", "profiles"), 1))
	metricdatatest.AssertEqual(t, want, collect(t, reader)[want.Name], metricdatatest.IgnoreTimestamp())
}

// never is a delay source that sends no hedge, as a hedge.Planner does
// while it plans none.
type never struct{}

func (never) Current() time.Duration { return -1 }

// The gauge hedge.delay reports what each watched delay source hedges at
// now, and hedge.delay.ceiling the most it may: a Percentile, a Planner,
// and each key of a Keyed, its overflow delay under OverflowKey; a key
// whose delay cannot say is left out, and so is the delay of a source
// that sends no hedge.
func TestDelayGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		warm := &hedge.Percentile{Initial: 250 * ms}
		planner := &hedge.Planner{Load: 0.1}
		keyed := &hedge.Keyed{Key: routeOf, MaxKeys: 2, New: func(route string) hedge.Delay {
			if route == "fixed" {
				return hedge.Fixed(time.Second)
			}
			return &hedge.Percentile{Initial: 40 * ms, Ceiling: 2 * time.Second}
		}}
		reader, _ := newReader(t,
			hedgeotel.WithDelay("warm", warm),
			hedgeotel.WithDelay("planned", planner),
			hedgeotel.WithDelay("never", never{}),
			hedgeotel.WithDelays(keyed))
		p := hedge.Policy[int]{Delay: keyed}
		for _, route := range []string{"users", "fixed", "export", "search"} {
			if _, err := hedge.Do(withRoute(t.Context(), route), p, script(step{})); err != nil {
				t.Fatal(err)
			}
		}
		// Teach the planner a latency of 20ms, every time: a hedge could
		// not help, and it plans none.
		for range 1000 {
			planner.Learn(t.Context(), 20*ms, true)
		}
		if plan := planner.Replan(); plan.Delay >= 0 {
			t.Fatalf("the planner hedges at %v", plan.Delay)
		}

		got := collect(t, reader)
		want := metricdata.Metrics{Name: "hedge.delay", Unit: "s", Description: descDelay,
			Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
				{Attributes: attrs("hedge.key", "warm"), Value: 0.25},
				{Attributes: attrs("hedge.key", "users"), Value: 0.04},
				{Attributes: attrs("hedge.key", hedgeotel.OverflowKey), Value: 0.04}, // export and search
			}}}
		metricdatatest.AssertEqual(t, want, got[want.Name], metricdatatest.IgnoreTimestamp())
		want = metricdata.Metrics{Name: "hedge.delay.ceiling", Unit: "s", Description: descCeiling,
			Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{
				{Attributes: attrs("hedge.key", "warm"), Value: 10},
				{Attributes: attrs("hedge.key", "planned"), Value: 10},
				{Attributes: attrs("hedge.key", "users"), Value: 2},
				{Attributes: attrs("hedge.key", hedgeotel.OverflowKey), Value: 2},
			}}}
		metricdatatest.AssertEqual(t, want, got[want.Name], metricdatatest.IgnoreTimestamp())
	})
}

// BreakerOpened, a Breaker's OnOpen, counts each time a key's breaker
// opens.
func TestBreakerOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, obs := newReader(t, hedgeotel.WithKey(routeOf))
		breaker := &hedge.Breaker{Key: routeOf, Samples: 2, OnOpen: obs.BreakerOpened}
		p := hedge.Policy[int]{Budget: breaker, Delay: hedge.Fixed(time.Hour)}
		failing := script(step{after: ms, err: hedge.Permanent(errors.New("down"))})
		for _, route := range []string{"a", "a", "b"} {
			hedge.Do(withRoute(t.Context(), route), p, failing)
		}
		want := counter("hedge.breaker.opens", "{open}", descOpens, sum(attrs("hedge.key", "a"), 1))
		metricdatatest.AssertEqual(t, want, collect(t, reader)["hedge.breaker.opens"], metricdatatest.IgnoreTimestamp())
	})
}

// Options out of range and nil delay sources, typed nils included, make
// New fail with an error that names them; a nil Option is ignored, and a
// nil Observer records nothing.
func TestBadOptions(t *testing.T) {
	for _, c := range []struct {
		name, says string
		opt        hedgeotel.Option
	}{
		{"negative MaxKeys", "MaxKeys", hedgeotel.WithMaxKeys(-1)},
		{"nil delay", "WithDelay", hedgeotel.WithDelay("x", nil)},
		{"nil *Percentile", "*hedge.Percentile", hedgeotel.WithDelay("x", (*hedge.Percentile)(nil))},
		{"nil *Planner", "*hedge.Planner", hedgeotel.WithDelay("x", (*hedge.Planner)(nil))},
		{"nil Delays", "WithDelays", hedgeotel.WithDelays(nil)},
		{"nil *Keyed", "*hedge.Keyed", hedgeotel.WithDelays((*hedge.Keyed)(nil))},
	} {
		_, err := hedgeotel.New(c.opt)
		if !errors.Is(err, hedgeotel.ErrInvalidOption) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: New returned %v, want ErrInvalidOption naming %s", c.name, err, c.says)
		}
	}
	reader, obs := newReader(t, nil)
	obs.Observe(t.Context(), hedge.Report{Attempts: 1})
	if got := collect(t, reader); len(got) == 0 {
		t.Error("an Observer made with a nil Option records nothing")
	}
	var nilObs *hedgeotel.Observer
	nilObs.Observe(t.Context(), hedge.Report{Attempts: 1})
	nilObs.BreakerOpened("a")
	(&hedgeotel.Observer{}).Observe(t.Context(), hedge.Report{Attempts: 1})
}

// The meter's scope carries a version: the module's, or "(devel)" when
// it is built from its directory, as its own tests are.
func TestScopeVersion(t *testing.T) {
	reader, obs := newReader(t)
	obs.Observe(t.Context(), hedge.Report{Attempts: 1})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Version != "(devel)" {
			t.Errorf("scope %s version %q, want (devel)", sm.Scope.Name, sm.Scope.Version)
		}
	}
}

// Observing a call of a key seen before allocates nothing, and a Do with
// the Observer attached allocates no more than a Do without one.
func TestObserveAllocatesNothing(t *testing.T) {
	_, obs := newReader(t, hedgeotel.WithKey(routeOf))
	ctx := withRoute(t.Context(), "users")
	reports := []hedge.Report{
		{Attempts: 1, Winner: 0, Elapsed: 3 * ms},
		{Attempts: 3, Winner: 2, BudgetRefusals: 1, DeadlineSkips: 1, Elapsed: 30 * ms,
			Started: [hedge.MaxAttemptsLimit]time.Duration{0, 10 * ms, 20 * ms}},
		{Attempts: 2, Winner: -1, Outcome: hedge.Canceled, Elapsed: time.Second, Panicked: true},
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
