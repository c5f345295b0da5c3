package hedgegrpc_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/hedgegrpc"
)

// probe is a health service whose attempts, of Check and of Watch alike,
// all do what act says, and which counts the attempts of each call, named
// by the request's Service field.
type probe struct {
	healthpb.UnimplementedHealthServer
	act func(ctx context.Context) error // nil: answer at once
	// acts, if it has the call's name, replaces act for that call.
	acts map[string]func(ctx context.Context) error
	// then, if set, is what a Watch does once it sent its reply, before
	// it ends the stream.
	then func(ctx context.Context) error

	mu       sync.Mutex
	attempts map[string]int
}

func newProbe(act func(ctx context.Context) error) *probe {
	return &probe{act: act, attempts: map[string]int{}}
}

func (p *probe) serve(ctx context.Context, call string) error {
	p.mu.Lock()
	p.attempts[call]++
	act := p.act
	if a, ok := p.acts[call]; ok {
		act = a
	}
	p.mu.Unlock()
	if act == nil {
		return nil
	}
	return act(ctx)
}

func (p *probe) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := p.serve(ctx, req.GetService()); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (p *probe) Watch(req *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	if err := p.serve(ss.Context(), req.GetService()); err != nil {
		return err
	}
	if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil || p.then == nil {
		return err
	}
	return p.then(ss.Context())
}

// attemptsOf returns how many attempts of call reached the server.
func (p *probe) attemptsOf(call string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts[call]
}

// stalls is an act that waits until the client gives up.
func stalls(ctx context.Context) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// primaryFails is an act whose first attempt of a call fails with code c
// after d, and whose others answer at once.
func primaryFails(d time.Duration, c codes.Code) func(context.Context) error {
	fail := probeFails(d, c)
	return func(ctx context.Context) error {
		if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) == 0 {
			return fail(ctx)
		}
		return nil
	}
}

// probeFails is an act that fails with code c after d.
func probeFails(d time.Duration, c codes.Code) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-time.After(d):
			return status.Error(c, "probe")
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// unhedgedService is the name under which a probe serves the health
// service a second time, for calls of a method that no test hedges.
const unhedgedService = "probe.Unhedged"

// probeEnv is a probe served over bufconn, which a synctest bubble runs
// in virtual time, and a channel to it hedged by an Interceptor.
type probeEnv struct {
	p      *probe
	conn   *grpc.ClientConn
	client healthpb.HealthClient
	t0     time.Time
}

// newProbeEnv serves p and dials it with the options of an Interceptor
// made from cfg, and then dial. With r, the channel resolves through r,
// which the test may push states through; r's initial state is the
// server's address.
func newProbeEnv(t *testing.T, p *probe, cfg hedgegrpc.Config, r *manual.Resolver, dial ...grpc.DialOption) *probeEnv {
	t.Helper()
	in, err := hedgegrpc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, p)
	again := healthpb.Health_ServiceDesc
	again.ServiceName = unhedgedService
	gs.RegisterService(&again, p)
	served := make(chan struct{})
	go func() {
		defer close(served)
		gs.Serve(lis)
	}()
	target := "passthrough:///bufconn"
	var resolvers []resolver.Builder
	if r != nil {
		target = r.Scheme() + ":///bufconn"
		r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: "bufconn"}}})
		resolvers = append(resolvers, r)
	}
	opts := append(in.DialOptions(target, resolvers...),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, append(opts, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
	})
	conn.Connect()
	return &probeEnv{p: p, conn: conn, client: healthpb.NewHealthClient(conn), t0: time.Now()}
}

// push makes the resolver deliver js as the channel's service config.
func push(t *testing.T, r *manual.Resolver, js string) {
	t.Helper()
	cc := r.CC()
	sc := cc.ParseServiceConfig(js)
	if sc.Err != nil {
		t.Fatalf("the channel refused the config: %v", sc.Err)
	}
	if err := cc.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: "bufconn"}}, ServiceConfig: sc}); err != nil {
		t.Fatal(err)
	}
}

// outcome is what a test observes of one call of a probe.
type outcome struct {
	Code     codes.Code
	At       time.Duration // when the call returned, since the env started
	Attempts int           // how many reached the server
}

// call makes one call of method, "Check" or "Watch", named name, and
// returns what happened. A Watch ends at its first reply. "Unhedged"
// calls Check of unhedgedService, and "UnhedgedWatch" its Watch, which
// ends when the server ends it.
func (e *probeEnv) call(ctx context.Context, method, name string) outcome {
	req := &healthpb.HealthCheckRequest{Service: name}
	var err error
	switch method {
	case "Check":
		_, err = e.client.Check(ctx, req)
	case "Watch":
		var w healthpb.Health_WatchClient
		if w, err = e.client.Watch(ctx, req); err == nil {
			_, err = w.Recv()
		}
	case "Unhedged":
		err = e.conn.Invoke(ctx, "/"+unhedgedService+"/Check", req, new(healthpb.HealthCheckResponse))
	case "UnhedgedWatch":
		var cs grpc.ClientStream
		desc := &grpc.StreamDesc{ServerStreams: true}
		if cs, err = e.conn.NewStream(ctx, desc, "/"+unhedgedService+"/Watch"); err == nil {
			if err = cs.SendMsg(req); err == nil {
				err = cs.CloseSend()
			}
			for err == nil {
				err = cs.RecvMsg(new(healthpb.HealthCheckResponse))
			}
			if err == io.EOF {
				err = nil
			}
		}
	default:
		panic("no method " + method)
	}
	at := time.Since(e.t0)
	synctest.Wait() // every attempt that started has reached the server
	return outcome{Code: status.Code(err), At: at, Attempts: e.p.attemptsOf(name)}
}
