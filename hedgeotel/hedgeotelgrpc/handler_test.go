package hedgeotelgrpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge/hedgegrpc"
	"github.com/tailcut/hedge/hedgeotel"
	"github.com/tailcut/hedge/hedgeotel/hedgeotelgrpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const check = "/grpc.health.v1.Health/Check"

// health is a Health service whose Check hangs in every primary until
// the client cancels it; a hedge answers once its primary has arrived, or
// hangs too if hang is set.
type health struct {
	healthpb.UnimplementedHealthServer
	hang      bool
	arrived   chan struct{}
	primaryIn chan struct{}
}

func (h *health) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.arrived <- struct{}{}
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("grpc-previous-rpc-attempts")) == 0 { // the primary
		h.primaryIn <- struct{}{}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	select {
	case <-h.primaryIn:
		if !h.hang {
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
		}
		<-ctx.Done()
	case <-ctx.Done():
	}
	return nil, status.FromContextError(ctx.Err()).Err()
}

// env is a real gRPC server on 127.0.0.1 and a client channel to it whose
// Check calls hedgegrpc hedges at once, with otelgrpc's stats handler
// wrapped by StatsHandler, and a hedgeotel.Observer keyed by method.
type env struct {
	client healthpb.HealthClient
	srv    *health
	spans  *tracetest.SpanRecorder
	ended  chan struct{}
	rpcs   chan struct{} // an RPC's End has been handled, its metrics recorded
	reader *sdkmetric.ManualReader
}

// ends passes everything to its Handler and then says on ended that an
// RPC's End has been handled: otelgrpc records an attempt's metrics after
// it ends its span.
type ends struct {
	stats.Handler
	ended chan struct{}
}

func (e ends) HandleRPC(ctx context.Context, rs stats.RPCStats) {
	e.Handler.HandleRPC(ctx, rs)
	if _, ok := rs.(*stats.End); ok {
		e.ended <- struct{}{}
	}
}

type recorder struct {
	*tracetest.SpanRecorder
	ended chan struct{}
}

func (r recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.SpanRecorder.OnEnd(s)
	r.ended <- struct{}{}
}

func newEnv(t *testing.T, hang bool) *env {
	e := &env{
		srv:    &health{hang: hang, arrived: make(chan struct{}, 4), primaryIn: make(chan struct{}, 4)},
		spans:  tracetest.NewSpanRecorder(),
		ended:  make(chan struct{}, 8),
		rpcs:   make(chan struct{}, 8),
		reader: sdkmetric.NewManualReader(),
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder{e.spans, e.ended}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	obs, err := hedgeotel.New(hedgeotel.WithMeterProvider(mp), hedgeotel.WithKey(hedgegrpc.Method))
	if err != nil {
		t.Fatal(err)
	}
	in, err := hedgegrpc.New(hedgegrpc.Config{
		Methods:  map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": {MaxAttempts: 2}},
		Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, e.srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		gs.Serve(lis)
	}()
	target := lis.Addr().String()
	conn, err := grpc.NewClient(target, append(in.DialOptions(target),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(ends{hedgeotelgrpc.StatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithMeterProvider(hedgeotel.AttemptMeterProvider(mp)))), e.rpcs}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	e.client = healthpb.NewHealthClient(conn)
	return e
}

// spanSummary is what a test checks of a span.
type spanSummary struct {
	Name       string
	Attempt    string // hedge.attempt, "" when absent
	Previous   string // previous-rpc-attempts, "" when absent
	Superseded string // hedge.superseded, "" when absent
	Status     codes.Code
}

// await waits until n spans have ended and summarizes them by name and
// attempt. The timeout only keeps a broken test from hanging.
func (e *env) await(t *testing.T, n int) map[string]spanSummary {
	t.Helper()
	for range n {
		select {
		case <-e.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d spans ended", len(e.spans.Ended()), n)
		}
	}
	got := map[string]spanSummary{}
	for _, s := range e.spans.Ended() {
		sum := spanSummary{Name: s.Name(), Status: s.Status().Code}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case hedgeotel.AttemptAttr:
				sum.Attempt = kv.Value.String()
			case hedgeotel.SupersededAttr:
				sum.Superseded = kv.Value.String()
			case "previous-rpc-attempts":
				sum.Previous = kv.Value.String()
			}
		}
		got[sum.Name+"#"+sum.Attempt] = sum
	}
	return got
}

// Over a real connection and the real otelgrpc, each attempt's span
// carries hedge.attempt and gRFC A72's previous-rpc-attempts; the loser's
// says hedge.superseded and is not an error, nor is its measurement in
// otelgrpc's metrics; and the Observer counts the call under its method,
// won by the hedge.
func TestHedgeWins(t *testing.T) {
	e := newEnv(t, false)
	if _, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]spanSummary{
		"grpc.health.v1.Health/Check#0": {Name: "grpc.health.v1.Health/Check", Attempt: "0", Previous: "0", Superseded: "true", Status: codes.Ok},
		"grpc.health.v1.Health/Check#1": {Name: "grpc.health.v1.Health/Check", Attempt: "1", Previous: "1", Status: codes.Unset},
	}
	if diff := cmp.Diff(want, e.await(t, 2)); diff != "" {
		t.Errorf("spans (-want +got)\n%s", diff)
	}

	<-e.rpcs
	<-e.rpcs
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var attempts, errs, superseded uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "rpc.client.call.duration" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				attempts += dp.Count
				if _, ok := dp.Attributes.Value("error.type"); ok {
					errs += dp.Count
				}
				if v, ok := dp.Attributes.Value(hedgeotel.SupersededAttr); ok && v.AsBool() {
					superseded += dp.Count
				}
			}
		}
	}
	if attempts != 2 || errs != 0 || superseded != 1 {
		t.Errorf("rpc.client.call.duration: %d attempts, %d errors, %d superseded; want 2, 0 and 1", attempts, errs, superseded)
	}
	wins := metricdata.Metrics{Name: "hedge.call.wins", Unit: "{call}",
		Description: "Calls that returned an accepted answer, by the attempt that gave it (hedge.winner, 0 for the primary).",
		Data: metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: []metricdata.DataPoint[int64]{
			{Attributes: attribute.NewSet(hedgeotel.KeyAttr.String(check), hedgeotel.WinnerAttr.Int(0)), Value: 0},
			{Attributes: attribute.NewSet(hedgeotel.KeyAttr.String(check), hedgeotel.WinnerAttr.Int(1)), Value: 1},
		}}}
	var found bool
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == wins.Name {
				found = true
				metricdatatest.AssertEqual(t, wins, m, metricdatatest.IgnoreTimestamp())
			}
		}
	}
	if !found {
		t.Error("no hedge.call.wins")
	}
}

// Attempts that the caller cuts off stay errors, and a call that is not
// hedged (a stream) carries no hedge.attempt.
func TestCallerCancelsAndStreams(t *testing.T) {
	e := newEnv(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.client.Check(ctx, &healthpb.HealthCheckRequest{})
		errc <- err
	}()
	<-e.srv.arrived
	<-e.srv.arrived
	cancel()
	if err := <-errc; status.Code(err) != grpccodes.Canceled {
		t.Errorf("Check: %v, want Canceled", err)
	}
	stream, err := e.client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != grpccodes.Unimplemented {
		t.Errorf("Watch: %v, want Unimplemented", err)
	}
	want := map[string]spanSummary{
		"grpc.health.v1.Health/Check#0": {Name: "grpc.health.v1.Health/Check", Attempt: "0", Previous: "0", Status: codes.Error},
		"grpc.health.v1.Health/Check#1": {Name: "grpc.health.v1.Health/Check", Attempt: "1", Previous: "1", Status: codes.Error},
		"grpc.health.v1.Health/Watch#":  {Name: "grpc.health.v1.Health/Watch", Status: codes.Error},
	}
	if diff := cmp.Diff(want, e.await(t, 3)); diff != "" {
		t.Errorf("spans (-want +got)\n%s", diff)
	}
}
