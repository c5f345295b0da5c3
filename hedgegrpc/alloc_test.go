package hedgegrpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/hedgegrpc"
)

// callAllocs returns the allocations of one Check on a warm channel over
// bufconn to a server that answers at once, dialled with opts: the
// server's included, the same for every channel.
func callAllocs(t *testing.T, opts ...grpc.DialOption) float64 {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, serving{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		gs.Serve(lis)
	}()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	conn, err := grpc.NewClient("passthrough:///bufconn", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		gs.Stop()
		<-served
	}()
	client := healthpb.NewHealthClient(conn)
	ctx, req := context.Background(), &healthpb.HealthCheckRequest{}
	check := func() {
		if _, err := client.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		check() // the channel's buffers and pools warm up
	}
	return testing.AllocsPerRun(200, check)
}

// TestUnaryFastPathAllocs pins what a hedged unary call allocates beyond
// a plain one when its primary answers before the first hedge is due,
// 12 objects: the call; the primary's cancellable context and its
// cancel func; grpc-go's link to that context, its Done channel and its
// map of children (two); the first hedge's timer and its func; the
// copies of the attempt's header (three) and trailer, which tell a
// failure after headers and carry a pushback.
func TestUnaryFastPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations of real gRPC calls")
	}
	in, err := hedgegrpc.New(hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
		MaxAttempts: 2, HedgingDelay: time.Hour, NonFatalStatusCodes: unavailable,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	plain := callAllocs(t)
	hedged := callAllocs(t, in.DialOptions("passthrough:///bufconn")...)
	t.Logf("plain %v, hedged %v", plain, hedged)
	if extra := hedged - plain; extra > 12 {
		t.Errorf("a hedged call allocates %v times more than a plain one (%v), want at most 12", extra, plain)
	}
}
