package hedgegrpc_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge/hedgegrpc"
)

// slowPrimary is an act whose first attempt of a call answers after
// 500ms and whose others answer after 10ms: a hedge at 100ms wins.
func slowPrimary(ctx context.Context) error {
	d := 10 * ms
	if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) == 0 {
		d = 500 * ms
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// stopPushback is an act that fails with UNAVAILABLE and a pushback that
// says not to retry.
func stopPushback(ctx context.Context) error {
	grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "-1"))
	return status.Error(codes.Unavailable, "shed")
}

// TestUnhedgedCallsCount: every call of the channel counts in the token
// bucket, as A6 says, those of methods that no policy hedges included.
// With 4 tokens and a ratio of 1, two failing hedged calls leave 1 token
// (the second sends no hedge); three successful calls of an unhedged
// method, unary or streaming, fill the bucket again, so that the next
// slow call is hedged, and the hedge wins. Failures of the unhedged
// method whose code no policy names non-fatal change nothing; two that
// carry a pushback saying not to retry drain the bucket to its threshold,
// and the next slow call goes unhedged.
func TestUnhedgedCallsCount(t *testing.T) {
	for _, unhedged := range []string{"Unhedged", "UnhedgedWatch"} {
		t.Run(unhedged, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newProbe(nil)
				p.acts = map[string]func(context.Context) error{
					"down": probeFails(0, codes.Unavailable), "slow": slowPrimary,
					"fails": probeFails(0, codes.Unavailable), "stop": stopPushback,
				}
				cfg := hedgegrpc.Config{
					Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": {
						MaxAttempts: 2, HedgingDelay: 100 * ms, NonFatalStatusCodes: unavailable}},
					RetryThrottling: &hedgegrpc.RetryThrottling{MaxTokens: 4, TokenRatio: 1},
				}
				e := newProbeEnv(t, p, cfg, nil)
				type step struct {
					Method, Call string
					Code         codes.Code
					Attempts     int
				}
				var got []step
				do := func(method, call string) {
					name := fmt.Sprintf("%s %d", call, len(got)) // the probe counts the attempts of each
					p.mu.Lock()
					p.acts[name] = p.acts[call]
					p.mu.Unlock()
					o := e.call(context.Background(), method, name)
					got = append(got, step{method, call, o.Code, o.Attempts})
				}
				want := []step{
					{"Check", "down", codes.Unavailable, 2}, // 4 → 3 → 2 tokens
					{"Check", "down", codes.Unavailable, 1}, // 2 → 1: no hedge
					{unhedged, "ok", codes.OK, 1},           // 2
					{unhedged, "ok", codes.OK, 1},           // 3
					{unhedged, "ok", codes.OK, 1},           // 4
					{"Check", "slow", codes.OK, 2},          // hedged; the hedge wins: 4
					{unhedged, "fails", codes.Unavailable, 1},
					{unhedged, "fails", codes.Unavailable, 1},
					{"Check", "slow", codes.OK, 2},           // still hedged
					{unhedged, "stop", codes.Unavailable, 1}, // 3
					{unhedged, "stop", codes.Unavailable, 1}, // 2
					{"Check", "slow", codes.OK, 1},           // not hedged
				}
				for _, s := range want {
					do(s.Method, s.Call)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// TestRetriedCallsDrainWithTheirCodes: a method that grpc-go retries
// counts in the bucket with the retryableStatusCodes of its retryPolicy
// as its non-fatal codes, once per call however often grpc-go retried
// it: two failing calls take the bucket of 4 down to its threshold, and
// the next slow call of the hedged method is not hedged. Without them,
// it would be.
func TestRetriedCallsDrainWithTheirCodes(t *testing.T) {
	for _, tt := range []struct {
		retryable string
		attempts  int // of the slow hedged call
	}{{`"UNAVAILABLE"`, 1}, {`"ABORTED"`, 2}} {
		t.Run(tt.retryable, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, err := hedgegrpc.ParseServiceConfig(`{"methodConfig": [
				  {"name": [{"service": "grpc.health.v1.Health", "method": "Check"}],
				   "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}},
				  {"name": [{"service": "` + unhedgedService + `"}],
				   "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
				                   "backoffMultiplier": 1, "retryableStatusCodes": [` + tt.retryable + `]}}],
				  "retryThrottling": {"maxTokens": 4, "tokenRatio": 1}}`)
				if err != nil {
					t.Fatal(err)
				}
				p := newProbe(probeFails(0, codes.Unavailable))
				p.acts = map[string]func(context.Context) error{"slow": slowPrimary}
				e := newProbeEnv(t, p, cfg, nil)
				for i := range 2 {
					if o := e.call(context.Background(), "Unhedged", fmt.Sprint(i)); o.Code != codes.Unavailable {
						t.Fatalf("call %d: %v, want Unavailable", i, o.Code)
					}
				}
				if o := e.call(context.Background(), "Check", "slow"); o.Code != codes.OK || o.Attempts != tt.attempts {
					t.Errorf("the slow call: %v in %d attempts, want OK in %d", o.Code, o.Attempts, tt.attempts)
				}
			})
		})
	}
}
