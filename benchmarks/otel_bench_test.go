package benchmarks

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgeotel"
)

type routeKey struct{}

func routeOf(ctx context.Context) string {
	r, _ := ctx.Value(routeKey{}).(string)
	return r
}

// BenchmarkObserver is what metrics cost a call on the fast path: Do
// bare, with the stock Stats, and with a hedgeotel Observer recording
// into the OpenTelemetry SDK (a MeterProvider with a reader, as in
// production, though nothing collects during the run). "observe" is the
// Observer alone, with a key read from the context: for a call that did
// not hedge (one histogram measurement), and for one that hedged twice,
// the second hedge winning (the duration, the hedges, two delays and
// three attempts' durations: six measurements).
func BenchmarkObserver(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { mp.Shutdown(context.Background()) })
	obs, err := hedgeotel.New(hedgeotel.WithMeterProvider(mp), hedgeotel.WithKey(routeOf))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), routeKey{}, "GET /users/{id}")
	bare := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour)}
	for _, bm := range []struct {
		name     string
		observer hedge.Observer
	}{
		{"bare", nil},
		{"stats", &hedge.Stats{}},
		{"hedgeotel", obs},
	} {
		b.Run(bm.name, func(b *testing.B) {
			p := bare
			p.Observer = bm.observer
			b.ReportAllocs()
			for b.Loop() {
				hedge.Do(ctx, p, answer)
			}
		})
	}
	for _, bm := range []struct {
		name string
		r    hedge.Report
	}{
		{"observe/unhedged", hedge.Report{Attempts: 1, Winner: 0, Elapsed: 12 * time.Millisecond}},
		{"observe/hedged", hedge.Report{Attempts: 3, Winner: 2, Elapsed: 42 * time.Millisecond,
			Started: [hedge.MaxAttemptsLimit]time.Duration{0, 20 * time.Millisecond, 30 * time.Millisecond}}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				obs.Observe(ctx, bm.r)
			}
		})
	}
}
