package hedgegrpc_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/hedgegrpc"
)

// serving answers every Check at once.
type serving struct {
	healthpb.UnimplementedHealthServer
}

func (serving) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Watch sends the status once and ends the stream.
func (serving) Watch(_ *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// benchClient dials a server that answers at once, over bufconn, with opts.
func benchClient(b *testing.B, opts ...grpc.DialOption) healthpb.HealthClient {
	lis := bufconn.Listen(1 << 20)
	opts = append(opts,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	return benchServe(b, lis, "passthrough:///bench", opts...)
}

// benchServe serves lis with a server that answers at once and dials
// target with insecure credentials and opts. Cleanup closes both.
func benchServe(b *testing.B, lis net.Listener, target string, opts ...grpc.DialOption) healthpb.HealthClient {
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, serving{})
	go gs.Serve(lis)
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		gs.Stop()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return healthpb.NewHealthClient(conn)
}

// benchHedged is the dial options of a channel to target that hedges
// Health's methods after a second, long after a call to a server that
// answers at once has returned: the calls measure the fast path.
func benchHedged(b *testing.B, target string, throttle *hedgegrpc.RetryThrottling) []grpc.DialOption {
	in, err := hedgegrpc.New(hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
			MaxAttempts: 2, HedgingDelay: time.Second, NonFatalStatusCodes: unavailable,
		}},
		RetryThrottling: throttle,
	})
	if err != nil {
		b.Fatal(err)
	}
	return in.DialOptions(target)
}

// benchChecks calls Check on client until the benchmark has its figures.
func benchChecks(b *testing.B, client healthpb.HealthClient) {
	ctx := context.Background()
	req := &healthpb.HealthCheckRequest{}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.Check(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// floorUnary is a unary interceptor that pays what every hedge of a
// unary call must on its fast path, and nothing of a hedge's own: a state
// of the call's (the attempt's header and trailer, its options, the cancel
// func); a cancellable context for the primary, which a hedge that wins
// cancels; a timer armed for the first hedge and stopped, whose func
// reaches that state; and the attempt's header, whose arrival commits a
// call that fails (A6), and trailer, which carries a pushback.
func floorUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c := &floorCall{}
	ctx, c.cancel = context.WithCancelCause(ctx)
	t := time.AfterFunc(time.Second, c.due)
	o := append(append(c.opts[:0], opts...), grpc.Header(&c.header), grpc.Trailer(&c.trailer))
	err := invoker(ctx, method, req, reply, cc, o...)
	t.Stop()
	c.cancel(nil)
	return err
}

// floorCall is floorUnary's state of one call. The attempt's options live
// in it, as a hedge's do, rather than in a slice of their own.
type floorCall struct {
	header, trailer metadata.MD
	cancel          context.CancelCauseFunc
	opts            [4]grpc.CallOption
}

// due is the timer's func: floorUnary never hedges, and the timer never
// fires before the call ends.
func (c *floorCall) due() { c.cancel(nil) }

// BenchmarkUnary is the cost of the unary fast path over bufconn: the
// primary answers long before the hedging delay. "plain" is the same call
// on a channel without the interceptor; "floor" is a plain call through an
// interceptor that pays what every hedge must (floorUnary); "throttled" adds the token bucket;
// "unhedged-throttled" is a call of a method no policy hedges on a
// throttled channel, which the bucket counts; "hedged-headers" adds
// CommitOnHeaders, whose stats handler makes grpc-go build the events of
// every call.
func BenchmarkUnary(b *testing.B) {
	const target = "passthrough:///bench"
	throttling := &hedgegrpc.RetryThrottling{MaxTokens: 10, TokenRatio: 0.1}
	unhedged, err := hedgegrpc.New(hedgegrpc.Config{
		Methods:         map[string]hedgegrpc.HedgingPolicy{"pkg.Other": {MaxAttempts: 2}},
		RetryThrottling: throttling,
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"plain", nil},
		{"floor", []grpc.DialOption{grpc.WithUnaryInterceptor(floorUnary)}},
		{"hedged", benchHedged(b, target, nil)},
		{"hedged-throttled", benchHedged(b, target, throttling)},
		{"unhedged-throttled", unhedged.DialOptions(target)},
		{"hedged-headers", append(benchHedged(b, target, nil), grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()))},
	} {
		b.Run(bb.name, func(b *testing.B) {
			benchChecks(b, benchClient(b, bb.opts...))
		})
	}
}

// BenchmarkUnaryTCP is BenchmarkUnary over a real TCP connection on
// 127.0.0.1, where the call's own cost includes the kernel's loopback and
// grpc-go's network reads and writes: the overhead the interceptor adds
// to a call as a service makes it. "plain" is the same call on a channel
// without the interceptor.
func BenchmarkUnaryTCP(b *testing.B) {
	for _, bb := range []struct {
		name   string
		hedged bool
	}{
		{"plain", false},
		{"hedged", true},
	} {
		b.Run(bb.name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			target := lis.Addr().String()
			var opts []grpc.DialOption
			if bb.hedged {
				opts = benchHedged(b, target, nil)
			}
			benchChecks(b, benchServe(b, lis, target, opts...))
		})
	}
}

// BenchmarkStream is the cost of a server-streaming call whose primary
// answers at once: the primary sends the request, of which the call keeps
// a copy for hedges, the call commits on the first message, and the
// stream ends. "plain" is the same call on a channel without the
// interceptors.
func BenchmarkStream(b *testing.B) {
	in, err := hedgegrpc.New(hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
			MaxAttempts: 2, HedgingDelay: time.Second, NonFatalStatusCodes: unavailable,
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"plain", nil},
		{"hedged", in.DialOptions("passthrough:///bench")},
	} {
		b.Run(bb.name, func(b *testing.B) {
			client := benchClient(b, bb.opts...)
			ctx := context.Background()
			req := &healthpb.HealthCheckRequest{}
			b.ReportAllocs()
			for b.Loop() {
				s, err := client.Watch(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Recv(); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Recv(); err != io.EOF {
					b.Fatal(err)
				}
			}
		})
	}
}
