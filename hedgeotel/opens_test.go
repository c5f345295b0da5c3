package hedgeotel_test

import (
	"net/http"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/hedgeotel"
	"github.com/tailcut/hedge/internal/pipenet"
)

// servePipes serves h in the test's bubble, whatever host a request
// names, and returns a transport to it. Both close when the test ends.
func servePipes(t *testing.T, h http.Handler) http.RoundTripper {
	l := pipenet.Serve(t, &http.Server{Handler: h})
	tr := &http.Transport{DialContext: l.Dial}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// The breakers of a zero hedgehttp.Transport's routes report their
// openings to the Observer that hears its requests: against an upstream
// that answers 503, each route's breaker opens once, at its 100th
// request, and hedge.breaker.opens counts it under the route's hedge.key.
func TestTransportBreakerOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := servePipes(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}))
		reader, obs := newReader(t, hedgeotel.WithKey(hedgehttp.Route))
		tr := &hedgehttp.Transport{Base: base, Observer: obs}
		for _, url := range []string{"http://a.test/users/7", "http://b.test/"} {
			for range 150 {
				resp, err := tr.RoundTrip(get(t, t.Context(), url))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
		}
		want := counter("hedge.breaker.opens", "{open}", descOpens,
			sum(attrs("hedge.key", "GET a.test"), 1), sum(attrs("hedge.key", "GET b.test"), 1))
		metricdatatest.AssertEqual(t, want, collect(t, reader)["hedge.breaker.opens"], metricdatatest.IgnoreTimestamp())
	})
}
