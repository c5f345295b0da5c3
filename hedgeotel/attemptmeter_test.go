package hedgeotel_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/hedgeotel"
)

// errorRate is an error rate over otelhttp's own metrics written the
// usual way: of the requests http.client.request.duration counts, those
// with an error.type. It returns the errors, the requests, and the
// requests that say hedge.superseded=true.
func errorRate(t *testing.T, reader *sdkmetric.ManualReader) (errs, all, superseded uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "http.client.request.duration" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				all += dp.Count
				if _, ok := dp.Attributes.Value(attribute.Key("error.type")); ok {
					errs += dp.Count
				}
				if v, ok := dp.Attributes.Value(hedgeotel.SupersededAttr); ok && v.AsBool() {
					superseded += dp.Count
				}
			}
		}
	}
	return errs, all, superseded
}

// Over real connections and the real otelhttp, with the MeterProvider of
// AttemptMeterProvider, an error rate of otelhttp's metrics written the
// usual way counts the requests that failed (one the caller cut off, one
// to a server that refused it) and not the attempts that lost the race;
// those say hedge.superseded=true. With the SDK's MeterProvider as it is,
// the same requests count every loser as an error.
func TestLosersAreNoErrors(t *testing.T) {
	for _, c := range []struct {
		name         string
		wrap         func(metric.MeterProvider) metric.MeterProvider
		errs, marked uint64
	}{
		{"AttemptMeterProvider", hedgeotel.AttemptMeterProvider, 3, hedged},
		{"the SDK's own", func(mp metric.MeterProvider) metric.MeterProvider { return mp }, 3 + hedged, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { mp.Shutdown(context.Background()) })
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			url, _ := server(t, false, racing())
			// otelhttp records a request's metrics before it ends its span:
			// once every span has ended, every request is measured.
			sp := newSpans(t)
			instrumented := otelhttp.NewTransport(&hedgeotel.AttemptTransport{Base: base},
				otelhttp.WithMeterProvider(c.wrap(mp)), otelhttp.WithTracerProvider(sp.tp))
			tr := &hedgehttp.Transport{Base: instrumented, Delay: hedge.Fixed(0), AttemptHeader: attemptHeader}

			// Each request's hedge wins, and its primary loses.
			for range hedged {
				resp, err := tr.RoundTrip(get(t, t.Context(), url))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cutOff(t, tr)
			refused := httptest.NewServer(http.NotFoundHandler())
			refused.Close()
			once := &hedgehttp.Transport{Base: instrumented, MaxAttempts: 1}
			if _, err := once.RoundTrip(get(t, t.Context(), refused.URL)); err == nil {
				t.Fatal("a request to a closed server succeeded")
			}

			// The winners, the losers, the two attempts cut off and the
			// refused request.
			want := uint64(2*hedged + 2 + 1)
			sp.await(t, int(want))
			errs, all, superseded := errorRate(t, reader)
			if all != want {
				t.Errorf("%d requests measured, want %d", all, want)
			}
			if errs != c.errs || superseded != c.marked {
				t.Errorf("%d of %d requests are errors and %d superseded, want %d errors and %d superseded",
					errs, all, superseded, c.errs, c.marked)
			}
		})
	}
}

// hedged is how many requests TestLosersAreNoErrors sends whose hedge
// wins.
const hedged = 5

// cutOff sends a request through tr to a server that holds both of its
// attempts until the caller gives up, and gives up.
func cutOff(t *testing.T, tr *hedgehttp.Transport) {
	t.Helper()
	arrived := make(chan struct{}, 2)
	url, _ := server(t, false, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(get(t, ctx, url))
		errc <- err
	}()
	<-arrived
	<-arrived
	cancel()
	if err := <-errc; err == nil {
		t.Error("a request the caller cut off succeeded")
	}
}
