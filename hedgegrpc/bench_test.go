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
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, serving{})
	go gs.Serve(lis)
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	conn, err := grpc.NewClient("passthrough:///bench", opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return healthpb.NewHealthClient(conn)
}

// BenchmarkUnary is the cost of the unary fast path: the primary answers
// long before the hedging delay. "plain" is the same call on a channel
// without the interceptor; "throttled" adds the token bucket.
func BenchmarkUnary(b *testing.B) {
	hedged := func(throttle *hedgegrpc.RetryThrottling) []grpc.DialOption {
		in, err := hedgegrpc.New(hedgegrpc.Config{
			Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
				MaxAttempts: 2, HedgingDelay: time.Second, NonFatalStatusCodes: unavailable,
			}},
			RetryThrottling: throttle,
		})
		if err != nil {
			b.Fatal(err)
		}
		return in.DialOptions("passthrough:///bench")
	}
	for _, bb := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"plain", nil},
		{"hedged", hedged(nil)},
		{"hedged-throttled", hedged(&hedgegrpc.RetryThrottling{MaxTokens: 10, TokenRatio: 0.1})},
	} {
		b.Run(bb.name, func(b *testing.B) {
			client := benchClient(b, bb.opts...)
			ctx := context.Background()
			req := &healthpb.HealthCheckRequest{}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStream is the cost of a server-streaming call whose primary
// answers at once: the request is buffered and replayed, the call
// commits on the first message, and the stream ends. "plain" is the same
// call on a channel without the interceptors.
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
