package hedgeotel

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tailcut/hedge"
)

// ScopeName is the instrumentation scope of the Observer's meter. Its
// version is this module's, as the binary's build information records it.
const ScopeName = "github.com/tailcut/hedge/hedgeotel"

// latencyBuckets are gRFC A66's bucket boundaries for latencies, in
// seconds: fine below a millisecond, where in-process calls answer, and
// up to 100s.
var latencyBuckets = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001,
	0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05,
	0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}

// hedgeBuckets are gRFC A96's bucket boundaries for grpc.client.call.hedges.
var hedgeBuckets = []float64{1, 2, 3, 4, 5}

// ErrInvalidOption is what New's error wraps when an option is out of
// range.
var ErrInvalidOption = errors.New("hedgeotel: invalid option")

// Observer is a hedge.Observer that records every call's Report as
// OpenTelemetry metrics (the package doc lists them). Make one with New
// and share it: between policies, Transports and gRPC channels, as long
// as their keys do not collide. It is safe for concurrent use.
//
// A call that did not hedge costs one histogram measurement, its
// duration, and a few atomic adds: the counters are observable, read at
// collection. A call that hedged adds a few histogram measurements.
// Observe allocates nothing once a key has been seen; the first call of a
// new key makes its attribute sets. A nil or zero Observer records
// nothing.
type Observer struct {
	key   func(context.Context) string
	keys  *keys
	watch []watched

	duration, fired, attempt                          metric.Float64Histogram
	hedges                                            metric.Int64Histogram
	attempts, hedged, wins, refusals, skips, panicked metric.Int64ObservableCounter
	retries, tied, opens                              metric.Int64ObservableCounter
	delay, ceiling                                    metric.Float64ObservableGauge
}

// Option configures New. A nil Option is ignored.
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	key     func(context.Context) string
	maxKeys int
	attrs   []attribute.KeyValue
	watch   []watched
	err     error
}

// WithMeterProvider sets where the Observer's instruments come from. The
// default is otel.GetMeterProvider(), the global one, as it is when New
// runs (a global set later is delegated to).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithKey sets how a call's key, the hedge.key attribute, is read from
// the context the Observer gets: hedgehttp.Route for a Transport,
// hedgegrpc.Method for a gRPC channel, or a function of your own. It must
// return one of few values (a route, a method, never a URL), be fast and
// be safe for concurrent use. Without it, or when it returns "", calls
// carry no hedge.key. OverflowKey is reserved: calls under it are counted
// with the overflow.
func WithKey(key func(ctx context.Context) string) Option {
	return func(c *config) { c.key = key }
}

// WithMaxKeys bounds how many distinct keys get attribute sets of their
// own; calls of keys past it are recorded under OverflowKey. 0 means 64;
// a negative n makes New fail.
func WithMaxKeys(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.err = fmt.Errorf("%w: negative MaxKeys %d", ErrInvalidOption, n)
		}
		c.maxKeys = n
	}
}

// WithAttributes adds attributes to every measurement, to tell apart
// Observers that share a MeterProvider (hedge.policy="profiles", say).
// They must not use the keys hedge.key, hedge.outcome, hedge.winner or
// hedge.role.
func WithAttributes(kv ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, kv...) }
}

// New returns an Observer that records into the meter ScopeName of its
// MeterProvider. It fails with an error wrapping ErrInvalidOption for an
// option out of range or a nil delay source, or with the MeterProvider's
// error if an instrument cannot be made.
func New(opts ...Option) (*Observer, error) {
	c := config{}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	for _, w := range c.watch {
		if w.err != nil {
			return nil, w.err
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.maxKeys == 0 {
		c.maxKeys = 64
	}
	m := c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(version()))
	o := &Observer{key: c.key, keys: newKeys(c.maxKeys, c.attrs), watch: c.watch}
	if err := o.instruments(m); err != nil {
		return nil, err
	}
	return o, nil
}

// instruments makes the Observer's instruments in m and registers the
// callback that reports the counters and the delays.
func (o *Observer) instruments(m metric.Meter) error {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		inst, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return inst
	}
	histogram := func(name, unit, desc string, bounds []float64) metric.Float64Histogram {
		inst, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return inst
	}
	gauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		inst, err := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return inst
	}
	var err error
	o.duration = histogram("hedge.call.duration", "s", descDuration, latencyBuckets)
	o.hedges, err = m.Int64Histogram("hedge.call.hedges", metric.WithUnit("{hedge}"),
		metric.WithDescription(descHedges), metric.WithExplicitBucketBoundaries(hedgeBuckets...))
	errs = append(errs, err)
	o.fired = histogram("hedge.attempt.delay", "s", descFired, latencyBuckets)
	o.attempt = histogram("hedge.attempt.duration", "s", descAttempt, latencyBuckets)
	o.attempts = counter("hedge.call.attempts", "{attempt}", descAttempts)
	o.hedged = counter("hedge.call.hedged", "{call}", descHedged)
	o.retries = counter("hedge.call.retries", "{attempt}", descRetries)
	o.tied = counter("hedge.call.tied", "{attempt}", descTied)
	o.wins = counter("hedge.call.wins", "{call}", descWins)
	o.refusals = counter("hedge.call.budget_refusals", "{attempt}", descRefusals)
	o.skips = counter("hedge.call.deadline_skips", "{attempt}", descSkips)
	o.panicked = counter("hedge.call.panics", "{call}", descPanics)
	o.opens = counter("hedge.breaker.opens", "{open}", descOpens)
	observables := []metric.Observable{o.attempts, o.hedged, o.retries, o.tied, o.wins, o.refusals, o.skips, o.panicked, o.opens}
	if len(o.watch) > 0 {
		o.delay = gauge("hedge.delay", "s", descDelay)
		o.ceiling = gauge("hedge.delay.ceiling", "s", descCeiling)
		observables = append(observables, o.delay, o.ceiling)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err = m.RegisterCallback(o.collect, observables...)
	return err
}

// Observe records r under the key of ctx. It implements hedge.Observer.
func (o *Observer) Observe(ctx context.Context, r hedge.Report) {
	if o == nil || o.keys == nil {
		return
	}
	k := o.keyOf(ctx)
	o.duration.Record(ctx, r.Elapsed.Seconds(), k.calls[outcomeIndex(r.Outcome)]...)
	k.attempts.Add(int64(r.Attempts))
	if r.Outcome == hedge.Accept && r.Winner >= 0 && r.Winner < len(k.wins) {
		k.wins[r.Winner].Add(1)
	}
	if r.BudgetRefusals > 0 {
		k.refusals.Add(int64(r.BudgetRefusals))
	}
	if r.DeadlineSkips > 0 {
		k.skips.Add(int64(r.DeadlineSkips))
	}
	if r.Panicked {
		k.panics.Add(1)
	}
	if r.Attempts > 1 {
		o.observeHedged(ctx, k, &r)
	}
}

// observeHedged records what only a call that started more than one
// attempt has: its hedges and retries, the delay each hedge fired at, and
// how long the winner and the losers ran.
func (o *Observer) observeHedged(ctx context.Context, k *keyed, r *hedge.Report) {
	n := min(r.Attempts, len(r.Started))
	k.hedged.Add(1)
	if int(k.reach.Load()) < n {
		k.reached(n)
	}
	o.hedges.Record(ctx, int64(r.Attempts-1), k.rec...)
	retries := 0
	for a := 1; a < n; a++ {
		if r.Retry[a] {
			retries++ // started at once for a retryable result: it fired at no delay
			continue
		}
		o.fired.Record(ctx, (r.Started[a] - r.Started[a-1]).Seconds(), k.rec...)
	}
	if retries > 0 {
		k.retries.Add(int64(retries))
	}
	if r.Tied > 0 {
		k.tied.Add(int64(r.Tied))
	}
	if r.Outcome != hedge.Accept || r.Winner < 0 || r.Winner >= n {
		return // no winner: the attempts were cut off, or one failed the call
	}
	for a := range n {
		switch {
		case a == r.Winner:
			o.attempt.Record(ctx, (r.Elapsed - r.Started[a]).Seconds(), k.role[roleWinner]...)
		case a == 0 && r.PrimaryAnswered:
			// It answered before the decision, not accepted: it failed,
			// and lost no race.
		default:
			o.attempt.Record(ctx, (r.Elapsed - r.Started[a]).Seconds(), k.role[roleLoser]...)
		}
	}
}

// collect reports the counters and the watched delays. It runs at
// collection, not on any call's path. Every counter of a key seen is
// reported, at 0 until it counts something: a series that appears only
// at its first increase hides that increase from a rate.
func (o *Observer) collect(ctx context.Context, obs metric.Observer) error {
	o.keys.each(func(k *keyed) {
		for _, c := range []struct {
			inst metric.Int64ObservableCounter
			n    *atomic.Int64
		}{{o.attempts, &k.attempts}, {o.hedged, &k.hedged}, {o.retries, &k.retries}, {o.tied, &k.tied},
			{o.refusals, &k.refusals},
			{o.skips, &k.skips}, {o.panicked, &k.panics}, {o.opens, &k.opens}} {
			obs.ObserveInt64(c.inst, c.n.Load(), k.plain...)
		}
		for w := range min(int(k.reach.Load()), len(k.wins)) {
			obs.ObserveInt64(o.wins, k.wins[w].Load(), k.won[w]...)
		}
	})
	return o.observeDelays(ctx, obs)
}

// BreakerOpened counts one opening of a breaker for key: pass it as
// a hedge.Breaker's OnOpen, whose Key should then be the Observer's.
// The breaker's shared overflow breaker reports one of its keys.
func (o *Observer) BreakerOpened(key string) {
	if o == nil || o.keys == nil {
		return
	}
	o.keys.of(key).opens.Add(1)
}

func (o *Observer) keyOf(ctx context.Context) *keyed {
	if o.key == nil {
		return o.keys.of("")
	}
	return o.keys.of(o.key(ctx))
}

// isNil reports whether v is nil or an interface holding a nil pointer,
// map, slice, func or channel: a value whose methods would dereference
// nothing.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
