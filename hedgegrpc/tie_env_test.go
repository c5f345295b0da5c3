package hedgegrpc_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgegrpc"
)

// visit is what the server saw of one call: the label its client gave
// it ("call" metadata), its attempt number, whether it reached the
// handler, and the code it left with.
type visit struct {
	Call, Attempt string
	Ran           bool
	Code          codes.Code
}

// replicas is a health service behind Admissions on one real gRPC
// server: route picks, for each call, the Admission it waits at, which
// stands for the replica the call reached. Every call that leaves the
// server is reported on left, and every call that reaches the handler on
// ran, as "call/attempt". A call whose label starts with "blocker" (see
// block) holds its place until release is closed.
type replicas struct {
	adms    []*hedgegrpc.Admission
	route   func(call, attempt string) int
	arrive  func(visit) // if set, called as a call arrives, before its Admission
	ran     chan string
	left    chan visit
	release chan struct{}
	warmAdm *hedgegrpc.Admission // the warm-up calls'
	conn    *grpc.ClientConn
	client  healthpb.HealthClient
}

func labelOf(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "call"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// withLabel labels the calls made with ctx, for replicas.route.
func withLabel(ctx context.Context, call string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "call", call)
}

// startReplicas serves svc over bufconn, which a synctest bubble runs in
// virtual time, behind adms, and dials it with an Interceptor of cfg.
func startReplicas(t *testing.T, svc *guarded, cfg hedgegrpc.Config, adms []*hedgegrpc.Admission, route func(call, attempt string) int, dial ...grpc.DialOption) *replicas {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	return serveReplicas(t, svc, cfg, adms, route, nil, lis, "passthrough:///bufconn",
		append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))...)
}

func serveReplicas(t *testing.T, svc *guarded, cfg hedgegrpc.Config, adms []*hedgegrpc.Admission, route func(call, attempt string) int, arrive func(visit), lis net.Listener, target string, dial ...grpc.DialOption) *replicas {
	t.Helper()
	in, err := hedgegrpc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &replicas{adms: adms, route: route, arrive: arrive, ran: make(chan string, 64), left: make(chan visit, 64),
		release: make(chan struct{}), warmAdm: &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 2}}}
	svc.check, svc.watch = wrapCheck(svc.check, r.release), wrapWatch(svc.watch, r.release)
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			v := visit{Call: labelOf(ctx), Attempt: attemptIn(ctx)}
			if r.arrive != nil {
				r.arrive(v)
			}
			resp, err := r.adm(v).Unary(ctx, req, info, func(ctx context.Context, req any) (any, error) {
				v.Ran = true
				r.ran <- v.Call + "/" + v.Attempt
				return h(ctx, req)
			})
			v.Code = status.Code(err)
			r.left <- v
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			v := visit{Call: labelOf(ss.Context()), Attempt: attemptIn(ss.Context())}
			if r.arrive != nil {
				r.arrive(v)
			}
			err := r.adm(v).Stream(srv, ss, info, func(srv any, ss grpc.ServerStream) error {
				v.Ran = true
				r.ran <- v.Call + "/" + v.Attempt
				return h(srv, ss)
			})
			v.Code = status.Code(err)
			r.left <- v
			return err
		}),
	)
	r.conn = serveHealth(t, gs, svc, lis, target, append(dial, in.DialOptions(target)...)...)
	r.client = healthpb.NewHealthClient(r.conn)
	return r
}

// adm returns the Admission v waits at: route's, or for a warm-up call,
// one of its own, with room for both its attempts.
func (r *replicas) adm(v visit) *hedgegrpc.Admission {
	if strings.HasPrefix(v.Call, "warm") {
		return r.warmAdm
	}
	return r.adms[r.route(v.Call, v.Attempt)]
}

// visits returns the n next calls to leave the server, in the order they
// left.
func (r *replicas) visits(t *testing.T, n int) []visit {
	t.Helper()
	var got []visit
	for range n {
		got = append(got, await(t, r.left, "a call to leave the server"))
	}
	return got
}

// block starts a call of the unhedged method (Watch when hedged is
// "Check", Check otherwise) labelled "blocker", which holds its place at
// the Admission route gives it until r.release is closed, and returns
// once it runs.
func (r *replicas) block(t *testing.T, hedged string) {
	t.Helper()
	ctx := withLabel(context.Background(), "blocker")
	if hedged == "Check" {
		go func() {
			w, err := r.client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				w.Recv()
			}
		}()
	} else {
		go r.client.Check(ctx, &healthpb.HealthCheckRequest{})
	}
	if got := await(t, r.ran, "the blocker to run"); got != "blocker/0" {
		t.Fatalf("%s ran before the blocker", got)
	}
}

// wrapWatch makes the blocker's Watch wait for release, and passes other
// streams to watch.
func wrapWatch(watch func(healthpb.Health_WatchServer, string) error, release <-chan struct{}) func(healthpb.Health_WatchServer, string) error {
	return func(ss healthpb.Health_WatchServer, k string) error {
		if strings.HasPrefix(labelOf(ss.Context()), "blocker") {
			<-release
			return nil
		}
		return watch(ss, k)
	}
}

// wrapCheck is wrapWatch's twin for Check; it answers a call labelled
// "warm" at once.
func wrapCheck(check func(context.Context, string) (*healthpb.HealthCheckResponse, error), release <-chan struct{}) func(context.Context, string) (*healthpb.HealthCheckResponse, error) {
	return func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
		switch l := labelOf(ctx); {
		case strings.HasPrefix(l, "blocker"):
			<-release
			return &healthpb.HealthCheckResponse{}, nil
		case l == "warm":
			return &healthpb.HealthCheckResponse{}, nil
		case l == "warm hedged" && k == "0":
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		case l == "warm hedged":
			return &healthpb.HealthCheckResponse{}, nil
		}
		return check(ctx, k)
	}
}

// warm makes a Check whose server's start signal makes the later calls
// of the method watch their headers. The service answers it at once;
// with hedged, it answers only its hedge, which is what a method hedged
// at a fixed hedgingDelay learns from: its primaries ask for the signal
// only once a hedge got it. The report rep got of it is dropped.
func (r *replicas) warm(t *testing.T, rep *reports, hedged bool) {
	t.Helper()
	label, want := "warm", []visit{{"warm", "0", true, codes.OK}}
	if hedged {
		label, want = "warm hedged", []visit{{"warm hedged", "0", true, codes.Canceled}, {"warm hedged", "1", true, codes.OK}}
	}
	if _, err := r.client.Check(withLabel(context.Background(), label), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, r.visits(t, len(want)), byCall); diff != "" {
		t.Fatalf("the warm-up call (-want +got):\n%s", diff)
	}
	for range want {
		<-r.ran
	}
	if rep != nil {
		rep.take()
	}
}
