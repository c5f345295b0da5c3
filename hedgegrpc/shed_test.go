package hedgegrpc_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge/hedgegrpc"
)

// Against a real server on 127.0.0.1: a saturated server fails the hedge
// with UNAVAILABLE and pushback -1, never the primary; the client sends
// no further hedge, and the call returns the primary's answer. With a
// place free, the hedge goes through.
func TestShedderLoopbackTCP(t *testing.T) {
	t.Run("saturated: the hedge is shed, the primary answers", func(t *testing.T) {
		primaryIn, release := make(chan struct{}), make(chan struct{})
		handled := make(chan string, 3)
		svc := &guarded{check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
			handled <- k
			if k == "0" {
				close(primaryIn)
				<-release // holds the one place until the hedge has been shed
			}
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
		}}
		shed := &hedgegrpc.Shedder{Limit: 1}
		e := startShedTCP(t, shed, svc, hedging(codes.Unavailable))
		e.tries.hold, e.tries.answered = primaryIn, make(chan tried, 3)

		type answer struct {
			resp *healthpb.HealthCheckResponse
			err  error
		}
		done := make(chan answer, 1)
		go func() {
			resp, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			done <- answer{resp, err}
		}()
		hedge := await(t, e.tries.answered, "the hedge's answer")
		if diff := cmp.Diff(tried{Attempt: "1", Code: codes.Unavailable, Pushback: "-1"}, hedge, ignoreTriedAt); diff != "" {
			t.Errorf("the hedge (-want +got):\n%s", diff)
		}
		close(release)
		got := await(t, done, "the call")
		if got.err != nil || got.resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check = %v, %v; want the primary's SERVING", got.resp, got.err)
		}
		if diff := cmp.Diff([]string{"1", "0"}, e.awaitExit(t, 2)); diff != "" {
			t.Errorf("calls that left the Shedder (-want +got):\n%s", diff)
		}
		want := []tried{hedge, {Attempt: "0", Code: codes.OK}}
		if diff := cmp.Diff(want, e.tries.sent(), ignoreTriedAt); diff != "" {
			t.Errorf("attempts sent (-want +got):\n%s", diff)
		}
		if k := await(t, handled, "the primary"); k != "0" || len(handled) != 0 {
			t.Errorf("the service saw attempt %s and %d more, want the primary only", k, len(handled))
		}
		if n, s := shed.InFlight(), shed.Shed(); n != 0 || s != 1 {
			t.Errorf("in flight %d, shed %d; want 0 and 1", n, s)
		}
	})

	t.Run("a place free: the hedge goes through and wins", func(t *testing.T) {
		primaryIn := make(chan struct{})
		svc := &guarded{check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
			if k == "0" {
				close(primaryIn)
				<-ctx.Done() // stuck until the hedge wins
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
		}}
		shed := &hedgegrpc.Shedder{Limit: 2}
		e := startShedTCP(t, shed, svc, hedging(codes.Unavailable))
		// The hedge waits for the primary to be in: both reach the server,
		// and the hedge finds one place taken, one free.
		e.tries.hold = primaryIn
		resp, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("Check = %v, %v; want the hedge's NOT_SERVING", resp, err)
		}
		e.awaitExit(t, 2)
		if n, s := shed.InFlight(), shed.Shed(); n != 0 || s != 0 {
			t.Errorf("in flight %d, shed %d; want 0 and 0", n, s)
		}
	})

	// The Shedder's doc asks for UNAVAILABLE among the non-fatal codes:
	// a fatal code ends the call, pushback or not.
	t.Run("UNAVAILABLE fatal: the shed hedge ends the call", func(t *testing.T) {
		primaryIn := make(chan struct{})
		cancelled := make(chan struct{})
		svc := &guarded{check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
			close(primaryIn)
			<-ctx.Done()
			close(cancelled)
			return nil, status.FromContextError(ctx.Err()).Err()
		}}
		e := startShedTCP(t, &hedgegrpc.Shedder{Limit: 1}, svc, hedging())
		e.tries.hold = primaryIn
		_, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Check = %v, want the shed hedge's UNAVAILABLE", err)
		}
		e.awaitExit(t, 2)
		await(t, cancelled, "the primary's cancellation")
	})

	t.Run("streams: a retry is shed, the first attempt is not", func(t *testing.T) {
		svc := &guarded{watch: func(stream healthpb.Health_WatchServer, k string) error {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
				return err
			}
			<-stream.Context().Done()
			return nil
		}}
		shed := &hedgegrpc.Shedder{Limit: 1}
		e := startShedTCP(t, shed, svc, hedgegrpc.Config{})
		watch := func(ctx context.Context, k string) (healthpb.Health_WatchClient, error) {
			if k != "0" {
				ctx = metadata.AppendToOutgoingContext(ctx, "grpc-previous-rpc-attempts", k)
			}
			stream, err := e.client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return nil, err
			}
			_, err = stream.Recv()
			return stream, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := watch(ctx, "0"); err != nil {
			t.Fatal(err)
		}
		stream, err := watch(ctx, "1")
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("a second attempt's stream: %v, want UNAVAILABLE", err)
		}
		if got := stream.Trailer().Get("grpc-retry-pushback-ms"); !cmp.Equal(got, []string{"-1"}) {
			t.Errorf("pushback %q, want -1", got)
		}
		if _, err := watch(ctx, "0"); err != nil {
			t.Errorf("a first attempt past the limit: %v, want it served", err)
		}
		cancel()
		e.awaitExit(t, 3)
		if n, s := shed.InFlight(), shed.Shed(); n != 0 || s != 1 {
			t.Errorf("in flight %d, shed %d; want 0 and 1", n, s)
		}
	})
}

// A handler that panics gives its place back: the count is back at zero
// and the next hedge goes through.
func TestShedderReleasesOnPanic(t *testing.T) {
	svc := &guarded{
		check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
			if v := metadata.ValueFromIncomingContext(ctx, "x-panic"); len(v) > 0 {
				panic("boom")
			}
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
		},
		watch: func(healthpb.Health_WatchServer, string) error { panic("boom") },
	}
	shed := &hedgegrpc.Shedder{Limit: 1}
	e := startShedTCP(t, shed, svc, hedgegrpc.Config{}) // no hedging: the test numbers the attempts
	ctxOf := func(k string, panics bool) context.Context {
		md := metadata.MD{}
		if k != "0" {
			md.Set("grpc-previous-rpc-attempts", k)
		}
		if panics {
			md.Set("x-panic", "yes")
		}
		return metadata.NewOutgoingContext(context.Background(), md)
	}
	for _, k := range []string{"0", "1"} {
		_, err := e.client.Check(ctxOf(k, true), &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.Internal {
			t.Errorf("attempt %s: %v, want the panic as INTERNAL", k, err)
		}
		e.awaitExit(t, 1)
		if n := shed.InFlight(); n != 0 {
			t.Fatalf("after attempt %s panicked, %d in flight, want 0", k, n)
		}
		stream, err := e.client.Watch(ctxOf(k, false), &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Internal {
			t.Errorf("stream attempt %s: %v, want the panic as INTERNAL", k, err)
		}
		e.awaitExit(t, 1)
		if n := shed.InFlight(); n != 0 {
			t.Fatalf("after stream attempt %s panicked, %d in flight, want 0", k, n)
		}
	}
	if _, err := e.client.Check(ctxOf("1", false), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("a hedge after the panics: %v, want it served", err)
	}
}

// The rule, call by call, on a Shedder whose Limit is already taken:
// which calls are hedges, and what a shed one gets.
func TestShedderRule(t *testing.T) {
	tests := []struct {
		name     string
		previous []string // grpc-previous-rpc-attempts
		shed     bool
	}{
		{"none: a first attempt", nil, false},
		{"0: a first attempt", []string{"0"}, false},
		{"1: a hedge", []string{"1"}, true},
		{"4: a hedge", []string{"4"}, true},
		{"empty: a first attempt", []string{""}, false},
		{"negative: a first attempt", []string{"-1"}, false},
		{"not a number: a first attempt", []string{"one"}, false},
		{"out of range: a first attempt", []string{"99999999999999999999"}, false},
		{"the first of two values counts", []string{"0", "2"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &hedgegrpc.Shedder{Limit: 1}
			release, busy := make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			defer wg.Wait()
			defer close(release)
			wg.Go(func() {
				s.Unary(context.Background(), nil, nil, func(context.Context, any) (any, error) {
					close(busy)
					<-release
					return nil, nil
				})
			})
			<-busy // the one place is taken

			md := metadata.MD{}
			if tt.previous != nil {
				md["grpc-previous-rpc-attempts"] = tt.previous
			}
			served := false
			_, err := s.Unary(metadata.NewIncomingContext(context.Background(), md), nil, nil, func(context.Context, any) (any, error) {
				served = true
				return "reply", nil
			})
			type result struct {
				Code   codes.Code
				Served bool
				Shed   uint64
			}
			want := result{Code: codes.OK, Served: true}
			if tt.shed {
				want = result{Code: codes.Unavailable, Shed: 1}
			}
			if diff := cmp.Diff(want, result{status.Code(err), served, s.Shed()}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The zero Shedder, and any Limit of zero or less, sheds every hedge and
// serves every first attempt.
func TestShedderZeroValue(t *testing.T) {
	for _, limit := range []int{0, -1} {
		s := &hedgegrpc.Shedder{Limit: limit}
		for _, k := range []string{"0", "1"} {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("grpc-previous-rpc-attempts", k))
			_, err := s.Unary(ctx, nil, nil, func(context.Context, any) (any, error) { return nil, nil })
			want := codes.OK
			if k == "1" {
				want = codes.Unavailable
			}
			if status.Code(err) != want {
				t.Errorf("Limit %d, attempt %s: %v, want %v", limit, k, err, want)
			}
		}
		if s.InFlight() != 0 || s.Shed() != 1 {
			t.Errorf("Limit %d: in flight %d, shed %d; want 0 and 1", limit, s.InFlight(), s.Shed())
		}
	}
}

// Hedges racing for the places left get exactly those places; first
// attempts are admitted past the limit. Run with -race -cpu 1,2,4.
func TestShedderExactUnderRace(t *testing.T) {
	const limit, hedges, primaries = 4, 64, 6
	s := &hedgegrpc.Shedder{Limit: limit}
	release := make(chan struct{})
	entered := make(chan string, 1+hedges+primaries)
	shedCodes := make(chan codes.Code, hedges)
	call := func(k string) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("grpc-previous-rpc-attempts", k))
		_, err := s.Unary(ctx, nil, nil, func(context.Context, any) (any, error) {
			entered <- k
			<-release
			return nil, nil
		})
		if k != "0" {
			shedCodes <- status.Code(err)
		}
	}
	var wg sync.WaitGroup
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer wg.Wait()
	defer free() // on a failure, before the wait

	wg.Go(func() { call("0") })
	<-entered // one first attempt in: limit-1 places are left
	start := make(chan struct{})
	for range hedges {
		wg.Go(func() { <-start; call("1") })
	}
	close(start)
	for range limit - 1 {
		if k := <-entered; k != "1" {
			t.Fatalf("attempt %s entered, want a hedge", k)
		}
	}
	for range hedges - (limit - 1) {
		if c := <-shedCodes; c != codes.Unavailable {
			t.Errorf("a hedge got %v with every place taken, want UNAVAILABLE", c)
		}
	}
	for range primaries {
		wg.Go(func() { call("0") })
	}
	for range primaries {
		if k := <-entered; k != "0" {
			t.Fatalf("attempt %s entered, want a first attempt", k)
		}
	}
	if n, shed := s.InFlight(), s.Shed(); n != limit+primaries || shed != hedges-(limit-1) {
		t.Errorf("in flight %d, shed %d; want %d and %d", n, shed, limit+primaries, hedges-(limit-1))
	}
	free()
	wg.Wait()
	if n := s.InFlight(); n != 0 {
		t.Errorf("in flight %d after every handler returned, want 0", n)
	}
}

// In virtual time, the exact course of calls whose hedges are shed: the
// hedge fails at once, the pushback stops the call's hedging although
// it may send three attempts, and the call returns the primary's answer
// when the primary gives it. With retryThrottling, sheds drain the
// bucket until calls stop hedging.
func TestShedderInVirtualTime(t *testing.T) {
	const primary, delay = 100 * ms, 10 * ms
	synctest.Test(t, func(t *testing.T) {
		svc := &guarded{check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
			select {
			case <-time.After(primary): // the service's latency, in virtual time
				return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}}
		cfg := hedgegrpc.Config{
			Methods: map[string]hedgegrpc.HedgingPolicy{
				"grpc.health.v1.Health/Check": {MaxAttempts: 3, HedgingDelay: delay, NonFatalStatusCodes: unavailable},
			},
			// 3 tokens, no hedges at 1.5 or fewer: a shed drains one and
			// the primary's answer refills a tenth, so two calls hedge.
			RetryThrottling: &hedgegrpc.RetryThrottling{MaxTokens: 3, TokenRatio: 0.1},
		}
		shed := &hedgegrpc.Shedder{Limit: 1}
		e := startShedPipe(t, shed, svc, cfg)
		for i := range 3 {
			start := time.Now()
			resp, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || time.Since(start) != primary {
				t.Errorf("call %d: %v, %v after %v; want the primary's answer after %v", i, resp, err, time.Since(start), primary)
			}
		}
		synctest.Wait()
		want := []tried{
			{Attempt: "1", At: delay, Code: codes.Unavailable, Pushback: "-1"},
			{Attempt: "0", At: 0, Code: codes.OK},
			{Attempt: "1", At: primary + delay, Code: codes.Unavailable, Pushback: "-1"},
			{Attempt: "0", At: primary, Code: codes.OK},
			{Attempt: "0", At: 2 * primary, Code: codes.OK},
		}
		if diff := cmp.Diff(want, e.tries.sent()); diff != "" {
			t.Errorf("attempts in the order answered (-want +got):\n%s", diff)
		}
		if n, s := shed.InFlight(), shed.Shed(); n != 0 || s != 2 {
			t.Errorf("in flight %d, shed %d; want 0 and 2", n, s)
		}
	})
}
