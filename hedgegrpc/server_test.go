package hedgegrpc_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// step scripts what the server does for one attempt of a call.
type step struct {
	after    time.Duration // how long the handler takes
	hang     bool          // wait until the client cancels instead
	code     codes.Code    // the answer: OK, or a failure
	pushback string        // grpc-retry-pushback-ms in the trailer, if set
	blank    bool          // answer an empty reply, not ServingStatus(attempt+1)
	// header sends the header before the answer, whatever it is, after
	// headerAfter: a failure then comes after headers, not as a
	// trailers-only response. The answer comes after that, and after.
	header      bool
	headerAfter time.Duration
	// awaitPrimary makes the handler first wait until the handler of the
	// same call's attempt 0 has started: a test over TCP orders attempts
	// with it instead of with time.
	awaitPrimary bool
	// awaitAll makes it wait for the handlers of every other attempt the
	// call's script has: an attempt that ends the call can then never
	// cancel another before that one reached the server, however late
	// the machine's load lets it be sent.
	awaitAll bool
}

// awaited lists the attempts whose handlers must have started before
// attempt k's handler goes on, in a call whose script has n attempts.
func (st step) awaited(k, n int) []int {
	var ks []int
	for j := range n {
		if j != k && (st.awaitAll || st.awaitPrimary && j == 0) {
			ks = append(ks, j)
		}
	}
	return ks
}

// event is what the server saw of one attempt. Times are since the
// server started, which inside a synctest bubble are exact virtual times.
type event struct {
	Call     string // the request's Service field: the scenario
	Attempt  int    // from grpc-previous-rpc-attempts; 0 when absent
	Previous string // grpc-previous-rpc-attempts as received, "" when absent
	Start    time.Duration
	End      time.Duration
	Canceled bool   // the handler saw its context cancelled
	Tenant   string // the x-tenant metadata, which every attempt must carry
	Backend  string // the address that served it, when the server records it
}

// server is a grpc_health_v1 Health service whose Check follows a script
// per call (keyed by the request's Service field) and per attempt, and
// answers each attempt with ServingStatus(attempt+1), a header (on OK
// answers) and a trailer "attempt" naming it, so that a client can tell whose reply it
// got.
type server struct {
	healthpb.UnimplementedHealthServer
	t0      time.Time
	scripts map[string][]step
	// backends makes events say which address served them: one server
	// behind several listeners stands for several backends whose
	// scripts see each other's attempts.
	backends bool

	mu      sync.Mutex
	events  []event
	changed chan struct{}            // closed and replaced when an event is added
	seen    map[string]chan struct{} // closed when call/attempt has started
}

func newServer(scripts map[string][]step) *server {
	return &server{t0: time.Now(), scripts: scripts, changed: make(chan struct{}), seen: map[string]chan struct{}{}}
}

// statusOf is the reply attempt k gives.
func statusOf(k int) healthpb.HealthCheckResponse_ServingStatus {
	return healthpb.HealthCheckResponse_ServingStatus(k%3 + 1)
}

func (s *server) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	call, _, _ := strings.Cut(req.GetService(), "#") // what follows # only varies the request
	e := event{Call: call, Start: time.Since(s.t0)}
	if v := md.Get("x-tenant"); len(v) > 0 {
		e.Tenant = v[0]
	}
	if p, ok := peer.FromContext(ctx); ok && s.backends && p.LocalAddr != nil {
		e.Backend = p.LocalAddr.String()
	}
	if v := md.Get("grpc-previous-rpc-attempts"); len(v) > 0 {
		e.Previous = v[0]
		e.Attempt, _ = strconv.Atoi(v[0])
	}
	s.markStarted(e.Call, e.Attempt)
	script := s.scripts[e.Call]
	if e.Attempt >= len(script) {
		return nil, status.Errorf(codes.Internal, "no script for %s attempt %d", e.Call, e.Attempt)
	}
	st := script[e.Attempt]
	tag := metadata.Pairs("attempt", strconv.Itoa(e.Attempt))
	if st.pushback != "" {
		tag = metadata.Join(tag, metadata.Pairs("grpc-retry-pushback-ms", st.pushback))
	}
	grpc.SetTrailer(ctx, tag)

	if st.header {
		select {
		case <-time.After(st.headerAfter):
		case <-ctx.Done():
			e.End, e.Canceled = time.Since(s.t0), true
			s.add(e)
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if err := grpc.SendHeader(ctx, tag); err != nil {
			return nil, err
		}
	}
	var err error
	for _, k := range st.awaited(e.Attempt, len(script)) {
		select {
		case <-s.started(e.Call, k):
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
	}
	var wait <-chan time.Time
	if !st.hang {
		wait = time.After(st.after)
	}
	if err == nil {
		select {
		case <-wait:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	e.End = time.Since(s.t0)
	e.Canceled = err != nil
	s.add(e)
	switch {
	case err != nil:
		return nil, status.FromContextError(err).Err()
	case st.code != codes.OK:
		return nil, status.Errorf(st.code, "%s attempt %d", e.Call, e.Attempt)
	}
	// The header goes only with an answer: set, it would go out before a
	// failure's trailer too, and a response with headers commits the call
	// (A6), so that its failure could not be hedged. A6 asks servers to
	// fail with trailers only.
	if !st.header {
		grpc.SetHeader(ctx, tag)
	}
	if st.blank {
		return &healthpb.HealthCheckResponse{}, nil
	}
	return &healthpb.HealthCheckResponse{Status: statusOf(e.Attempt)}, nil
}

// started returns a channel closed once a handler of call's attempt k has
// started.
func (s *server) started(call string, k int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seenLocked(call, k)
}

func (s *server) markStarted(call string, k int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.seenLocked(call, k)
	select {
	case <-c:
	default:
		close(c)
	}
}

func (s *server) seenLocked(call string, k int) chan struct{} {
	key := call + "/" + strconv.Itoa(k)
	c, ok := s.seen[key]
	if !ok {
		c = make(chan struct{})
		s.seen[key] = c
	}
	return c
}

// Watch sends the current status once and then waits for the client to
// go: a server-streaming method, to show streams pass through.
func (s *server) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	e := event{Call: "watch " + req.GetService()}
	if p, ok := peer.FromContext(stream.Context()); ok && s.backends && p.LocalAddr != nil {
		e.Backend = p.LocalAddr.String()
	}
	s.add(e)
	if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (s *server) add(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	close(s.changed)
	s.changed = make(chan struct{})
}

// awaitEvents waits until the server has seen n attempts end, for tests
// over real connections, where no bubble says when everything is done.
// The timeout only keeps a broken test from hanging; it orders nothing.
func (s *server) awaitEvents(t *testing.T, n int) []event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		got, changed := len(s.events), s.changed
		s.mu.Unlock()
		if got >= n {
			return s.seenEvents()
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the server saw %d attempts end, want %d", got, n)
		}
	}
}

// seenEvents returns the events so far, by start time and then attempt.
func (s *server) seenEvents() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := slices.Clone(s.events)
	slices.SortStableFunc(ev, func(a, b event) int {
		if a.Start != b.Start {
			return int(a.Start - b.Start)
		}
		return a.Attempt - b.Attempt
	})
	return ev
}

// env is a server and a client channel hedged by one Interceptor.
type env struct {
	srv    *server
	client healthpb.HealthClient
	conn   *grpc.ClientConn
}

// newEnv serves scripts over bufconn, an in-memory connection, which a
// synctest bubble can run in virtual time, and dials it with cfg's
// interceptor. Everything stops when the test ends.
func newEnv(t *testing.T, cfg hedgegrpc.Config, scripts map[string][]step) *env {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	return start(t, cfg, scripts, lis, "passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
}

// newTCPEnv is newEnv over a real TCP connection on the loopback
// interface.
func newTCPEnv(t *testing.T, cfg hedgegrpc.Config, scripts map[string][]step) *env {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return start(t, cfg, scripts, lis, lis.Addr().String())
}

func start(t *testing.T, cfg hedgegrpc.Config, scripts map[string][]step, lis net.Listener, target string, opts ...grpc.DialOption) *env {
	t.Helper()
	in, err := hedgegrpc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(scripts)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		gs.Serve(lis)
	}()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	opts = append(opts, in.DialOptions(target)...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
	})
	return &env{srv: srv, client: healthpb.NewHealthClient(conn), conn: conn}
}

// reports collects the hedge.Report of every call.
type reports struct {
	mu   sync.Mutex
	list []hedge.Report
}

func (r *reports) Observe(_ context.Context, rep hedge.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Elapsed = 0 // timing is checked on the server's side
	r.list = append(r.list, rep)
}

func (r *reports) take() []hedge.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.list
	r.list = nil
	return l
}
