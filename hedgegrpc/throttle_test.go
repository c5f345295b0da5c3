package hedgegrpc_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// call is one call of a throttling test: the scenario it runs, and what
// the call decided.
type call struct {
	Name     string
	Code     codes.Code
	Attempts int
	Refused  int // hedges the bucket (or pushback) refused
	Winner   int
}

// runCalls makes the calls one after another and returns what each
// decided.
func runCalls(t *testing.T, e *env, obs *reports, names ...string) []call {
	t.Helper()
	var got []call
	for _, name := range names {
		_, err := e.client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		synctest.Wait() // the losers' Done reaches the bucket
		r := obs.take()
		if len(r) != 1 {
			t.Fatalf("call %q: %d reports, want 1", name, len(r))
		}
		got = append(got, call{Name: name, Code: status.Code(err), Attempts: r[0].Attempts, Refused: r[0].BudgetRefusals, Winner: r[0].Winner})
	}
	return got
}

// TestThrottling drives A6's token bucket through a real channel: non-fatal
// failures drain it until hedging stops, fatal ones do not touch it, and
// successes refill it until hedging resumes.
func TestThrottling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &reports{}
		cfg := hedgegrpc.Config{
			Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
				MaxAttempts: 3, HedgingDelay: 100 * ms, NonFatalStatusCodes: unavailable,
			}},
			// 4 tokens; no hedges at 2 or fewer; a success refills half a token.
			RetryThrottling: &hedgegrpc.RetryThrottling{MaxTokens: 4, TokenRatio: 0.5},
			Observer:        obs,
		}
		e := newEnv(t, cfg, map[string][]step{
			"bad":  {fail(ms, codes.InvalidArgument)},
			"down": {fail(ms, codes.Unavailable), fail(ms, codes.Unavailable), fail(ms, codes.Unavailable)},
			"slow": {ok(500 * ms), ok(10 * ms)}, // a hedge wins if it is sent
			"ok":   {ok(ms)},
		})
		down := []call{
			// tokens 4 → 3 → 2: the third attempt is refused.
			{Name: "down", Code: codes.Unavailable, Attempts: 2, Refused: 1, Winner: 1},
			// 2 → 1: no hedge at all.
			{Name: "down", Code: codes.Unavailable, Attempts: 1, Refused: 1, Winner: 0},
		}
		var want []call
		for range 5 {
			want = append(want, call{Name: "bad", Code: codes.InvalidArgument, Attempts: 1})
		}
		want = append(want, down...)
		want = append(want,
			// 1 token: the slow primary is not hedged; its success: 1.5.
			call{Name: "slow", Attempts: 1, Refused: 1, Winner: 0},
			call{Name: "ok", Attempts: 1}, // 2
			call{Name: "ok", Attempts: 1}, // 2.5
			// Above half again: the hedge goes out and wins; 3. The cancelled
			// primary changes nothing.
			call{Name: "slow", Attempts: 2, Winner: 1},
			// 3 → 2 at the first failure, which is the threshold: no hedge.
			call{Name: "down", Code: codes.Unavailable, Attempts: 1, Refused: 1, Winner: 0},
		)
		names := make([]string, len(want))
		for i, c := range want {
			names[i] = c.Name
		}
		if diff := cmp.Diff(want, runCalls(t, e, obs, names...)); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}

// TestPushbackStopDrains: A6 counts a failure whose pushback says not to
// retry against the bucket, even when its code is fatal.
func TestPushbackStopDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &reports{}
		cfg := hedgegrpc.Config{
			Methods: map[string]hedgegrpc.HedgingPolicy{"": {
				MaxAttempts: 2, HedgingDelay: 100 * ms, NonFatalStatusCodes: unavailable,
			}},
			RetryThrottling: &hedgegrpc.RetryThrottling{MaxTokens: 2, TokenRatio: 1},
			Observer:        obs,
		}
		e := newEnv(t, cfg, map[string][]step{
			"bad":      {fail(ms, codes.InvalidArgument)},
			"bad-stop": {pushback(ms, codes.InvalidArgument, "-1")},
			"slow":     {ok(500 * ms), ok(10 * ms)},
		})
		want := []call{
			{Name: "bad", Code: codes.InvalidArgument, Attempts: 1},      // 2 tokens
			{Name: "slow", Attempts: 2, Winner: 1},                       // still hedged
			{Name: "bad-stop", Code: codes.InvalidArgument, Attempts: 1}, // 2 → 1
			{Name: "slow", Attempts: 1, Refused: 1},                      // throttled
		}
		got := runCalls(t, e, obs, "bad", "slow", "bad-stop", "slow")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}

var _ hedge.Observer = (*reports)(nil)
