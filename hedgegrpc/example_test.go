package hedgegrpc_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// stuckFirst is a health service whose first attempt of every call hangs
// until the client gives up on it; hedges answer at once.
type stuckFirst struct {
	healthpb.UnimplementedHealthServer
}

func isFirst(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) == 0
}

func (stuckFirst) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if isFirst(ctx) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Watch, a server-streaming method, sends the status and waits for the
// client to go; its first attempt sends nothing.
func (stuckFirst) Watch(_ *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	if !isFirst(stream.Context()) {
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// serve starts s on an in-memory listener and returns a dialer for it and
// a function that stops it.
func serve(s healthpb.HealthServer) (grpc.DialOption, func()) {
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, s)
	go gs.Serve(lis)
	dial := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })
	return dial, gs.Stop
}

// One service config for grpc-go and the hedging, and one call that
// installs both on a channel: a unary call and a stream, each won by its
// hedge because the first attempt hangs.
func Example() {
	dialer, stop := serve(stuckFirst{})
	defer stop()

	// A whole service config: grpc-go reads the balancer, the hedging is
	// gRFC A6's.
	cfg, err := hedgegrpc.ParseServiceConfig(`{
	  "loadBalancingConfig": [{"round_robin": {}}],
	  "methodConfig": [{
	    "name": [{"service": "grpc.health.v1.Health"}],
	    "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.005s",
	                      "nonFatalStatusCodes": ["UNAVAILABLE"]}
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`)
	if err != nil {
		panic(err)
	}
	var stats hedge.Stats
	cfg.Observer = &stats
	hedging, err := hedgegrpc.New(cfg) // one per channel: it holds the channel's token bucket
	if err != nil {
		panic(err)
	}
	const target = "passthrough:///health"
	conn, err := grpc.NewClient(target, append(hedging.DialOptions(target), dialer,
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("Check:", resp.GetStatus(), err)

	ctx, cancel := context.WithCancel(context.Background())
	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		panic(err)
	}
	resp, err = watch.Recv()
	fmt.Println("Watch:", resp.GetStatus(), err)
	cancel()

	s := stats.Snapshot()
	fmt.Printf("%d calls, %d attempts, won by the first hedge: %d\n", s.Calls, s.Attempts, s.Wins[1])
	// Output:
	// Check: SERVING <nil>
	// Watch: SERVING <nil>
	// 2 calls, 4 attempts, won by the first hedge: 2
}

func ExampleParseServiceConfig() {
	cfg, err := hedgegrpc.ParseServiceConfig(`{
	  "methodConfig": [{
	    "name": [{"service": "pkg.Profiles", "method": "Get"}, {"service": "pkg.Search"}],
	    "hedgingPolicy": {"maxAttempts": 4, "hedgingDelay": ".5s",
	                      "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL", "ABORTED"]}
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`)
	if err != nil {
		panic(err)
	}
	names := slices.Sorted(maps.Keys(cfg.Methods))
	for _, name := range names {
		p := cfg.Methods[name]
		fmt.Printf("%s: %d attempts, %v apart, non-fatal %v\n", name, p.MaxAttempts, p.HedgingDelay, p.NonFatalStatusCodes)
	}
	fmt.Printf("throttling: %+v\n", *cfg.RetryThrottling)

	_, err = hedgegrpc.ParseServiceConfig(`{"methodConfig": [{"name": [{"service": "pkg.Search"}],
	  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "-1s"}}]}`)
	fmt.Println(err)
	// Output:
	// pkg.Profiles/Get: 4 attempts, 500ms apart, non-fatal [Unavailable Internal Aborted]
	// pkg.Search: 4 attempts, 500ms apart, non-fatal [Unavailable Internal Aborted]
	// throttling: {MaxTokens:10 TokenRatio:0.1}
	// hedgegrpc: invalid config: methodConfig[0]: hedgingDelay: "-1s" is negative
}
