package hedgeotel

import (
	"context"
	"errors"
	"fmt"
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

// attemptBuckets give every possible count of attempts a bucket of its
// own.
var attemptBuckets = func() []float64 {
	b := make([]float64, hedge.MaxAttemptsLimit)
	for i := range b {
		b[i] = float64(i + 1)
	}
	return b
}()

// ErrInvalidOption is what New's error wraps when an option is out of
// range.
var ErrInvalidOption = errors.New("hedgeotel: invalid option")

// Observer is a hedge.Observer that records every call's Report as
// OpenTelemetry metrics (the package doc lists them). Make one with New
// and share it: between policies, Transports and gRPC channels, as long
// as their keys do not collide. It is safe for concurrent use. Observe
// allocates nothing once a key has been seen; the first call of a new key
// makes its attribute sets. A nil or zero Observer records nothing.
type Observer struct {
	key   func(context.Context) string
	keys  *keys
	watch []watched

	duration   metric.Float64Histogram
	attempts   metric.Int64Histogram
	hedges     metric.Int64Counter
	wins       metric.Int64Counter
	refusals   metric.Int64Counter
	skips      metric.Int64Counter
	opens      metric.Int64Counter
	delayGauge metric.Float64ObservableGauge
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
	var errs [9]error
	o.duration, errs[0] = m.Float64Histogram("hedge.call.duration", metric.WithUnit("s"),
		metric.WithDescription("How long hedged calls took, from the start of Do to its return, every attempt included."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	o.attempts, errs[1] = m.Int64Histogram("hedge.call.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts each call started, the primary included: its mean is the load hedging multiplies the upstream's by."),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	o.hedges, errs[2] = m.Int64Counter("hedge.call.hedges", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts started after the primary: hedges, and retries after retryable results."))
	o.wins, errs[3] = m.Int64Counter("hedge.call.wins", metric.WithUnit("{call}"),
		metric.WithDescription("Calls that returned an accepted answer, by the attempt that gave it (hedge.winner, 0 for the primary)."))
	o.refusals, errs[4] = m.Int64Counter("hedge.call.budget_refusals", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts after the primary that the budget refused."))
	o.skips, errs[5] = m.Int64Counter("hedge.call.deadline_skips", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts after the primary not started because too little of the deadline was left for them to help."))
	o.opens, errs[6] = m.Int64Counter("hedge.breaker.opens", metric.WithUnit("{open}"),
		metric.WithDescription("Times a hedge.Breaker opened and stopped a key's hedges."))
	if len(o.watch) > 0 {
		o.delayGauge, errs[7] = m.Float64ObservableGauge("hedge.delay", metric.WithUnit("s"),
			metric.WithDescription("The delay a learned delay source hedges at now; -1 when it sends no hedge."))
		if errs[7] == nil {
			_, errs[8] = m.RegisterCallback(o.observeDelays, o.delayGauge)
		}
	}
	if err := errors.Join(errs[:]...); err != nil {
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
	call := k.calls[outcomeIndex(r.Outcome)]
	o.duration.Record(ctx, r.Elapsed.Seconds(), call...)
	o.attempts.Record(ctx, int64(r.Attempts), call...)
	if r.Attempts > 1 {
		o.hedges.Add(ctx, int64(r.Attempts-1), k.add...)
	}
	if r.Outcome == hedge.Accept && r.Winner >= 0 && r.Winner < len(k.wins) {
		o.wins.Add(ctx, 1, k.wins[r.Winner]...)
	}
	if r.BudgetRefusals > 0 {
		o.refusals.Add(ctx, int64(r.BudgetRefusals), k.add...)
	}
	if r.DeadlineSkips > 0 {
		o.skips.Add(ctx, int64(r.DeadlineSkips), k.add...)
	}
}

// BreakerOpened counts one opening of a breaker for key: pass it as a
// hedge.BreakerConfig's OnOpen, whose Key should then be the Observer's.
// The breaker's shared overflow breaker reports one of its keys.
func (o *Observer) BreakerOpened(key string) {
	if o == nil || o.keys == nil {
		return
	}
	o.opens.Add(context.Background(), 1, o.keys.of(key).add...)
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
