package hedgegrpc_test

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/hedgegrpc"
)

// TestUnaryHeadersCommit: a unary attempt whose failure comes after the
// server sent response headers was committed to (A6): its failure ends
// the call, whatever its code, and cancels the other attempts, as
// grpc-go's own retries stop at such a failure. A failure without headers
// (trailers only) is hedged as before. Without CommitOnHeaders, a unary
// call learns of headers only with its answer (see Interceptor.Unary): a
// primary that sends its headers at once and its answer late is still
// hedged, and loses to a hedge that answers first.
func TestUnaryHeadersCommit(t *testing.T) {
	const d = 50 * ms
	policy := hedgegrpc.HedgingPolicy{MaxAttempts: 3, HedgingDelay: d, NonFatalStatusCodes: unavailable}
	const c = "c"
	tests := []struct {
		name  string
		steps []step
		want  result
	}{{
		name:  "an UNAVAILABLE after headers is not hedged again",
		steps: []step{{after: 10 * ms, code: codes.Unavailable, header: true}, ok(0), ok(0)},
		want: result{Code: codes.Unavailable, Message: "c attempt 0", Trailer: []string{"0"}, At: 10 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms},
		}},
	}, {
		name:  "a hedge's UNAVAILABLE after headers ends the call and cancels the primary",
		steps: []step{hang(), {after: 10 * ms, code: codes.Unavailable, header: true}, ok(0)},
		want: result{Code: codes.Unavailable, Message: "c attempt 1", Trailer: []string{"1"}, At: d + 10*ms, Events: []event{
			{Call: c, Start: 0, End: d + 10*ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: d + 10*ms},
		}},
	}, {
		name:  "an UNAVAILABLE with trailers only starts the next attempt at once",
		steps: []step{fail(10*ms, codes.Unavailable), ok(0), ok(0)},
		want: result{Status: statusOf(1), Trailer: []string{"1"}, At: 10 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: 10 * ms, End: 10 * ms},
		}},
	}, {
		name:  "headers at once and the answer late: the hedge still goes out, and wins",
		steps: []step{{after: 300 * ms, header: true}, ok(10 * ms), ok(0)},
		want: result{Status: statusOf(1), Trailer: []string{"1"}, At: d + 10*ms, Events: []event{
			{Call: c, Start: 0, End: d + 10*ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: d + 10*ms},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": policy}}
				e := newEnv(t, cfg, map[string][]step{c: tt.steps})
				if diff := cmp.Diff(tt.want, e.run(context.Background(), c)); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// TestUnaryHeadersCommitCounts: a failure after headers ends the call,
// and yet counts in the token bucket by its code, as a committed
// stream's end does: two such UNAVAILABLEs take a bucket of 4 to its
// threshold, and the next slow call is not hedged.
func TestUnaryHeadersCommitCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &reports{}
		cfg := hedgegrpc.Config{
			Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": {
				MaxAttempts: 2, HedgingDelay: 100 * ms, NonFatalStatusCodes: unavailable}},
			RetryThrottling: &hedgegrpc.RetryThrottling{MaxTokens: 4, TokenRatio: 1},
			Observer:        obs,
		}
		e := newEnv(t, cfg, map[string][]step{
			"committed": {{code: codes.Unavailable, header: true}},
			"slow":      {ok(500 * ms), ok(10 * ms)},
		})
		want := []call{
			{Name: "committed", Code: codes.Unavailable, Attempts: 1}, // 4 → 3
			{Name: "committed", Code: codes.Unavailable, Attempts: 1}, // 3 → 2
			{Name: "slow", Attempts: 1, Refused: 1},                   // at the threshold: no hedge
		}
		if diff := cmp.Diff(want, runCalls(t, e, obs, "committed", "committed", "slow")); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}

// TestCommitOnHeaders: with CommitOnHeaders on the channel, a unary call
// commits to the first attempt whose response headers arrive, as A6
// says: no hedge starts after, the attempts in flight are cancelled at
// once, and the committed attempt's answer ends the call, whatever it is.
// A trailers-only failure commits nothing.
func TestCommitOnHeaders(t *testing.T) {
	const d = 50 * ms
	policy := hedgegrpc.HedgingPolicy{MaxAttempts: 3, HedgingDelay: d, NonFatalStatusCodes: unavailable}
	const c = "c"
	tests := []struct {
		name  string
		steps []step
		want  result
	}{{
		name:  "headers at once, the answer at 300ms: no hedge",
		steps: []step{{header: true, after: 300 * ms}, ok(0), ok(0)},
		want: result{Status: statusOf(0), Trailer: []string{"0"}, At: 300 * ms, Events: []event{
			{Call: c, Start: 0, End: 300 * ms},
		}},
	}, {
		name:  "the primary's headers cancel a hedge in flight, which would have answered first",
		steps: []step{{header: true, headerAfter: 60 * ms, after: 240 * ms}, ok(50 * ms), ok(0)},
		want: result{Status: statusOf(0), Trailer: []string{"0"}, At: 300 * ms, Events: []event{
			{Call: c, Start: 0, End: 300 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: 60 * ms, Canceled: true},
		}},
	}, {
		name:  "a hedge's headers cancel the primary and hold back the next hedge",
		steps: []step{hang(), {header: true, after: 250 * ms}, ok(0)},
		want: result{Status: statusOf(1), Trailer: []string{"1"}, At: 300 * ms, Events: []event{
			{Call: c, Start: 0, End: d, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: 300 * ms},
		}},
	}, {
		name:  "an UNAVAILABLE after headers ends the call",
		steps: []step{{header: true, after: 100 * ms, code: codes.Unavailable}, ok(0), ok(0)},
		want: result{Code: codes.Unavailable, Message: "c attempt 0", Trailer: []string{"0"}, At: 100 * ms, Events: []event{
			{Call: c, Start: 0, End: 100 * ms},
		}},
	}, {
		name:  "an UNAVAILABLE with trailers only commits nothing",
		steps: []step{fail(10*ms, codes.Unavailable), ok(0), ok(0)},
		want: result{Status: statusOf(1), Trailer: []string{"1"}, At: 10 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: 10 * ms, End: 10 * ms},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": policy}}
				lis := bufconn.Listen(1 << 16)
				e := start(t, cfg, map[string][]step{c: tt.steps}, lis, "passthrough:///bufconn",
					grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
					grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()))
				if diff := cmp.Diff(tt.want, e.run(context.Background(), c)); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// TestCommitOnHeadersOnlyByTheAttempt: an RPC of another method that an
// interceptor after the Interceptor's makes with an attempt's context
// (fetching a token, say) has headers of its own, which commit nothing:
// the slow primary is still hedged, and the hedge wins.
func TestCommitOnHeadersOnlyByTheAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe(func(ctx context.Context) error {
			if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) == 0 {
				<-ctx.Done() // the primary stalls
				return status.FromContextError(ctx.Err()).Err()
			}
			return nil
		})
		p.acts = map[string]func(context.Context) error{"token": nil}
		var conn *grpc.ClientConn
		nested := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == check {
				w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "token"})
				if err == nil {
					_, err = w.Recv()
				}
				if err != nil {
					return err
				}
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{check: {MaxAttempts: 2, HedgingDelay: 50 * ms}}}
		e := newProbeEnv(t, p, cfg, nil, grpc.WithChainUnaryInterceptor(nested), grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()))
		conn = e.conn
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		got := e.call(ctx, "Check", "c")
		if diff := cmp.Diff(outcome{Code: codes.OK, At: 50 * ms, Attempts: 2}, got); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}
