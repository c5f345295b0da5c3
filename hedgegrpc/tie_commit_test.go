package hedgegrpc_test

// A start signal against a commit on headers (CommitOnHeaders), over
// real gRPC servers on bufconn in a synctest bubble. The handlers, a
// stream interceptor and a stats handler wait on each other with
// channels, so no outcome depends on timing.

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgegrpc"
)

// The primary queues at a busy replica behind an Admission; the hedge
// reaches a replica without one, which sends its headers, and so commits
// the call, once the primary's start signal has reached the client but
// before the client has reported that start. The signal comes too late
// to tie anything: the call is the hedge's, as A6 has it, and returns the
// hedge's answer. Before, the start tied the hedge, whose answer hedge.Do
// then dropped, while the commit had cancelled the primary: the call
// failed with the primary's CANCELLED.
func TestStartAfterCommit(t *testing.T) {
	for _, kind := range unaryKinds {
		t.Run(kind.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testStartAfterCommit(t, kind.fixed) })
		})
	}
}

func testStartAfterCommit(t *testing.T, fixed bool) {
	holdBusy := make(chan struct{})
	releaseBusy := sync.OnceFunc(func() { close(holdBusy) })
	defer releaseBusy()
	busy := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 1}}
	free := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 4}}
	heard := make(chan struct{})     // the client has the primary's start signal
	committed := make(chan struct{}) // the client has the hedge's headers, and committed to it
	receiving := make(chan struct{}) // the primary's attempt has reported its start, if it does, and waits for its answer
	commit := &commitSeen{seen: committed}

	svc := &guarded{
		check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
			if l := labelOf(ctx); l != "c" {
				if l == "warm hedged" && k == "0" {
					<-ctx.Done() // the warm-up's hedge answers, with the signal
					return nil, status.FromContextError(ctx.Err()).Err()
				}
				return &healthpb.HealthCheckResponse{}, nil
			}
			if k == "0" {
				<-ctx.Done() // the primary runs until it loses
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			// The hedge, at the replica without Admission: the busy replica
			// admits the primary, whose signal reaches the client; then
			// this replica's headers do, and its answer once the primary's
			// attempt has dealt with its signal.
			releaseBusy()
			<-heard
			if err := grpc.SendHeader(ctx, metadata.Pairs("replica", "free")); err != nil {
				return nil, err
			}
			select {
			case <-receiving:
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return &healthpb.HealthCheckResponse{Status: servingOf(k)}, nil
		},
		watch: func(ss healthpb.Health_WatchServer, _ string) error {
			<-holdBusy // the blocker
			return nil
		},
	}
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			switch labelOf(ctx) {
			case "c":
				if attemptIn(ctx) != "0" {
					return h(ctx, req) // the replica without Admission
				}
				return busy.Unary(ctx, req, info, h)
			}
			return free.Unary(ctx, req, info, h)
		}),
		grpc.ChainStreamInterceptor(busy.Stream),
	)
	lis := bufconn.Listen(1 << 16)
	in, err := hedgegrpc.New(tied("Check", 2, nil, fixed))
	if err != nil {
		t.Fatal(err)
	}
	target := "passthrough:///bufconn"
	conn := serveHealth(t, gs, svc, lis, target, append(in.DialOptions(target),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()),
		grpc.WithStatsHandler(commit), // after CommitOnHeaders: it has committed when this hears the headers
		grpc.WithChainStreamInterceptor(holdPrimary(heard, committed, receiving)))...)
	client := healthpb.NewHealthClient(conn)

	// A call whose server signals makes the method's later calls watch
	// their headers (for a hedgingDelay, a hedge's answer must carry it).
	warm := "warm"
	if fixed {
		warm = "warm hedged"
	}
	if _, err := client.Check(withLabel(context.Background(), warm), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		w, err := client.Watch(withLabel(context.Background(), "blocker"), &healthpb.HealthCheckRequest{})
		if err == nil {
			w.Recv()
		}
	}()
	synctest.Wait() // the blocker holds the busy replica

	resp, err := client.Check(withLabel(context.Background(), "c"), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check = %v, %v; want the hedge's NOT_SERVING", resp, err)
	}
}

// holdPrimary is a stream interceptor that holds call c's primary, made
// as a stream since the method's servers signal, between its start
// signal and the attempt's report of it: it closes heard once the signal
// is in, and returns it only once the call has committed to the hedge
// (committed). It closes receiving as the attempt asks for its answer.
func holdPrimary(heard chan struct{}, committed <-chan struct{}, receiving chan struct{}) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		md, _ := metadata.FromOutgoingContext(ctx)
		if err != nil || firstOf(md.Get("call")) != "c" || len(md.Get("grpc-previous-rpc-attempts")) > 0 {
			return cs, err
		}
		return &heldPrimary{ClientStream: cs, heard: heard, committed: committed,
			receiving: sync.OnceFunc(func() { close(receiving) })}, nil
	}
}

type heldPrimary struct {
	grpc.ClientStream
	heard     chan struct{}
	committed <-chan struct{}
	receiving func()
}

func (s *heldPrimary) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if len(md.Get(hedgegrpc.StartedKey)) > 0 {
		close(s.heard)
		<-s.committed
	}
	return md, err
}

func (s *heldPrimary) RecvMsg(m any) error {
	s.receiving()
	return s.ClientStream.RecvMsg(m)
}

// commitSeen is a client stats.Handler that closes seen when the free
// replica's headers reach the client.
type commitSeen struct{ seen chan struct{} }

func (h *commitSeen) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h *commitSeen) HandleRPC(_ context.Context, rs stats.RPCStats) {
	if in, ok := rs.(*stats.InHeader); ok && in.Client && len(in.Header.Get("replica")) > 0 {
		close(h.seen)
	}
}

func (h *commitSeen) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *commitSeen) HandleConn(context.Context, stats.ConnStats) {}
