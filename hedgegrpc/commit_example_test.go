package hedgegrpc_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// headersFirst is a health service that sends its response headers at
// once and answers 200ms later.
type headersFirst struct {
	healthpb.UnimplementedHealthServer
}

func (headersFirst) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SendHeader(ctx, nil); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// With CommitOnHeaders on the channel, a unary call commits when the
// first response headers arrive: the server sent them at once, so the
// hedge due at 100ms never goes out, although the answer takes 200ms.
func ExampleCommitOnHeaders() {
	dialer, stop := serve(headersFirst{})
	defer stop()

	in, err := hedgegrpc.New(hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{
			"grpc.health.v1.Health": {MaxAttempts: 2, HedgingDelay: 100 * time.Millisecond},
		},
		Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) {
			fmt.Printf("%d attempt, %d hedge held back\n", r.Attempts, r.BudgetRefusals)
		}),
	})
	if err != nil {
		panic(err)
	}
	const target = "passthrough:///health"
	conn, err := grpc.NewClient(target, append(in.DialOptions(target), dialer,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err)
	// Output:
	// 1 attempt, 1 hedge held back
	// SERVING <nil>
}
