package hedgegrpc_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tailcut/hedge/hedgegrpc"
)

// TestLargeRequestSentOnce: a unary request that does not fit the call's
// retry buffer is sent once, not hedged, as A6 says of such calls ("not
// retryable, but the original RPC will still be sent"); one that fits is
// hedged. The buffer holds grpc.MaxRetryRPCBufferSize bytes,
// DefaultMaxRetryRPCBufferSize without it, and a message takes its size
// and a 5-byte frame header. Every attempt of a hedged call starts at
// once, and answers after 10ms.
func TestLargeRequestSentOnce(t *testing.T) {
	big := strings.Repeat("x", 300<<10)
	// sized is a request of n bytes on the wire, frame header included:
	// its one string field takes a tag byte and a length of two bytes.
	sized := func(n int) string { return strings.Repeat("y", n-grpcFrameHeader-3) }
	tests := []struct {
		name    string
		service string
		opts    []grpc.CallOption
		want    int // attempts on the server
	}{
		{"300 KiB, the default limit", big, nil, 1},
		{"300 KiB, a limit of 512 KiB", big, []grpc.CallOption{grpc.MaxRetryRPCBufferSize(512 << 10)}, 3},
		{"a small request", "small", nil, 3},
		{"a small request, a limit of 10 bytes", "small", []grpc.CallOption{grpc.MaxRetryRPCBufferSize(10)}, 1},
		{"the limit to the byte", sized(1000), []grpc.CallOption{grpc.MaxRetryRPCBufferSize(1000)}, 3},
		{"a byte over the limit", sized(1001), []grpc.CallOption{grpc.MaxRetryRPCBufferSize(1000)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
					"grpc.health.v1.Health/Check": {MaxAttempts: 3, NonFatalStatusCodes: unavailable}}}
				p := newProbe(func(context.Context) error {
					time.Sleep(10 * ms)
					return nil
				})
				e := newProbeEnv(t, p, cfg, nil)
				if _, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: tt.service}, tt.opts...); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if diff := cmp.Diff(tt.want, p.attemptsOf(tt.service)); diff != "" {
					t.Errorf("attempts on the server (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// grpcFrameHeader is the gRPC frame header: a flag byte and a 4-byte
// length.
const grpcFrameHeader = 5
