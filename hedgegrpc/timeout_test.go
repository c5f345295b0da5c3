package hedgegrpc_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge/hedgegrpc"
)

// TestMethodTimeoutBoundsTheCall: the timeout of a hedged method's
// service config bounds the whole call, as A6 asks, where grpc-go alone
// gives each attempt a timeout of its own. Every attempt fails with
// UNAVAILABLE after 150ms, which starts the next at once: with a timeout
// per attempt, five attempts would take 750ms; the call ends at 200ms,
// with DEADLINE_EXCEEDED, during its second attempt. The timeout comes
// from the default document, from one beside a Config's Methods given in
// Go, or from the resolver's.
func TestMethodTimeoutBoundsTheCall(t *testing.T) {
	const hedged = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "timeout": "0.2s",
	  "hedgingPolicy": {"maxAttempts": 5, "hedgingDelay": "1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`
	inGo := hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
			MaxAttempts: 5, HedgingDelay: time.Second, NonFatalStatusCodes: unavailable}},
		ServiceConfig: `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "timeout": "0.2s"}]}`,
	}
	byDefault, err := hedgegrpc.ParseServiceConfig(hedged)
	if err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"Check", "Watch"} {
		for _, tt := range []struct {
			name     string
			cfg      hedgegrpc.Config
			resolved bool
		}{
			{"default config", byDefault, false},
			{"Methods in Go", inGo, false},
			{"resolver's config", hedgegrpc.Config{}, true},
		} {
			t.Run(method+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var r *manual.Resolver
					if tt.resolved {
						r = manual.NewBuilderWithScheme("hedgetest")
					}
					e := newProbeEnv(t, newProbe(probeFails(150*ms, codes.Unavailable)), tt.cfg, r)
					if r != nil {
						push(t, r, hedged)
					}
					got := e.call(context.Background(), method, "c")
					want := outcome{Code: codes.DeadlineExceeded, At: 200 * ms, Attempts: 2}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("(-want +got)\n%s", diff)
					}
				})
			})
		}
	}
}

// TestMethodTimeoutBoundsTheCommittedStream: a hedged stream that
// committed keeps the deadline of the whole call. The primary fails at
// 150ms; the hedge then sends its reply at once, which commits the call,
// and stalls: the stream ends at 200ms, the call's timeout, not at 350ms,
// which the hedge's own timeout would give it.
func TestMethodTimeoutBoundsTheCommittedStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := hedgegrpc.ParseServiceConfig(`{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
		  "timeout": "0.2s", "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`)
		if err != nil {
			t.Fatal(err)
		}
		p := newProbe(primaryFails(150*ms, codes.Unavailable))
		p.then = stalls
		e := newProbeEnv(t, p, cfg, nil)
		w, err := e.client.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "c"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatalf("the first reply: %v", err)
		}
		_, err = w.Recv()
		got := outcome{Code: status.Code(err), At: time.Since(e.t0), Attempts: e.p.attemptsOf("c")}
		if diff := cmp.Diff(outcome{Code: codes.DeadlineExceeded, At: 200 * ms, Attempts: 2}, got); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}
