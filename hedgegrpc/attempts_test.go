package hedgegrpc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tailcut/hedge/hedgegrpc"
)

const check = "/grpc.health.v1.Health/Check"

// hedgeAll hedges every method: attempts at 0 and 100ms, up to three.
var hedgeAll = hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
	"": {MaxAttempts: 3, HedgingDelay: 100 * ms, NonFatalStatusCodes: unavailable},
}}

// TestOwnReplies: every attempt decodes into a reply of its own, and only
// the winner's reaches the caller's reply, which is reset first as a
// plain gRPC call resets it. Three attempts answer at the same instant,
// many times over, so that -race sees any sharing.
func TestOwnReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
			"": {MaxAttempts: 3, NonFatalStatusCodes: unavailable}, // all at once
		}}
		e := newEnv(t, cfg, map[string][]step{
			"race":  {ok(10 * ms), ok(10 * ms), ok(10 * ms)},
			"blank": {{after: 10 * ms, blank: true}, hang(), hang()},
		})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 10 {
					reply := &healthpb.HealthCheckResponse{}
					var trailer metadata.MD
					err := e.conn.Invoke(context.Background(), check, &healthpb.HealthCheckRequest{Service: "race"}, reply, grpc.Trailer(&trailer))
					if err != nil {
						t.Error(err)
						return
					}
					if got, want := reply.GetStatus().String(), statusOfTrailer(trailer); got != want {
						t.Errorf("reply %s from the attempt whose trailer says it answered %s", got, want)
					}
				}
			})
		}
		wg.Wait()

		// The winner's reply is empty: what the caller's held before must go.
		reply := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
		if err := e.conn.Invoke(context.Background(), check, &healthpb.HealthCheckRequest{Service: "blank"}, reply); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(reply, &healthpb.HealthCheckResponse{}) {
			t.Errorf("reply = %v, want the winner's, empty", reply)
		}
	})
}

// statusOfTrailer is the reply the attempt named in trailer gives.
func statusOfTrailer(trailer metadata.MD) string {
	v := trailer.Get("attempt")
	if len(v) != 1 || len(v[0]) != 1 {
		return "trailer " + v[0]
	}
	return statusOf(int(v[0][0] - '0')).String()
}

// TestCallOptions: grpc.Header, grpc.Trailer and grpc.Peer receive the
// returned attempt's, not whichever attempt wrote last, and OnFinish runs
// once, with the call's result.
func TestCallOptions(t *testing.T) {
	type seen struct {
		Code     codes.Code
		Header   []string
		Trailer  []string
		HasPeer  bool
		Finished []codes.Code
	}
	tests := []struct {
		name  string
		steps []step
		want  seen
	}{{
		name:  "the primary wins",
		steps: []step{ok(10 * ms)},
		want:  seen{Header: []string{"0"}, Trailer: []string{"0"}, HasPeer: true, Finished: []codes.Code{codes.OK}},
	}, {
		name:  "a retry after the primary failed",
		steps: []step{fail(10*ms, codes.Unavailable), ok(10 * ms)},
		want:  seen{Header: []string{"1"}, Trailer: []string{"1"}, HasPeer: true, Finished: []codes.Code{codes.OK}},
	}, {
		name:  "the hedge wins",
		steps: []step{hang(), ok(10 * ms), hang()},
		want:  seen{Header: []string{"1"}, Trailer: []string{"1"}, HasPeer: true, Finished: []codes.Code{codes.OK}},
	}, {
		name:  "a fatal failure after headers",
		steps: []step{hang(), {after: 10 * ms, code: codes.PermissionDenied, header: true}, hang()},
		want: seen{Code: codes.PermissionDenied, Header: []string{"1"}, Trailer: []string{"1"}, HasPeer: true,
			Finished: []codes.Code{codes.PermissionDenied}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, hedgeAll, map[string][]step{"c": tt.steps})
				var header, trailer metadata.MD
				var p peer.Peer
				var got seen
				_, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "c"},
					grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p),
					grpc.OnFinish(func(err error) { got.Finished = append(got.Finished, status.Code(err)) }))
				got.Code, got.Header, got.Trailer, got.HasPeer = status.Code(err), header.Get("attempt"), trailer.Get("attempt"), p.Addr != nil
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// TestPreviousAttempts: the first attempt carries no
// grpc-previous-rpc-attempts, even when the caller's outgoing metadata
// holds a stale one (a proxy forwarding what it received); hedge k
// carries k; the caller's other metadata reaches every attempt.
func TestPreviousAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, hedgeAll, map[string][]step{"c": {hang(), hang(), ok(10 * ms)}})
		ctx := metadata.NewOutgoingContext(context.Background(),
			metadata.Pairs("grpc-previous-rpc-attempts", "7", "x-tenant", "t1"))
		got := e.run(ctx, "c")
		want := []event{
			{Call: "c", Start: 0, End: 210 * ms, Canceled: true, Tenant: "t1"},
			{Call: "c", Attempt: 1, Previous: "1", Start: 100 * ms, End: 210 * ms, Canceled: true, Tenant: "t1"},
			{Call: "c", Attempt: 2, Previous: "2", Start: 200 * ms, End: 210 * ms, Tenant: "t1"},
		}
		if diff := cmp.Diff(want, got.Events); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}

// TestPassThrough: a method without a policy, unary or streaming, goes
// out once, untouched.
func TestPassThrough(t *testing.T) {
	t.Run("method without a policy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
				"pkg.Other": {MaxAttempts: 3, NonFatalStatusCodes: unavailable},
			}}
			e := newEnv(t, cfg, map[string][]step{"c": {fail(ms, codes.Unavailable), ok(0)}})
			got := e.run(context.Background(), "c")
			want := result{Code: codes.Unavailable, Message: "c attempt 0", Trailer: []string{"0"}, At: ms,
				Events: []event{{Call: "c", End: ms}}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	})
	t.Run("server streaming without a policy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
				"grpc.health.v1.Health/Check": {MaxAttempts: 3, NonFatalStatusCodes: unavailable},
			}}, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := e.client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "w"})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("Recv = %v, %v; want SERVING", resp, err)
			}
			cancel()
			synctest.Wait()
			if diff := cmp.Diff([]event{{Call: "watch w"}}, e.srv.seenEvents()); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	})
	t.Run("reply that is not a proto message", func(t *testing.T) {
		in, err := hedgegrpc.New(hedgeAll)
		if err != nil {
			t.Fatal(err)
		}
		type custom struct{ Name string } // a codec of its own would fill it
		reply := &custom{}
		errDown := errors.New("down")
		calls := 0
		invoker := func(ctx context.Context, method string, req, r any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			calls++
			if r != reply {
				t.Errorf("invoker got reply %p, want the caller's %p", r, reply)
			}
			return errDown
		}
		if err := in.Unary(context.Background(), check, "req", reply, nil, invoker); !errors.Is(err, errDown) || calls != 1 {
			t.Errorf("Unary = %v after %d calls; want %v after 1", err, calls, errDown)
		}
	})
}
