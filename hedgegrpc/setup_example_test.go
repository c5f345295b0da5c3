package hedgegrpc_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// New takes a Config built in Go as well as one ParseServiceConfig read.
// Here the health service's methods hedge at a learned p95 of their own
// latency, each method apart (hedgegrpc.Method names it), and until a
// method has answered enough calls to know it, after 5ms. An Observer
// prints what each call did; the first attempt of every call hangs, so
// the hedge wins.
func ExampleNew() {
	dialer, stop := serve(stuckFirst{})
	defer stop()

	perMethod := &hedge.Keyed{
		Key: hedgegrpc.Method,
		New: func(string) hedge.Delay { return &hedge.Percentile{Initial: 5 * time.Millisecond} },
	}
	in, err := hedgegrpc.New(hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{
			"grpc.health.v1.Health": { // every method of the service
				MaxAttempts:         2,
				Delay:               perMethod, // in place of a fixed HedgingDelay
				NonFatalStatusCodes: []codes.Code{codes.Unavailable},
			},
		},
		RetryThrottling: &hedgegrpc.RetryThrottling{MaxTokens: 10, TokenRatio: 0.1},
		ServiceConfig:   `{"loadBalancingConfig": [{"round_robin": {}}]}`, // for grpc-go: spread the attempts
		Observer: hedge.ObserverFunc(func(ctx context.Context, r hedge.Report) {
			fmt.Printf("%s: %d attempts, answered by attempt %d\n", hedgegrpc.Method(ctx), r.Attempts, r.Winner)
		}),
	})
	if err != nil {
		panic(err)
	}
	const target = "passthrough:///health"
	conn, err := grpc.NewClient(target, append(in.DialOptions(target), dialer,
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err)
	// Output:
	// /grpc.health.v1.Health/Check: 2 attempts, answered by attempt 1
	// SERVING <nil>
}
