package hedgeotel

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tailcut/hedge/hedgehttp"
)

// errorTypeAttr is the semantic conventions' attribute of a failed
// request's measurements.
const errorTypeAttr = attribute.Key("error.type")

// AttemptMeterProvider returns a MeterProvider for the instrumentation
// that measures each attempt of a hedged call, so that its metrics never
// count a loser as an error: pass it to otelhttp.NewTransport (under
// which AttemptTransport sits) or otelgrpc.NewClientHandler (which
// hedgeotelgrpc.StatsHandler wraps) with their WithMeterProvider option.
//
//	mp := hedgeotel.AttemptMeterProvider(provider)
//	base := otelhttp.NewTransport(&hedgeotel.AttemptTransport{}, otelhttp.WithMeterProvider(mp))
//
// Its instruments are mp's. A measurement made for an attempt that lost
// the race (its context says so when the instrumentation records, as
// hedgehttp.Superseded and hedge.ErrSuperseded tell) loses its error.type
// and gains hedge.superseded=true; every other measurement passes as it
// is. otelhttp records a request without a body as its RoundTrip returns,
// which is when the context tells; one whose body the transport still
// reads then is recorded later, when the answer may no longer hold. So an error rate written the usual way, the share of
// http.client.request.duration or rpc.client.call.duration with an
// error.type, counts the failures of the upstream and not the attempts
// that hedging cancelled by design; hedge.superseded=true tells those
// apart. (otelhttp's Labeler cannot do this: otelhttp adds error.type
// after the Labeler's attributes, and a caller's Labeler is shared by
// every attempt of a request.) A nil mp means otel.GetMeterProvider() as
// it is then. The cost, for measurements of attempts that did not lose:
// a check of the context's Err.
func AttemptMeterProvider(mp metric.MeterProvider) metric.MeterProvider {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return attemptProvider{mp}
}

type attemptProvider struct{ metric.MeterProvider }

func (p attemptProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return attemptMeter{p.MeterProvider.Meter(name, opts...)}
}

// attemptMeter wraps the synchronous instruments of its Meter, whose
// measurements get the context of the attempt; the observable ones get
// none and pass through.
type attemptMeter struct{ metric.Meter }

func (m attemptMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	i, err := m.Meter.Int64Counter(name, opts...)
	if i == nil {
		return i, err
	}
	return i64Counter{i}, err
}

func (m attemptMeter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	i, err := m.Meter.Int64UpDownCounter(name, opts...)
	if i == nil {
		return i, err
	}
	return i64UpDown{i}, err
}

func (m attemptMeter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	i, err := m.Meter.Int64Histogram(name, opts...)
	if i == nil {
		return i, err
	}
	return i64Histogram{i}, err
}

func (m attemptMeter) Int64Gauge(name string, opts ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	i, err := m.Meter.Int64Gauge(name, opts...)
	if i == nil {
		return i, err
	}
	return i64Gauge{i}, err
}

func (m attemptMeter) Float64Counter(name string, opts ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	i, err := m.Meter.Float64Counter(name, opts...)
	if i == nil {
		return i, err
	}
	return f64Counter{i}, err
}

func (m attemptMeter) Float64UpDownCounter(name string, opts ...metric.Float64UpDownCounterOption) (metric.Float64UpDownCounter, error) {
	i, err := m.Meter.Float64UpDownCounter(name, opts...)
	if i == nil {
		return i, err
	}
	return f64UpDown{i}, err
}

func (m attemptMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	i, err := m.Meter.Float64Histogram(name, opts...)
	if i == nil {
		return i, err
	}
	return f64Histogram{i}, err
}

func (m attemptMeter) Float64Gauge(name string, opts ...metric.Float64GaugeOption) (metric.Float64Gauge, error) {
	i, err := m.Meter.Float64Gauge(name, opts...)
	if i == nil {
		return i, err
	}
	return f64Gauge{i}, err
}

type (
	i64Counter   struct{ metric.Int64Counter }
	i64UpDown    struct{ metric.Int64UpDownCounter }
	i64Histogram struct{ metric.Int64Histogram }
	i64Gauge     struct{ metric.Int64Gauge }
	f64Counter   struct{ metric.Float64Counter }
	f64UpDown    struct{ metric.Float64UpDownCounter }
	f64Histogram struct{ metric.Float64Histogram }
	f64Gauge     struct{ metric.Float64Gauge }
)

func (i i64Counter) Add(ctx context.Context, v int64, opts ...metric.AddOption) {
	i.Int64Counter.Add(ctx, v, loserAdd(ctx, opts)...)
}

func (i i64UpDown) Add(ctx context.Context, v int64, opts ...metric.AddOption) {
	i.Int64UpDownCounter.Add(ctx, v, loserAdd(ctx, opts)...)
}

func (i i64Histogram) Record(ctx context.Context, v int64, opts ...metric.RecordOption) {
	i.Int64Histogram.Record(ctx, v, loserRecord(ctx, opts)...)
}

func (i i64Gauge) Record(ctx context.Context, v int64, opts ...metric.RecordOption) {
	i.Int64Gauge.Record(ctx, v, loserRecord(ctx, opts)...)
}

func (i f64Counter) Add(ctx context.Context, v float64, opts ...metric.AddOption) {
	i.Float64Counter.Add(ctx, v, loserAdd(ctx, opts)...)
}

func (i f64UpDown) Add(ctx context.Context, v float64, opts ...metric.AddOption) {
	i.Float64UpDownCounter.Add(ctx, v, loserAdd(ctx, opts)...)
}

func (i f64Histogram) Record(ctx context.Context, v float64, opts ...metric.RecordOption) {
	i.Float64Histogram.Record(ctx, v, loserRecord(ctx, opts)...)
}

func (i f64Gauge) Record(ctx context.Context, v float64, opts ...metric.RecordOption) {
	i.Float64Gauge.Record(ctx, v, loserRecord(ctx, opts)...)
}

// lost reports whether ctx is the context of an attempt that lost the
// race: for hedgehttp, Superseded; for a hedge.Do, hedgegrpc included,
// its cause hedge.ErrSuperseded. The attempt of a measurement that is
// still running has a live context, which the first test settles.
func lost(ctx context.Context) bool {
	return ctx.Err() != nil && (hedgehttp.Superseded(ctx) || causeSuperseded(ctx))
}

func loserRecord(ctx context.Context, opts []metric.RecordOption) []metric.RecordOption {
	if !lost(ctx) {
		return opts
	}
	return []metric.RecordOption{loserSet(metric.NewRecordConfig(opts).Attributes())}
}

func loserAdd(ctx context.Context, opts []metric.AddOption) []metric.AddOption {
	if !lost(ctx) {
		return opts
	}
	return []metric.AddOption{loserSet(metric.NewAddConfig(opts).Attributes())}
}

// loserSet is set without error.type and with hedge.superseded=true.
func loserSet(set attribute.Set) metric.MeasurementOption {
	kvs := make([]attribute.KeyValue, 0, set.Len()+1)
	for it := set.Iter(); it.Next(); {
		if kv := it.Attribute(); kv.Key != errorTypeAttr {
			kvs = append(kvs, kv)
		}
	}
	return metric.WithAttributeSet(attribute.NewSet(append(kvs, SupersededAttr.Bool(true))...))
}
