package hedgegrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// methods is a stats handler that notes Method of every RPC's context, as
// gRPC hands it to TagRPC: one RPC per attempt of a hedged call.
type methods struct {
	mu     sync.Mutex
	tagged []string
}

func (m *methods) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tagged = append(m.tagged, hedgegrpc.Method(ctx))
	return ctx
}

func (*methods) HandleRPC(context.Context, stats.RPCStats) {}

func (*methods) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (*methods) HandleConn(context.Context, stats.ConnStats) {}

// Method finds the hedged call's method in the Observer's context and in
// every attempt's, and nothing in a call that was not hedged.
func TestMethodInObserverAndAttempts(t *testing.T) {
	var mu sync.Mutex
	var observed []string
	cfg := hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": {MaxAttempts: 2}},
		Observer: hedge.ObserverFunc(func(ctx context.Context, _ hedge.Report) {
			mu.Lock()
			defer mu.Unlock()
			observed = append(observed, hedgegrpc.Method(ctx))
		}),
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &methods{}
	scripts := map[string][]step{"m": {hang(), {awaitPrimary: true}}}
	e := start(t, cfg, scripts, lis, lis.Addr().String(), grpc.WithStatsHandler(h))

	if _, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "m"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := e.client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "w"}) // streams are not hedged
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()

	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{check}, observed); diff != "" {
		t.Errorf("Method in the Observer's context (-want +got)\n%s", diff)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if diff := cmp.Diff([]string{check, check, ""}, h.tagged); diff != "" {
		t.Errorf("Method in each RPC's context: both attempts, then the stream (-want +got)\n%s", diff)
	}
	if got := hedgegrpc.Method(context.Background()); got != "" {
		t.Errorf("Method outside a call = %q, want \"\"", got)
	}
}
