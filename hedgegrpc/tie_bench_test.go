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

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgegrpc"
)

// BenchmarkUnaryTied is the cost of a unary call that hedge.Do races
// (a Delay, an hour long, so that the primary answers first), over
// bufconn to a server whose calls pass an Admission with a free slot.
// "plain" is the same call on a channel without the Interceptor;
// "untied" hedges with DisableTies; "tied" asks for the start signal
// and, the server signalling, runs its attempts as streams that watch
// their headers.
func BenchmarkUnaryTied(b *testing.B) {
	const target = "passthrough:///bench"
	hedged := func(untied bool) []grpc.DialOption {
		in, err := hedgegrpc.New(hedgegrpc.Config{
			Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
				MaxAttempts: 2, Delay: hedge.Fixed(time.Hour), NonFatalStatusCodes: unavailable,
			}},
			DisableTies: untied,
		})
		if err != nil {
			b.Fatal(err)
		}
		return in.DialOptions(target)
	}
	for _, bb := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"plain", nil},
		{"untied", hedged(true)},
		{"tied", hedged(false)},
	} {
		b.Run(bb.name, func(b *testing.B) {
			lis := bufconn.Listen(1 << 20)
			adm := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 64}}
			gs := grpc.NewServer(grpc.ChainUnaryInterceptor(adm.Unary))
			healthpb.RegisterHealthServer(gs, serving{})
			go gs.Serve(lis)
			conn, err := grpc.NewClient(target, append(bb.opts,
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
				grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				conn.Close()
				gs.Stop()
			})
			benchChecks(b, healthpb.NewHealthClient(conn))
		})
	}
}
