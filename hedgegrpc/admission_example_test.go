package hedgegrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgegrpc"
)

// replicaPair is a health service whose Watch holds its place until
// free is closed, and whose Check answers at once, but for the hedge of
// the call labelled "tied", which answers once left is closed.
type replicaPair struct {
	healthpb.UnimplementedHealthServer
	busy, free, left chan struct{}
}

func (s replicaPair) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if labelOf(ctx) == "tied" && !isFirst(ctx) {
		<-s.left
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s replicaPair) Watch(_ *healthpb.HealthCheckRequest, _ healthpb.Health_WatchServer) error {
	close(s.busy)
	<-s.free
	return nil
}

// Two replicas admit their calls through an Admission each, and one is
// busy: a call's primary waits there, and its hedge reaches the idle
// one. As the hedge starts, its server says so in its response headers,
// and the client cancels the primary, which leaves its queue without
// running. (One server stands for both replicas here, to keep the
// example in one process: an interceptor picks the Admission.)
func ExampleAdmission() {
	svc := replicaPair{busy: make(chan struct{}), free: make(chan struct{}), left: make(chan struct{})}
	busy := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 1}}
	idle := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 1}}
	primaryIn := make(chan struct{})
	replica := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch {
		case labelOf(ctx) != "tied":
			return busy.Unary(ctx, req, info, handler)
		case isFirst(ctx):
			close(primaryIn)
			resp, err := busy.Unary(ctx, req, info, handler)
			fmt.Println("the primary:", status.Code(err))
			close(svc.left)
			return resp, err
		}
		<-primaryIn // here only to order the example: the primary is at its server
		return idle.Unary(ctx, req, info, handler)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(replica), grpc.ChainStreamInterceptor(busy.Stream))
	healthpb.RegisterHealthServer(gs, svc)
	lis := bufconn.Listen(1 << 16)
	go gs.Serve(lis)
	defer gs.Stop()

	var tied atomic.Int64
	hedging, err := hedgegrpc.New(hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": {
			MaxAttempts:         2,
			Delay:               hedge.Fixed(5 * time.Millisecond), // &hedge.Adaptive{} in production
			NonFatalStatusCodes: []codes.Code{codes.Unavailable},
		}},
		Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) { tied.Add(int64(r.Tied)) }),
	})
	if err != nil {
		panic(err)
	}
	const target = "passthrough:///health"
	conn, err := grpc.NewClient(target, append(hedging.DialOptions(target),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	// The channel's first call of the method learns that its servers
	// signal starts: its later calls tie.
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		panic(err)
	}
	watch, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		panic(err)
	}
	<-svc.busy // the busy replica's one place is taken
	resp, err := client.Check(metadata.AppendToOutgoingContext(context.Background(), "call", "tied"), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err)
	fmt.Println("attempts cancelled by a tie:", tied.Load())
	close(svc.free)
	watch.Recv()
	// Output:
	// the primary: Canceled
	// SERVING <nil>
	// attempts cancelled by a tie: 1
}
