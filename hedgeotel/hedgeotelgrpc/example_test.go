package hedgeotelgrpc_test

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tailcut/hedge/hedgegrpc"
	"github.com/tailcut/hedge/hedgeotel"
	"github.com/tailcut/hedge/hedgeotel/hedgeotelgrpc"
)

// A channel whose hedged calls are counted per method, and whose
// attempts' spans say which attempt they are and which ones lost.
func ExampleStatsHandler() {
	obs, err := hedgeotel.New(hedgeotel.WithKey(hedgegrpc.Method))
	if err != nil {
		panic(err)
	}
	in, err := hedgegrpc.New(hedgegrpc.Config{
		Methods:  map[string]hedgegrpc.HedgingPolicy{"example.Profiles/Get": {MaxAttempts: 2}},
		Observer: obs,
	})
	if err != nil {
		panic(err)
	}
	const target = "dns:///profiles.example:443"
	conn, err := grpc.NewClient(target, append(in.DialOptions(target),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(hedgeotelgrpc.StatsHandler(otelgrpc.NewClientHandler())))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
}
