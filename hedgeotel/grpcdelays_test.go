package hedgeotel_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
	"github.com/tailcut/hedge/hedgeotel"
)

// skewed is a Health service whose Check answers in 10 ms, and one call
// in twenty in 200 ms, unless the client cancels it first.
type skewed struct {
	healthpb.UnimplementedHealthServer
	n atomic.Int64
}

func (s *skewed) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	d := 10 * ms
	if s.n.Add(1)%20 == 0 {
		d = 200 * ms
	}
	select {
	case <-time.After(d):
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// The delay a gRPC channel learns per method reaches the hedge.delay
// gauge with one option, under the key the Observer gives the method's
// calls: WithDelays of the Config, whose Observer it then is, or of the
// Interceptor.
func TestGRPCDelaysWithOneOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const method = "/grpc.health.v1.Health/Check"
		cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
			"grpc.health.v1.Health": {MaxAttempts: 3, Delay: &hedge.Adaptive{Key: hedgegrpc.Method}},
		}}
		reader, obs := newReader(t, hedgeotel.WithKey(hedgegrpc.Method), hedgeotel.WithDelays(cfg))
		cfg.Observer = obs
		in, err := hedgegrpc.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		byInterceptor, _ := newReader(t, hedgeotel.WithDelays(in))
		lis := bufconn.Listen(1 << 16)
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, &skewed{})
		served := make(chan struct{})
		go func() {
			defer close(served)
			gs.Serve(lis)
		}()
		conn, err := grpc.NewClient("passthrough:///bufconn", append(in.DialOptions("bufconn"),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))...)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			conn.Close()
			gs.Stop()
			<-served
		}()
		client := healthpb.NewHealthClient(conn)
		for range 1500 {
			if _, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range []struct {
			name   string
			reader *sdkmetric.ManualReader
		}{{"WithDelays(cfg)", reader}, {"WithDelays(in)", byInterceptor}} {
			var delays []float64
			for _, p := range gaugePoints(t, collect(t, r.reader)["hedge.delay"]) {
				key, _ := p.Attributes.Value("hedge.key")
				if key.AsString() != method {
					t.Errorf("%s: hedge.delay under key %q, want only %q", r.name, key.AsString(), method)
					continue
				}
				delays = append(delays, p.Value)
			}
			if len(delays) != 1 || delays[0] < 0.010 || delays[0] >= 0.200 {
				t.Errorf("%s: hedge.delay of %s: %v, want one point between its fast and its slow time", r.name, method, delays)
			}
		}
		calls := collect(t, reader)["hedge.call.duration"].Data.(metricdata.Histogram[float64])
		for _, p := range calls.DataPoints {
			if key, _ := p.Attributes.Value("hedge.key"); key.AsString() != method {
				t.Errorf("hedge.call.duration under key %q, want %q beside its delay", key.AsString(), method)
			}
		}
		if len(calls.DataPoints) == 0 {
			t.Error("no hedge.call.duration: the Config's Observer heard no call")
		}
	})
}
