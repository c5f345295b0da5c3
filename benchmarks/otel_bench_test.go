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
// Observer alone, for a call that hedged, with a key read from the
// context.
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
	b.Run("observe", func(b *testing.B) {
		r := hedge.Report{Attempts: 2, Winner: 1, Elapsed: 42 * time.Millisecond}
		b.ReportAllocs()
		for b.Loop() {
			obs.Observe(ctx, r)
		}
	})
}
