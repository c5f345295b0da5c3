package hedgegrpc_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// busyUntil is a health service whose calls answer once done is closed,
// and which closes busy when the first one starts.
type busyUntil struct {
	healthpb.UnimplementedHealthServer
	busy, done chan struct{}
}

func (s busyUntil) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	close(s.busy)
	<-s.done
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// A server that can serve one call at a time is busy with a primary when
// that call's hedge arrives: the Shedder fails the hedge with UNAVAILABLE
// and a pushback that stops the call's hedging, and the client goes on
// waiting for the primary.
func ExampleShedder() {
	svc := busyUntil{busy: make(chan struct{}), done: make(chan struct{})}
	shed := &hedgegrpc.Shedder{Limit: 1} // what the service can serve at once
	// Here only to order the example: hedges wait until the primary holds
	// the one place, and the primary until the hedge has its answer.
	order := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) == 0 {
			return handler(ctx, req)
		}
		<-svc.busy
		resp, err := handler(ctx, req)
		fmt.Println("the hedge:", status.Code(err))
		close(svc.done)
		return resp, err
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(order, shed.Unary), grpc.ChainStreamInterceptor(shed.Stream))
	healthpb.RegisterHealthServer(gs, svc)
	lis := bufconn.Listen(1 << 16)
	go gs.Serve(lis)
	defer gs.Stop()

	var stats hedge.Stats
	hedging, err := hedgegrpc.New(hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": {
			MaxAttempts:         2,
			HedgingDelay:        5 * time.Millisecond,
			NonFatalStatusCodes: []codes.Code{codes.Unavailable}, // so that a shed hedge does not end the call
		}},
		Observer: &stats,
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

	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err)
	s := stats.Snapshot()
	fmt.Printf("%d call, %d attempts, won by the primary: %d; hedges shed: %d\n", s.Calls, s.Attempts, s.Wins[0], shed.Shed())
	// Output:
	// the hedge: Unavailable
	// SERVING <nil>
	// 1 call, 2 attempts, won by the primary: 1; hedges shed: 1
}
