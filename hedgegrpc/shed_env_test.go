package hedgegrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/hedgegrpc"
)

// guarded is a health service whose Check and Watch run the test's
// functions, with the attempt number from grpc-previous-rpc-attempts
// ("0" when absent).
type guarded struct {
	healthpb.UnimplementedHealthServer
	check func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error)
	watch func(stream healthpb.Health_WatchServer, k string) error
}

func attemptIn(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts"); len(v) > 0 {
		return v[0]
	}
	return "0"
}

func (g *guarded) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return g.check(ctx, attemptIn(ctx))
}

func (g *guarded) Watch(_ *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	return g.watch(stream, attemptIn(stream.Context()))
}

// tried is what a client saw of one attempt: its number, when it was
// sent (virtual time since the test began, in a bubble), and its code and
// grpc-retry-pushback-ms.
type tried struct {
	Attempt  string
	At       time.Duration
	Code     codes.Code
	Pushback string
}

// tries records each attempt a hedging Interceptor sends, as an
// interceptor chained after it, and reports each answer on answered, if
// set. If hold is set, hedges wait for it before they are sent.
type tries struct {
	t0       time.Time
	hold     <-chan struct{}
	answered chan tried

	mu  sync.Mutex
	log []tried
}

func (r *tries) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	a := tried{Attempt: "0"}
	if v := metadata.ValueFromOutgoingContext(ctx, "grpc-previous-rpc-attempts"); len(v) > 0 {
		a.Attempt = v[0]
	}
	if r.hold != nil && a.Attempt != "0" {
		select {
		case <-r.hold:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	a.At = time.Since(r.t0)
	var trailer metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
	a.Code = status.Code(err)
	if v := trailer.Get("grpc-retry-pushback-ms"); len(v) > 0 {
		a.Pushback = v[0]
	}
	r.mu.Lock()
	r.log = append(r.log, a)
	r.mu.Unlock()
	if r.answered != nil {
		r.answered <- a
	}
	return err
}

func (r *tries) sent() []tried {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]tried(nil), r.log...)
}

// shedEnv is a guarded service behind a Shedder on a real gRPC server,
// and a client channel to it hedged by an Interceptor, whose attempts
// tries records.
type shedEnv struct {
	shed   *hedgegrpc.Shedder
	tries  *tries
	client healthpb.HealthClient
	conn   *grpc.ClientConn
	// exited receives the attempt number of every call once the
	// Shedder's interceptor has returned; a panic in the service becomes
	// codes.Internal there.
	exited chan string
}

func startShed(t *testing.T, shed *hedgegrpc.Shedder, svc *guarded, cfg hedgegrpc.Config, lis net.Listener, target string, dial ...grpc.DialOption) *shedEnv {
	t.Helper()
	in, err := hedgegrpc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &shedEnv{shed: shed, tries: &tries{t0: time.Now()}, exited: make(chan string, 16)}
	exits := func(ctx context.Context, err *error) {
		if p := recover(); p != nil {
			*err = status.Errorf(codes.Internal, "panic: %v", p)
		}
		e.exited <- attemptIn(ctx)
	}
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (_ any, err error) {
			defer exits(ctx, &err)
			return h(ctx, req)
		}, shed.Unary),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
			defer exits(ss.Context(), &err)
			return h(srv, ss)
		}, shed.Stream),
	)
	dial = append(dial, in.DialOptions(target)...)
	e.conn = serveHealth(t, gs, svc, lis, target, append(dial, grpc.WithChainUnaryInterceptor(e.tries.unary))...)
	e.client = healthpb.NewHealthClient(e.conn)
	return e
}

// serveHealth serves svc on lis with gs and dials target without
// credentials; the test's cleanup closes the connection and stops gs.
func serveHealth(t *testing.T, gs *grpc.Server, svc healthpb.HealthServer, lis net.Listener, target string, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	healthpb.RegisterHealthServer(gs, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		gs.Serve(lis)
	}()
	conn, err := grpc.NewClient(target, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
	})
	return conn
}

func startShedTCP(t *testing.T, shed *hedgegrpc.Shedder, svc *guarded, cfg hedgegrpc.Config) *shedEnv {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startShed(t, shed, svc, cfg, lis, lis.Addr().String())
}

// startShedPipe serves over bufconn, which a synctest bubble runs in
// virtual time.
func startShedPipe(t *testing.T, shed *hedgegrpc.Shedder, svc *guarded, cfg hedgegrpc.Config) *shedEnv {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	return startShed(t, shed, svc, cfg, lis, "passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
}

// awaitExit waits for n calls to leave the Shedder. The timeout only
// keeps a broken test from hanging; it orders nothing.
func (e *shedEnv) awaitExit(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case k := <-e.exited:
			got = append(got, k)
		case <-timeout:
			t.Fatalf("%d calls left the Shedder, want %d", len(got), n)
		}
	}
	return got
}

// hedging is a policy for Check: a hedge after 1 ms, with nonFatal as
// the non-fatal codes. One hedge only: in real time, a second might be
// sent before the first one's pushback has come back, which only a
// virtual clock can rule out (TestShedderInVirtualTime does).
func hedging(nonFatal ...codes.Code) hedgegrpc.Config {
	return hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
		"grpc.health.v1.Health/Check": {MaxAttempts: 2, HedgingDelay: ms, NonFatalStatusCodes: nonFatal},
	}}
}

// await returns what ch yields. The timeout only keeps a broken test from
// hanging; it orders nothing.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

var ignoreTriedAt = cmpopts.IgnoreFields(tried{}, "At")
