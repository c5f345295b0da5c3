package hedgegrpc_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// alwaysDown is a health server whose Check always fails with
// UNAVAILABLE, in trailers only: a failure that commits nothing.
// It counts the calls it gets.
type alwaysDown struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int32
}

func (s *alwaysDown) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.calls.Add(1)
	return nil, status.Error(codes.Unavailable, "down")
}

// A retry loop numbers its tries' attempts across the loop (hedge.Tries),
// so that after a few tries a call's attempts have numbers past
// hedge.MaxAttemptsLimit. CommitOnHeaders keeps what it knows of each
// attempt by the attempt's place in its call, not by that number, and a
// call hedged at a fixed hedgingDelay whose context carries an attempt
// number races through hedge.Do from its first attempt, as the handover
// from a primary run outside it knows Do's first attempt only as 0:
// every try sends one call, which fails with the server's UNAVAILABLE,
// the last as the first.
func TestCommitOnHeadersAcrossTries(t *testing.T) {
	eachUnaryKind(t, testCommitOnHeadersAcrossTries)
}

func testCommitOnHeadersAcrossTries(t *testing.T, fixed bool) {
	srv := &alwaysDown{}
	p := hedgegrpc.HedgingPolicy{MaxAttempts: 2, Delay: hedge.Fixed(time.Hour)}
	if fixed {
		p.Delay, p.HedgingDelay = nil, time.Hour
	}
	client := hedgedHealth(t, srv, p, grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()))

	ctx := context.Background()
	try := hedge.Tries(ctx, nil, func(ctx context.Context) (*healthpb.HealthCheckResponse, error) {
		return client.Check(ctx, &healthpb.HealthCheckRequest{})
	}, nil)
	const tries = 2 * hedge.MaxAttemptsLimit
	for n := range tries {
		if _, err := try(); status.Code(err) != codes.Unavailable {
			t.Fatalf("try %d: %v, want the server's UNAVAILABLE", n, err)
		}
	}
	if got := srv.calls.Load(); got != tries {
		t.Errorf("the server got %d calls, want one per try: %d", got, tries)
	}
}

// slowAfterDown fails its first call with UNAVAILABLE, and answers every
// later one after an hour and a half: the second try of a retry loop
// runs long enough for its hedge to fall due.
type slowAfterDown struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int32
}

func (s *slowAfterDown) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if s.calls.Add(1) == 1 {
		return nil, status.Error(codes.Unavailable, "down")
	}
	select {
	case <-time.After(90 * time.Minute):
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// The second try of a retry loop, hedged at a fixed hedgingDelay, hands
// its primary over to hedge.Do when its hedge falls due, as a first try
// does: the server sees that try's primary and one hedge, not a second
// primary.
func TestFixedDelayHandsOverInALaterTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &slowAfterDown{}
		client := hedgedHealth(t, srv, hedgegrpc.HedgingPolicy{MaxAttempts: 2, HedgingDelay: time.Hour})
		try := hedge.Tries(context.Background(), nil, func(ctx context.Context) (*healthpb.HealthCheckResponse, error) {
			return client.Check(ctx, &healthpb.HealthCheckRequest{})
		}, nil)
		if _, err := try(); status.Code(err) != codes.Unavailable {
			t.Fatalf("first try: %v, want the server's UNAVAILABLE", err)
		}
		resp, err := try()
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("second try: %v, %v; want SERVING", resp, err)
		}
		if got := srv.calls.Load(); got != 3 {
			t.Errorf("the server got %d calls, want 3: the first try's, the second's primary and its hedge", got)
		}
	})
}

// hedgedHealth serves svc over bufconn and returns a client whose Check is
// hedged under p, dialled with dial's options too.
func hedgedHealth(t *testing.T, svc healthpb.HealthServer, p hedgegrpc.HedgingPolicy, dial ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	hedging, err := hedgegrpc.New(hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": p}})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 16)
	const target = "passthrough:///bufconn"
	dial = append(append(hedging.DialOptions(target),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })), dial...)
	return healthpb.NewHealthClient(serveHealth(t, grpc.NewServer(), svc, lis, target, dial...))
}
