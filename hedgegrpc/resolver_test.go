package hedgegrpc_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge/hedgegrpc"
)

// backends serves one scripted health server on n TCP listeners on
// 127.0.0.1, as n backends whose scripts see each other's attempts, and
// returns it with their addresses.
func backends(t *testing.T, n int, scripts map[string][]step) (*server, []resolver.Address) {
	t.Helper()
	srv := newServer(scripts)
	srv.backends = true
	var addrs []resolver.Address
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, srv)
		served := make(chan struct{})
		go func() {
			defer close(served)
			gs.Serve(lis)
		}()
		t.Cleanup(func() {
			gs.Stop()
			<-served
		})
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
	}
	return srv, addrs
}

// dialResolved dials the addresses through a resolver/manual resolver,
// with the options of an Interceptor made from cfg, and returns the
// channel and the resolver, which the test may push new states through.
func dialResolved(t *testing.T, cfg hedgegrpc.Config, addrs []resolver.Address, dial ...grpc.DialOption) (*grpc.ClientConn, *manual.Resolver) {
	t.Helper()
	in, err := hedgegrpc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := manual.NewBuilderWithScheme("hedgetest")
	r.InitialState(resolver.State{Addresses: addrs})
	const target = "hedgetest:///backends"
	opts := append(in.DialOptions(target, r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, append(opts, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect()
	return conn, r
}

// hedgeCheck is a service config that hedges Check with n attempts at
// once, with a timeout of its own for grpc-go, and lb as its balancer.
func hedgeCheck(lb string, n int, timeout string) string {
	return `{"loadBalancingConfig": [{"` + lb + `": {}}], "methodConfig": [{
	  "name": [{"service": "grpc.health.v1.Health", "method": "Check"}], "timeout": "` + timeout + `",
	  "hedgingPolicy": {"maxAttempts": ` + string(rune('0'+n)) + `, "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`
}

// TestFollowsTheResolversConfig: the channel starts on the default
// config, the one JSON given to New; each valid config the resolver
// delivers then replaces the hedging for the calls after it, as it
// replaces grpc-go's own settings; a state without a config, or an
// invalid one, keeps the config in force.
func TestFollowsTheResolversConfig(t *testing.T) {
	// A call of each name at most: the server's marks of which attempts
	// started are per name, and the last attempt answers once the others
	// have reached the server.
	srv, addrs := backends(t, 1, map[string][]step{
		"two":    {hang(), {awaitAll: true}},
		"three":  {hang(), hang(), {awaitAll: true}},
		"three2": {hang(), hang(), {awaitAll: true}},
		"three3": {hang(), hang(), {awaitAll: true}},
		"one":    {ok(0)},
	})
	obs := &reports{}
	cfg, err := hedgegrpc.ParseServiceConfig(hedgeCheck("pick_first", 2, "11s"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = obs
	conn, r := dialResolved(t, cfg, addrs)
	client := healthpb.NewHealthClient(conn)

	// call makes one call and returns how many attempts the hedging sent
	// (0: the call was not hedged) and grpc-go's timeout for Check.
	call := func(name string) (int, time.Duration) {
		t.Helper()
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name}); err != nil {
			t.Fatalf("call %q: %v", name, err)
		}
		attempts := 0
		if reps := obs.take(); len(reps) == 1 {
			attempts = reps[0].Attempts
		}
		var timeout time.Duration
		if mc := conn.GetMethodConfig("/grpc.health.v1.Health/Check"); mc.Timeout != nil {
			timeout = *mc.Timeout
		}
		return attempts, timeout
	}
	push := func(js string) error {
		t.Helper()
		s := resolver.State{Addresses: addrs}
		if js != "" {
			s.ServiceConfig = r.CC().ParseServiceConfig(js)
		}
		return r.CC().UpdateState(s)
	}
	type step struct {
		Call     string
		Attempts int
		Timeout  time.Duration
	}
	var got []step
	do := func(name string) {
		n, timeout := call(name)
		got = append(got, step{name, n, timeout})
	}

	do("two") // the default: two attempts, grpc-go's timeout 11s
	if err := push(hedgeCheck("pick_first", 3, "12s")); err != nil {
		t.Fatalf("pushing a valid config: %v", err)
	}
	do("three")
	if err := push(`{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
	  "hedgingPolicy": {"maxAttempts": 1}}]}`); err == nil {
		t.Error("pushing a config whose hedgingPolicy A6 forbids: no error, want the channel to refuse it")
	}
	do("three2") // the invalid config changed nothing
	if err := push(""); err != nil {
		t.Fatalf("pushing a state without a config: %v", err)
	}
	do("three3") // neither did a state without a config
	if err := push(`{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "timeout": "13s"}]}`); err != nil {
		t.Fatalf("pushing a config without hedging: %v", err)
	}
	do("one") // not hedged any more
	want := []step{{"two", 2, 11 * time.Second}, {"three", 3, 12 * time.Second}, {"three2", 3, 12 * time.Second},
		{"three3", 3, 12 * time.Second}, {"one", 0, 13 * time.Second}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if got := len(srv.awaitEvents(t, 2+3*3+1)); got != 12 {
		t.Errorf("the server saw %d attempts, want 12", got)
	}
}

// TestResolverConfigIgnoredWhenDisabled: with
// grpc.WithDisableServiceConfig, the resolver's configs change neither
// grpc-go nor the hedging.
func TestResolverConfigIgnoredWhenDisabled(t *testing.T) {
	_, addrs := backends(t, 1, map[string][]step{"two": {hang(), {awaitAll: true}}})
	obs := &reports{}
	cfg, err := hedgegrpc.ParseServiceConfig(hedgeCheck("pick_first", 2, "11s"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = obs
	conn, r := dialResolved(t, cfg, addrs, grpc.WithDisableServiceConfig())
	client := healthpb.NewHealthClient(conn)
	for range 2 {
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "two"}); err != nil {
			t.Fatal(err)
		}
		if reps := obs.take(); len(reps) != 1 || reps[0].Attempts != 2 {
			t.Fatalf("reports %+v, want one call of two attempts", reps)
		}
		r.UpdateState(resolver.State{Addresses: addrs, ServiceConfig: r.CC().ParseServiceConfig(hedgeCheck("pick_first", 3, "12s"))})
	}
}

// TestHedgesReachOtherBackends: behind round_robin, the attempts of one
// call go to three different backends; behind pick_first, to the one
// backend the channel is connected to. The balancer comes from the same
// JSON as the hedging.
func TestHedgesReachOtherBackends(t *testing.T) {
	for _, tt := range []struct {
		lb       string
		backends int // how many backends one call's three attempts reach
	}{{"round_robin", 3}, {"pick_first", 1}} {
		t.Run(tt.lb, func(t *testing.T) {
			srv, addrs := backends(t, 3, map[string][]step{"spread": {hang(), hang(), {awaitAll: true}}})
			cfg, err := hedgegrpc.ParseServiceConfig(hedgeCheck(tt.lb, 3, "10s"))
			if err != nil {
				t.Fatal(err)
			}
			conn, _ := dialResolved(t, cfg, addrs)
			client := healthpb.NewHealthClient(conn)
			// Watch is not hedged. Round robin picks only among backends
			// that are ready: watch until every backend the balancer
			// will use has served one, so that none joins mid-call.
			for served := 0; served < tt.backends; served = len(backendsOf(srv.seenEvents())) {
				ctx, cancel := context.WithCancel(context.Background())
				w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "w"}, grpc.WaitForReady(true))
				if err == nil {
					_, err = w.Recv()
				}
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			before := len(srv.seenEvents())
			if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "spread"}); err != nil {
				t.Fatal(err)
			}
			var spread []event
			for _, e := range srv.awaitEvents(t, before+3) {
				if e.Call == "spread" {
					spread = append(spread, e)
				}
			}
			if len(spread) != 3 {
				t.Fatalf("the servers saw %d attempts of the call, want 3", len(spread))
			}
			if got := len(backendsOf(spread)); got != tt.backends {
				t.Errorf("the call's three attempts reached %d backends, want %d: %+v", got, tt.backends, spread)
			}
		})
	}
}

// backendsOf returns the distinct backends that served events.
func backendsOf(events []event) []string {
	var bs []string
	for _, e := range events {
		if !slices.Contains(bs, e.Backend) {
			bs = append(bs, e.Backend)
		}
	}
	return bs
}

// TestResolverConfigKeepsTheTokenBucket: a config that comes again with
// the same retryThrottling keeps the bucket that failures drained (a
// resolver may send its config at every resolution); one with other
// throttling starts a full bucket of its own.
func TestResolverConfigKeepsTheTokenBucket(t *testing.T) {
	_, addrs := backends(t, 1, map[string][]step{"down": {fail(0, codes.Unavailable), fail(0, codes.Unavailable)}})
	throttled := func(maxTokens string) string {
		return `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
		  "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "3600s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}],
		  "retryThrottling": {"maxTokens": ` + maxTokens + `, "tokenRatio": 0.1}}`
	}
	obs := &reports{}
	cfg, err := hedgegrpc.ParseServiceConfig(throttled("3"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = obs
	conn, r := dialResolved(t, cfg, addrs)
	client := healthpb.NewHealthClient(conn)
	var got []int // attempts per call; a failure starts the next attempt unless the bucket refuses it
	down := func() {
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "down"}); status.Code(err) != codes.Unavailable {
			t.Fatalf("Check = %v, want Unavailable", err)
		}
		for _, rep := range obs.take() {
			got = append(got, rep.Attempts)
		}
	}
	push := func(js string) {
		if err := r.CC().UpdateState(resolver.State{Addresses: addrs, ServiceConfig: r.CC().ParseServiceConfig(js)}); err != nil {
			t.Fatal(err)
		}
	}
	down()               // 3 → 2 → 1 tokens
	down()               // 1 → 0: no hedge at 1.5 or less
	push(throttled("3")) // the same throttling: still 0
	down()               // no hedge
	push(throttled("4")) // other throttling: a full bucket of 4
	down()               // 4 → 3 → 2
	if diff := cmp.Diff([]int{2, 1, 1, 2}, got); diff != "" {
		t.Errorf("attempts per call (-want +got)\n%s", diff)
	}
}
