package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgeotel"
)

// metrics serves the demo's hedging metrics at /metrics, for -metrics:
// hedgeotel Observers record into a MeterProvider whose reader is the
// OpenTelemetry Prometheus exporter. The page is in the OpenMetrics
// format for a scraper that asks for it, as Prometheus does, so that the
// exemplars the SDK keeps (the trace of a call, when it has one) reach
// it; in the Prometheus text format otherwise. The exporter registers
// with a registry of the demo's own, not the global default, so that a
// test can serve several at once. A nil *metrics serves nothing and makes
// no Observers.
type metrics struct {
	provider *sdkmetric.MeterProvider
	url      string // of the /metrics endpoint
	http     *http.Server
	served   chan error
}

// serveMetrics listens on addr (":9464", "127.0.0.1:0") and serves
// /metrics there until close.
func serveMetrics(addr string) (*metrics, error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "hedgedemo"))))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.Join(err, provider.Shutdown(context.Background()))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	m := &metrics{
		provider: provider,
		url:      "http://" + reachable(ln.Addr()) + "/metrics",
		http:     &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		served:   make(chan error, 1),
	}
	go func() { m.served <- m.http.Serve(ln) }()
	return m, nil
}

// reachable is addr as a URL's host: an address that listens on every
// interface (":9464") is reached at localhost.
func reachable(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	return net.JoinHostPort("localhost", strconv.Itoa(tcp.Port))
}

// observer returns the Observer of one row of the table: it records
// every call under hedge.key = key, and, when delay is a learned one
// (hedge.Percentile, hedge.Planner), where it stands as the hedge.delay
// gauge, beside its ceiling. It returns nil, and no error, when m is nil.
func (m *metrics) observer(key string, delay hedge.Delay) (*hedgeotel.Observer, error) {
	if m == nil {
		return nil, nil
	}
	opts := []hedgeotel.Option{
		hedgeotel.WithMeterProvider(m.provider),
		hedgeotel.WithKey(func(context.Context) string { return key }),
	}
	if d, ok := delay.(hedgeotel.CurrentDelay); ok {
		opts = append(opts, hedgeotel.WithDelay(key, d))
	}
	return hedgeotel.New(opts...)
}

// close stops serving, waits until the server has stopped, and shuts the
// MeterProvider down. A nil m has nothing to close.
func (m *metrics) close() error {
	if m == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.http.Shutdown(ctx)
	if serveErr := <-m.served; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return errors.Join(err, m.provider.Shutdown(ctx))
}
