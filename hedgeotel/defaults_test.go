package hedgeotel_test

import (
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/hedgeotel"
)

// roundTrip is a RoundTripper made of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A zero Transport's learned delays, one per route, reach the hedge.delay
// gauge with one option.
func TestTransportDelaysWithOneOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		n := 0
		base := roundTrip(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			i := n
			n++
			mu.Unlock()
			d := 10 * ms
			if i%20 == 19 { // one request in twenty is slow
				d = 200 * ms
			}
			select {
			case <-time.After(d):
				return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		})
		tr := &hedgehttp.Transport{Base: base}
		reader, _ := newReader(t, hedgeotel.WithDelays(tr))
		for range 1500 {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://a.test/users", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		got := collect(t, reader)["hedge.delay"]
		var delays []float64
		for _, p := range gaugePoints(t, got) {
			if key, _ := p.Attributes.Value("hedge.key"); key.AsString() == "GET a.test" {
				delays = append(delays, p.Value)
			}
		}
		if len(delays) != 1 || delays[0] < 0.010 || delays[0] >= 0.200 {
			t.Errorf("hedge.delay of route GET a.test: %v, want one point between its fast and its slow time", delays)
		}
	})
}

// gaugePoints returns the points of a float gauge.
func gaugePoints(t *testing.T, m metricdata.Metrics) []metricdata.DataPoint[float64] {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[float64])
	if !ok {
		t.Fatalf("%s is a %T, not a gauge", m.Name, m.Data)
	}
	return g.DataPoints
}
