package hedgeotel_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/hedgeotel"
)

// pipes is a net.Listener whose connections are in-memory pipes, so that
// a real http.Server and http.Transport talk inside a synctest bubble.
type pipes struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *pipes) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipes) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipes) Addr() net.Addr { return pipeAddr{} }

func (l *pipes) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// servePipes serves h in the test's bubble, whatever host a request
// names, and returns a transport to it. Both close when the test ends.
func servePipes(t *testing.T, h http.Handler) http.RoundTripper {
	l := &pipes{conns: make(chan net.Conn), closed: make(chan struct{})}
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	tr := &http.Transport{DialContext: l.dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		<-served
	})
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
