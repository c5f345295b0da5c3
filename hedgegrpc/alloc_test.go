package hedgegrpc_test

import (
	"context"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/hedgegrpc"
)

// callAllocs returns the allocations of one call on a warm channel over
// bufconn to a server that answers at once, dialled with opts: the
// server's included, the same for every channel. The call is a Check, or
// with stream set a Watch, received to its end.
func callAllocs(t *testing.T, stream bool, opts ...grpc.DialOption) float64 {
	t.Helper()
	return serverCallAllocs(t, stream, nil, opts...)
}

// serverCallAllocs is callAllocs to a server made with srv.
func serverCallAllocs(t *testing.T, stream bool, srv []grpc.ServerOption, opts ...grpc.DialOption) float64 {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer(srv...)
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
	call := func() {
		if !stream {
			if _, err := client.Check(ctx, req); err != nil {
				t.Fatal(err)
			}
			return
		}
		w, err := client.Watch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != io.EOF {
			t.Fatal(err)
		}
	}
	for range 100 {
		call() // the channel's buffers and pools warm up
	}
	// The median of five counts: under the race detector, sync.Pool drops
	// what is put back at random, which moves grpc-go's own count by one
	// now and then.
	var n [5]float64
	for i := range n {
		n[i] = testing.AllocsPerRun(200, call)
	}
	slices.Sort(n[:])
	return n[len(n)/2]
}

// fastPathOptions are the dial options of a channel that hedges Health's
// methods an hour after the primary, which a server that answers at once
// never lets fall due.
func fastPathOptions(t *testing.T) []grpc.DialOption {
	in, err := hedgegrpc.New(hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
		MaxAttempts: 2, HedgingDelay: time.Hour, NonFatalStatusCodes: unavailable,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return in.DialOptions("passthrough:///bufconn")
}

// TestUnaryFastPathAllocs pins what a hedged unary call allocates beyond
// a plain one when its primary answers before the first hedge is due,
// 12 objects: the call; the primary's cancellable context and its
// cancel func; grpc-go's link to that context, its Done channel and its
// map of children (two); the first hedge's timer and its func; the
// copies of the attempt's header (three) and trailer, which tell a
// failure after headers and carry a pushback. Every hedge of a unary
// call pays these on its fast path: the floor (floorUnary), which does
// only what they are for, allocates as many.
func TestUnaryFastPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations of real gRPC calls")
	}
	plain := callAllocs(t, false)
	floor := callAllocs(t, false, grpc.WithUnaryInterceptor(floorUnary))
	hedged := callAllocs(t, false, fastPathOptions(t)...)
	t.Logf("plain %v, floor %v, hedged %v", plain, floor, hedged)
	if extra := hedged - plain; extra > 12 {
		t.Errorf("a hedged call allocates %v times more than a plain one (%v), want at most 12", extra, plain)
	}
	if hedged > floor {
		t.Errorf("a hedged call allocates %v times, above the floor's %v", hedged, floor)
	}
}

// TestServerStreamFastPathAllocs pins what a hedged server-streaming call
// allocates beyond a plain one when its primary commits it before the
// first hedge is due, 14 objects: the stream, its copy of the caller's
// options and the primary's options with its OnFinish func, the list of
// its attempts, the copy of the request it keeps for hedges and the
// buffer that holds it, the primary's cancellable context and its cancel
// func, grpc-go's link to that context (three), and the first hedge's
// timer and its func.
func TestServerStreamFastPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations of real gRPC calls")
	}
	plain := callAllocs(t, true)
	hedged := callAllocs(t, true, fastPathOptions(t)...)
	t.Logf("plain %v, hedged %v", plain, hedged)
	if extra := hedged - plain; extra > 14 {
		t.Errorf("a hedged stream allocates %v times more than a plain one (%v), want at most 14", extra, plain)
	}
}
