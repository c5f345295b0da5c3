package hedgeotel

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tailcut/hedge"
)

// ScopeName is the instrumentation scope of the Observer's meter.
const ScopeName = "github.com/tailcut/hedge/hedgeotel"

// latencyBuckets are gRFC A66's bucket boundaries for latencies, in
// seconds: fine below a millisecond, where in-process calls answer, and
// up to 100s.
var latencyBuckets = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001,
	0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05,
	0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}

// ErrInvalidOption is what New's error wraps when an option is out of
// range.
var ErrInvalidOption = errors.New("hedgeotel: invalid option")

// Observer is a hedge.Observer that records every call's Report as
// OpenTelemetry metrics (the package doc lists them). Make one with New
// and share it: between policies, Transports and gRPC channels, as long
// as their keys do not collide. It is safe for concurrent use.
//
// A call costs one histogram measurement, its duration, and a few atomic
// adds: the counters are observable, read at collection. Observe
// allocates nothing once a key has been seen; the first call of a new key
// makes its attribute sets. A nil or zero Observer records nothing.
type Observer struct {
	key   func(context.Context) string
	keys  *keys
	watch []watched

	duration                                        metric.Float64Histogram
	attempts, hedges, hedged, wins, refusals, skips metric.Int64ObservableCounter
	opens                                           metric.Int64ObservableCounter
	delay                                           metric.Float64ObservableGauge
}

// Option configures New.
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
// carry no hedge.key.
func WithKey(key func(ctx context.Context) string) Option {
	return func(c *config) { c.key = key }
}

// WithMaxKeys bounds how many distinct keys get attribute sets of their
// own; calls of keys past it are recorded under the key "other". 0 means
// 64; a negative n makes New fail.
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
// They must not use the keys hedge.key, hedge.outcome or hedge.winner.
func WithAttributes(kv ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, kv...) }
}

// New returns an Observer that records into the meter ScopeName of its
// MeterProvider. It fails with an error wrapping ErrInvalidOption for an
// option out of range, or with the MeterProvider's error if an
// instrument cannot be made.
func New(opts ...Option) (*Observer, error) {
	c := config{}
	for _, opt := range opts {
		opt(&c)
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
	m := c.mp.Meter(ScopeName)
	o := &Observer{key: c.key, keys: newKeys(c.maxKeys, c.attrs), watch: c.watch}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		inst, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return inst
	}
	var err error
	o.duration, err = m.Float64Histogram("hedge.call.duration", metric.WithUnit("s"),
		metric.WithDescription("How long hedged calls took, from the start of Do to its return, every attempt included."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	errs = append(errs, err)
	o.attempts = counter("hedge.call.attempts", "{attempt}",
		"Attempts started, primaries included: over the calls, the load hedging multiplies the upstream's by.")
	o.hedges = counter("hedge.call.hedges", "{attempt}",
		"Attempts started after the primary: hedges, and retries after retryable results.")
	o.hedged = counter("hedge.call.hedged", "{call}", "Calls that started more than one attempt.")
	o.wins = counter("hedge.call.wins", "{call}",
		"Calls that returned an accepted answer, by the attempt that gave it (hedge.winner, 0 for the primary).")
	o.refusals = counter("hedge.call.budget_refusals", "{attempt}",
		"Attempts after the primary that the budget refused.")
	o.skips = counter("hedge.call.deadline_skips", "{attempt}",
		"Attempts after the primary not started because too little of the deadline was left for them to help.")
	o.opens = counter("hedge.breaker.opens", "{open}", "Times a hedge.Breaker opened and stopped a key's hedges.")
	observables := []metric.Observable{o.attempts, o.hedges, o.hedged, o.wins, o.refusals, o.skips, o.opens}
	if len(o.watch) > 0 {
		o.delay, err = m.Float64ObservableGauge("hedge.delay", metric.WithUnit("s"),
			metric.WithDescription("The delay a learned delay source hedges at now; -1 when it sends no hedge."))
		errs = append(errs, err)
		observables = append(observables, o.delay)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if _, err := m.RegisterCallback(o.collect, observables...); err != nil {
		return nil, err
	}
	return o, nil
}

// Observe records r under the key of ctx. It implements hedge.Observer.
func (o *Observer) Observe(ctx context.Context, r hedge.Report) {
	if o == nil || o.keys == nil {
		return
	}
	k := o.keyOf(ctx)
	o.duration.Record(ctx, r.Elapsed.Seconds(), k.calls[outcomeIndex(r.Outcome)]...)
	k.attempts.Add(int64(r.Attempts))
	if r.Attempts > 1 {
		k.hedges.Add(int64(r.Attempts - 1))
		k.hedged.Add(1)
	}
	if r.Outcome == hedge.Accept && r.Winner >= 0 && r.Winner < len(k.wins) {
		k.wins[r.Winner].Add(1)
	}
	if r.BudgetRefusals > 0 {
		k.refusals.Add(int64(r.BudgetRefusals))
	}
	if r.DeadlineSkips > 0 {
		k.skips.Add(int64(r.DeadlineSkips))
	}
}

// collect reports the counters and the watched delays. It runs at
// collection, not on any call's path. A counter that is still zero is
// left out, as a synchronous counter never added to would be.
func (o *Observer) collect(ctx context.Context, obs metric.Observer) error {
	o.keys.each(func(k *keyed) {
		for _, c := range []struct {
			inst metric.Int64ObservableCounter
			n    *atomic.Int64
		}{{o.attempts, &k.attempts}, {o.hedges, &k.hedges}, {o.hedged, &k.hedged},
			{o.refusals, &k.refusals}, {o.skips, &k.skips}, {o.opens, &k.opens}} {
			if n := c.n.Load(); n > 0 {
				obs.ObserveInt64(c.inst, n, k.plain...)
			}
		}
		for w := range k.wins {
			if n := k.wins[w].Load(); n > 0 {
				obs.ObserveInt64(o.wins, n, k.won[w]...)
			}
		}
	})
	return o.observeDelays(ctx, obs)
}

// BreakerOpened counts one opening of a breaker for key: pass it as a
// hedge.BreakerConfig's OnOpen, whose Key should then be the Observer's.
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

// seconds is d in seconds for the gauge, which reports a negative delay
// (no hedge) as -1.
func seconds(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return d.Seconds()
}
