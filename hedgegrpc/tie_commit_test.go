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
	eachUnaryKind(t, testStartAfterCommit)
}

func testStartAfterCommit(t *testing.T, fixed bool) {
	heard := make(chan struct{})     // the client has the primary's start signal
	committed := make(chan struct{}) // the client has the hedge's headers, and committed to it
	receiving := make(chan struct{}) // the primary's attempt has dealt with its signal, and waits for its answer
	env := startCommitReplicas(t, fixed,
		func(ctx context.Context, release func()) (*healthpb.HealthCheckResponse, error) {
			// The busy replica admits the primary, whose signal reaches
			// the client; then this replica's headers do, and its answer
			// once the primary's attempt has dealt with its signal.
			release()
			<-heard
			if err := grpc.SendHeader(ctx, metadata.Pairs("replica", "free")); err != nil {
				return nil, err
			}
			select {
			case <-receiving:
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
		},
		nil, // the primary runs until it loses
		holdPrimary(heard, committed, receiving),
		grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()),
		grpc.WithStatsHandler(&headersSeen{seen: committed})) // after CommitOnHeaders: it has committed when this hears the headers
	resp, err := env.Check(withLabel(context.Background(), "c"), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check = %v, %v; want the hedge's NOT_SERVING", resp, err)
	}
}

// The same replicas, the other way round: the primary's start ties the
// hedge, whose headers were on their way and reach CommitOnHeaders only
// then. A tied attempt is out of the race: its headers commit nothing,
// and the call goes on with the primary, which answers it. Before, they
// committed the call to the hedge, which cancelled the primary, while
// hedge.Do dropped the hedge: the call failed with the primary's
// CANCELLED.
func TestHeadersAfterTie(t *testing.T) {
	eachUnaryKind(t, testHeadersAfterTie)
}

func testHeadersAfterTie(t *testing.T, fixed bool) {
	heard := make(chan struct{})     // the client has the primary's start signal
	held := make(chan struct{})      // the client has the hedge's headers, held from CommitOnHeaders
	receiving := make(chan struct{}) // the primary's attempt has reported its start, and waits for its answer
	hedgeLeft := make(chan struct{}) // the hedge has left its replica
	env := startCommitReplicas(t, fixed,
		func(ctx context.Context, release func()) (*healthpb.HealthCheckResponse, error) {
			defer close(hedgeLeft)
			release()
			<-heard
			if err := grpc.SendHeader(ctx, metadata.Pairs("replica", "free")); err != nil {
				return nil, err
			}
			<-ctx.Done() // tied
			return nil, status.FromContextError(ctx.Err()).Err()
		},
		func(ctx context.Context) (*healthpb.HealthCheckResponse, error) {
			// The primary answers once the tied hedge has left: the call
			// has done with its headers by then.
			select {
			case <-hedgeLeft:
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
		},
		holdPrimary(heard, held, receiving),
		// Before CommitOnHeaders: it hears the hedge's headers only once
		// the primary's attempt has reported its start.
		grpc.WithStatsHandler(&headersSeen{seen: held, hold: receiving}),
		grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()))
	resp, err := env.Check(withLabel(context.Background(), "c"), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check = %v, %v; want the primary's SERVING", resp, err)
	}
}

// startCommitReplicas serves a health service over bufconn, in a
// synctest bubble, and dials it with an Interceptor that hedges Check
// (tied: by a Delay, or fixed, by a hedgingDelay), primary and the
// other dial options, and returns its client once the method's calls
// watch their headers and a blocker holds the busy replica. Call "c"'s
// primary waits at the busy replica's Admission, and runs primary there
// (nil: until it is cancelled); its hedge reaches a replica without
// Admission, which runs second, with release, which lets the blocker go.
func startCommitReplicas(t *testing.T, fixed bool, second func(ctx context.Context, release func()) (*healthpb.HealthCheckResponse, error),
	primary func(context.Context) (*healthpb.HealthCheckResponse, error), primaryStream grpc.StreamClientInterceptor, dial ...grpc.DialOption) healthpb.HealthClient {
	holdBusy := make(chan struct{})
	release := sync.OnceFunc(func() { close(holdBusy) })
	t.Cleanup(release)
	busy := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 1}}
	free := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 4}}
	svc := &guarded{
		check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
			switch l := labelOf(ctx); {
			case l == "c" && k != "0":
				// Every goroutine of the call waits first: for a
				// hedgingDelay, hedge.Do's attempt 0 follows the primary, so
				// that it reports the primary's start as it comes.
				synctest.Wait()
				return second(ctx, release)
			case l == "c" && primary != nil:
				return primary(ctx)
			case l == "c", l == "warm hedged" && k == "0":
				<-ctx.Done() // the warm-up's hedge answers, with the signal
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return &healthpb.HealthCheckResponse{}, nil
		},
		watch: func(healthpb.Health_WatchServer, string) error {
			<-holdBusy // the blocker
			return nil
		},
	}
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			switch {
			case labelOf(ctx) != "c":
				return free.Unary(ctx, req, info, h)
			case attemptIn(ctx) != "0":
				return h(ctx, req) // the replica without Admission
			}
			return busy.Unary(ctx, req, info, h)
		}),
		grpc.ChainStreamInterceptor(busy.Stream),
	)
	lis := bufconn.Listen(1 << 16)
	in, err := hedgegrpc.New(tied("Check", 2, nil, fixed))
	if err != nil {
		t.Fatal(err)
	}
	target := "passthrough:///bufconn"
	conn := serveHealth(t, gs, svc, lis, target, append(append(in.DialOptions(target),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithChainStreamInterceptor(primaryStream)), dial...)...)
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
	return client
}

// holdPrimary is a stream interceptor that holds call c's primary, made
// as a stream since the method's servers signal, between its start
// signal and the attempt's report of it: it closes heard once the signal
// is in, and returns it only once the hedge's headers have reached the
// client (hedged). It closes receiving as the attempt asks for its
// answer, which it does once it has reported its start.
func holdPrimary(heard chan struct{}, hedged <-chan struct{}, receiving chan struct{}) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		md, _ := metadata.FromOutgoingContext(ctx)
		if err != nil || firstOf(md.Get("call")) != "c" || len(md.Get("grpc-previous-rpc-attempts")) > 0 {
			return cs, err
		}
		return &heldPrimary{ClientStream: cs, heard: heard, hedged: hedged,
			receiving: sync.OnceFunc(func() { close(receiving) })}, nil
	}
}

type heldPrimary struct {
	grpc.ClientStream
	heard     chan struct{}
	hedged    <-chan struct{}
	receiving func()
}

func (s *heldPrimary) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if len(md.Get(hedgegrpc.StartedKey)) > 0 {
		close(s.heard)
		<-s.hedged
	}
	return md, err
}

func (s *heldPrimary) RecvMsg(m any) error {
	s.receiving()
	return s.ClientStream.RecvMsg(m)
}

// headersSeen is a client stats.Handler that closes seen when the
// free replica's headers reach the client, and then, if hold is set,
// holds them from the handlers after it until hold is closed. It holds
// the connection's reader meanwhile.
type headersSeen struct {
	seen chan struct{}
	hold <-chan struct{}
}

func (h *headersSeen) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h *headersSeen) HandleRPC(_ context.Context, rs stats.RPCStats) {
	if in, ok := rs.(*stats.InHeader); ok && in.Client && len(in.Header.Get("replica")) > 0 {
		close(h.seen)
		if h.hold != nil {
			<-h.hold
		}
	}
}

func (h *headersSeen) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *headersSeen) HandleConn(context.Context, stats.ConnStats) {}
