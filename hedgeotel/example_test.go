package hedgeotel_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/hedgeotel"
)

// An Observer on a Policy records every call. Here the primary answers
// in two calls, and in the third it never does and a hedge wins.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := hedgeotel.New(hedgeotel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	fast := hedge.Policy[string]{Delay: hedge.Fixed(time.Hour), Observer: obs}
	hedged := hedge.Policy[string]{Delay: hedge.Fixed(0), Observer: obs}
	call := func(ctx context.Context) (string, error) {
		if hedge.Attempt(ctx) == 0 && ctx.Value(stuck{}) != nil {
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "ok", nil
	}
	ctx := context.Background()
	hedge.Do(ctx, fast, call)
	hedge.Do(ctx, fast, call)
	hedge.Do(context.WithValue(ctx, stuck{}, true), hedged, call)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				if r, ok := dp.Attributes.Value(hedgeotel.RoleAttr); ok {
					fmt.Printf("%s{hedge.role=%s}: %d measured\n", m.Name, r.AsString(), dp.Count)
				} else {
					fmt.Printf("%s: %d measured\n", m.Name, dp.Count)
				}
			}
		case metricdata.Histogram[int64]:
			fmt.Printf("%s: %d calls, %d hedges\n", m.Name, data.DataPoints[0].Count, data.DataPoints[0].Sum)
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				if w, ok := dp.Attributes.Value(hedgeotel.WinnerAttr); ok {
					fmt.Printf("%s{hedge.winner=%d}: %d\n", m.Name, w.AsInt64(), dp.Value)
				} else {
					fmt.Printf("%s: %d\n", m.Name, dp.Value)
				}
			}
		}
	}
	// Unordered output:
	// hedge.call.duration: 3 measured
	// hedge.call.hedges: 1 calls, 1 hedges
	// hedge.attempt.delay: 1 measured
	// hedge.attempt.duration{hedge.role=winner}: 1 measured
	// hedge.attempt.duration{hedge.role=loser}: 1 measured
	// hedge.call.attempts: 4
	// hedge.call.hedged: 1
	// hedge.call.retries: 0
	// hedge.call.wins{hedge.winner=0}: 2
	// hedge.call.wins{hedge.winner=1}: 1
	// hedge.call.budget_refusals: 0
	// hedge.call.deadline_skips: 0
	// hedge.call.panics: 0
	// hedge.breaker.opens: 0
}

// stuck marks the calls whose primary never answers in ExampleNew.
type stuck struct{}

// WithDelay reports the delay a learned delay source hedges at now, under
// the key of the calls it schedules.
func ExampleWithDelay() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	users := &hedge.Percentile{Initial: 80 * time.Millisecond} // until it has seen 200 calls
	obs, err := hedgeotel.New(hedgeotel.WithMeterProvider(mp), hedgeotel.WithDelay("GET /users/{id}", users))
	if err != nil {
		panic(err)
	}
	policy := hedge.Policy[string]{Delay: users, Observer: obs}
	_ = policy

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if g, ok := m.Data.(metricdata.Gauge[float64]); ok {
			key, _ := g.DataPoints[0].Attributes.Value(hedgeotel.KeyAttr)
			fmt.Printf("%s{hedge.key=%q}: %vs\n", m.Name, key.AsString(), g.DataPoints[0].Value)
		}
	}
	// Output:
	// hedge.delay{hedge.key="GET /users/{id}"}: 0.08s
	// hedge.delay.ceiling{hedge.key="GET /users/{id}"}: 10s
}

// A Transport hedges with its Observer, and otelhttp makes a span for
// each attempt inside it, which AttemptTransport marks.
func ExampleAttemptTransport() {
	obs, err := hedgeotel.New(hedgeotel.WithKey(hedgehttp.Route))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &hedgehttp.Transport{
		Observer: obs,
		Base:     otelhttp.NewTransport(&hedgeotel.AttemptTransport{}),
	}}
	_ = client
}

// WithDelays reports the delay that a Keyed has learned for each route,
// under the route's key.
func ExampleWithDelays() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	routes := &hedge.Keyed{
		Key: hedgehttp.Route,
		New: func(string) hedge.Delay { return &hedge.Percentile{Initial: 40 * time.Millisecond} },
	}
	obs, err := hedgeotel.New(hedgeotel.WithMeterProvider(mp), hedgeotel.WithKey(hedgehttp.Route),
		hedgeotel.WithDelays(routes))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &hedgehttp.Transport{Delay: routes, Observer: obs}}
	_ = client
	routes.Next(context.Background(), 1) // a call of the route "": the Keyed makes its delay

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if g, ok := m.Data.(metricdata.Gauge[float64]); ok {
			fmt.Printf("%s: %vs\n", m.Name, g.DataPoints[0].Value)
		}
	}
	// Unordered output:
	// hedge.delay: 0.04s
	// hedge.delay.ceiling: 10s
}

// AttemptMeterProvider gives otelhttp (or otelgrpc) a MeterProvider under
// which the attempts that lost the race are not counted as errors.
func ExampleAttemptMeterProvider() {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	client := &http.Client{Transport: &hedgehttp.Transport{
		Base: otelhttp.NewTransport(&hedgeotel.AttemptTransport{},
			otelhttp.WithMeterProvider(hedgeotel.AttemptMeterProvider(mp))),
	}}
	_ = client
}
