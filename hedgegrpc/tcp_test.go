package hedgegrpc_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge/hedgegrpc"
)

// TestLoopbackTCP hedges over a real TCP connection on 127.0.0.1. Real
// time has no exact instants, so these tests check order and outcome:
// which attempt won, what the server saw and which attempts it saw
// cancelled.
func TestLoopbackTCP(t *testing.T) {
	atOnce := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
		"grpc.health.v1.Health/Check": {MaxAttempts: 3, NonFatalStatusCodes: unavailable},
	}}
	ignoreTimes := cmpopts.IgnoreFields(event{}, "Start", "End")

	t.Run("concurrent calls each get their winner's reply", func(t *testing.T) {
		e := newTCPEnv(t, atOnce, map[string][]step{"race": {ok(0), ok(0), ok(0)}})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				// The caller reuses its request and reply, as it may once a
				// call has returned, while losers may still be running.
				req, reply := &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}
				for i := range 25 {
					req.Service = fmt.Sprintf("race#%d.%d", g, i)
					var trailer metadata.MD
					err := e.conn.Invoke(context.Background(), check, req, reply, grpc.Trailer(&trailer))
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
	})

	t.Run("a fatal code cancels the others on the server", func(t *testing.T) {
		e := newTCPEnv(t, atOnce, map[string][]step{"fatal": {
			hang(),
			{awaitAll: true, code: codes.InvalidArgument},
			hang(),
		}})
		_, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "fatal"})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("err = %v, want InvalidArgument", err)
		}
		want := []event{
			{Call: "fatal", Canceled: true},
			{Call: "fatal", Attempt: 1, Previous: "1"},
			{Call: "fatal", Attempt: 2, Previous: "2", Canceled: true},
		}
		got := e.srv.awaitEvents(t, 3)
		if diff := cmp.Diff(want, sortByAttempt(got), ignoreTimes); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})

	t.Run("a hedge after the delay wins; the primary is cancelled", func(t *testing.T) {
		cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
			"grpc.health.v1.Health": {MaxAttempts: 2, HedgingDelay: 5 * ms},
		}}
		// The hedge answers once the primary has reached the server: a
		// primary cancelled before it was sent would never be seen.
		e := newTCPEnv(t, cfg, map[string][]step{"slow": {hang(), {awaitPrimary: true}}})
		var trailer metadata.MD
		resp, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "slow"}, grpc.Trailer(&trailer))
		if err != nil || resp.GetStatus() != statusOf(1) || trailer.Get("attempt")[0] != "1" {
			t.Fatalf("Check = %v, %v, trailer %v; want attempt 1's reply", resp, err, trailer)
		}
		want := []event{
			{Call: "slow", Canceled: true},
			{Call: "slow", Attempt: 1, Previous: "1"},
		}
		if diff := cmp.Diff(want, sortByAttempt(e.srv.awaitEvents(t, 2)), ignoreTimes); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}

func sortByAttempt(ev []event) []event {
	slices.SortFunc(ev, func(a, b event) int { return a.Attempt - b.Attempt })
	return ev
}
