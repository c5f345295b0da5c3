package hedgegrpc_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// result is what a test observes of one hedged call: its answer as the
// caller got it, when it returned, and every attempt as the server saw it.
type result struct {
	Code    codes.Code
	Message string
	Status  healthpb.HealthCheckResponse_ServingStatus // the reply
	Trailer []string                                   // the trailer's "attempt": whose answer it was
	At      time.Duration
	Events  []event
}

// run makes one call of scenario name in e, and returns what happened.
func (e *env) run(ctx context.Context, name string) result {
	var trailer metadata.MD
	resp, err := e.client.Check(ctx, &healthpb.HealthCheckRequest{Service: name}, grpc.Trailer(&trailer))
	r := result{At: time.Since(e.srv.t0), Trailer: trailer.Get("attempt")}
	st := status.Convert(err)
	r.Code, r.Message = st.Code(), st.Message()
	r.Status = resp.GetStatus()
	synctest.Wait() // let the losers' handlers see their cancellation
	r.Events = e.srv.seenEvents()
	return r
}

func hang() step { return step{hang: true} }

func ok(after time.Duration) step { return step{after: after} }

func fail(after time.Duration, c codes.Code) step { return step{after: after, code: c} }

func pushback(after time.Duration, c codes.Code, v string) step {
	return step{after: after, code: c, pushback: v}
}

var unavailable = []codes.Code{codes.Unavailable}

// TestA6 checks the hedging semantics of gRFC A6 against a real gRPC
// server, in virtual time: every time is exact.
func TestA6(t *testing.T) {
	const d = 100 * ms
	hedging := func(max int) hedgegrpc.HedgingPolicy {
		return hedgegrpc.HedgingPolicy{MaxAttempts: max, HedgingDelay: d, NonFatalStatusCodes: unavailable}
	}
	const c = "c"
	tests := []struct {
		name    string
		policy  hedgegrpc.HedgingPolicy
		timeout time.Duration
		cancel  time.Duration // when the caller cancels; 0: never
		steps   []step
		want    result
	}{{
		name:   "the primary answers before the delay: no hedge",
		policy: hedging(3),
		steps:  []step{ok(50 * ms)},
		want: result{Status: statusOf(0), Trailer: []string{"0"}, At: 50 * ms, Events: []event{
			{Call: c, Start: 0, End: 50 * ms},
		}},
	}, {
		name:   "hedges at 0, d and 2d; the third wins and cancels the others",
		policy: hedging(3),
		steps:  []step{hang(), hang(), ok(10 * ms)},
		want: result{Status: statusOf(2), Trailer: []string{"2"}, At: 210 * ms, Events: []event{
			{Call: c, Start: 0, End: 210 * ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: 210 * ms, Canceled: true},
			{Call: c, Attempt: 2, Previous: "2", Start: 2 * d, End: 210 * ms},
		}},
	}, {
		name:   "hedgingDelay 0 sends every attempt at once",
		policy: hedgegrpc.HedgingPolicy{MaxAttempts: 3, NonFatalStatusCodes: unavailable},
		steps:  []step{hang(), ok(30 * ms), hang()},
		want: result{Status: statusOf(1), Trailer: []string{"1"}, At: 30 * ms, Events: []event{
			{Call: c, Start: 0, End: 30 * ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: 0, End: 30 * ms},
			{Call: c, Attempt: 2, Previous: "2", Start: 0, End: 30 * ms, Canceled: true},
		}},
	}, {
		name:   "a non-fatal code sends the next at once; later ones resume at hedgingDelay",
		policy: hedging(4),
		steps:  []step{fail(30*ms, codes.Unavailable), hang(), hang(), ok(10 * ms)},
		want: result{Status: statusOf(3), Trailer: []string{"3"}, At: 240 * ms, Events: []event{
			{Call: c, Start: 0, End: 30 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: 30 * ms, End: 240 * ms, Canceled: true},
			{Call: c, Attempt: 2, Previous: "2", Start: 130 * ms, End: 240 * ms, Canceled: true},
			{Call: c, Attempt: 3, Previous: "3", Start: 230 * ms, End: 240 * ms},
		}},
	}, {
		name:   "a fatal code cancels everything and is returned",
		policy: hedging(3),
		steps:  []step{hang(), fail(20*ms, codes.InvalidArgument), hang()},
		want: result{Code: codes.InvalidArgument, Message: "c attempt 1", Trailer: []string{"1"}, At: 120 * ms, Events: []event{
			{Call: c, Start: 0, End: 120 * ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: 120 * ms},
		}},
	}, {
		name:   "when every attempt fails, the last failure is returned",
		policy: hedging(3),
		steps:  []step{fail(30*ms, codes.Unavailable), fail(50*ms, codes.Unavailable), fail(10*ms, codes.Unavailable)},
		want: result{Code: codes.Unavailable, Message: "c attempt 2", Trailer: []string{"2"}, At: 90 * ms, Events: []event{
			{Call: c, Start: 0, End: 30 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: 30 * ms, End: 80 * ms},
			{Call: c, Attempt: 2, Previous: "2", Start: 80 * ms, End: 90 * ms},
		}},
	}, {
		name:    "the call's deadline covers every attempt",
		policy:  hedging(5),
		timeout: 250 * ms,
		steps:   []step{hang(), hang(), hang(), hang(), hang()},
		want: result{Code: codes.DeadlineExceeded, Message: "context deadline exceeded", At: 250 * ms, Events: []event{
			{Call: c, Start: 0, End: 250 * ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: 250 * ms, Canceled: true},
			{Call: c, Attempt: 2, Previous: "2", Start: 2 * d, End: 250 * ms, Canceled: true},
		}},
	}, {
		name:   "the caller cancelling cancels every attempt",
		policy: hedging(5),
		cancel: 150 * ms,
		steps:  []step{hang(), hang(), hang(), hang(), hang()},
		want: result{Code: codes.Canceled, Message: "context canceled", At: 150 * ms, Events: []event{
			{Call: c, Start: 0, End: 150 * ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: 150 * ms, Canceled: true},
		}},
	}, {
		name:   "maxAttempts above 5 is treated as 5",
		policy: hedgegrpc.HedgingPolicy{MaxAttempts: 9, NonFatalStatusCodes: unavailable},
		steps:  []step{hang(), hang(), hang(), hang(), ok(10 * ms), ok(0), ok(0), ok(0), ok(0)},
		want: result{Status: statusOf(4), Trailer: []string{"4"}, At: 10 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", End: 10 * ms, Canceled: true},
			{Call: c, Attempt: 2, Previous: "2", End: 10 * ms, Canceled: true},
			{Call: c, Attempt: 3, Previous: "3", End: 10 * ms, Canceled: true},
			{Call: c, Attempt: 4, Previous: "4", End: 10 * ms},
		}},
	}, {
		name: "a Delay from the core replaces hedgingDelay",
		policy: hedgegrpc.HedgingPolicy{MaxAttempts: 3, Delay: hedge.DelayFunc(func(_ context.Context, k int) time.Duration {
			return []time.Duration{30 * ms, 70 * ms}[k]
		})},
		steps: []step{hang(), hang(), ok(5 * ms)},
		want: result{Status: statusOf(2), Trailer: []string{"2"}, At: 105 * ms, Events: []event{
			{Call: c, Start: 0, End: 105 * ms, Canceled: true},
			{Call: c, Attempt: 1, Previous: "1", Start: 30 * ms, End: 105 * ms, Canceled: true},
			{Call: c, Attempt: 2, Previous: "2", Start: 100 * ms, End: 105 * ms},
		}},
	}, {
		name:   "pushback n: the next hedge after n ms, later ones at n + hedgingDelay",
		policy: hedging(3),
		steps:  []step{pushback(10*ms, codes.Unavailable, "300"), hang(), ok(5 * ms)},
		want: result{Status: statusOf(2), Trailer: []string{"2"}, At: 415 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: 310 * ms, End: 415 * ms, Canceled: true},
			{Call: c, Attempt: 2, Previous: "2", Start: 410 * ms, End: 415 * ms},
		}},
	}, {
		name:   "pushback n holds back the next hedge even after another non-fatal failure",
		policy: hedging(4),
		steps:  []step{fail(150*ms, codes.Unavailable), pushback(10*ms, codes.Unavailable, "300"), hang(), ok(5 * ms)},
		want: result{Status: statusOf(3), Trailer: []string{"3"}, At: 515 * ms, Events: []event{
			{Call: c, Start: 0, End: 150 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: 110 * ms},
			{Call: c, Attempt: 2, Previous: "2", Start: 410 * ms, End: 515 * ms, Canceled: true},
			{Call: c, Attempt: 3, Previous: "3", Start: 510 * ms, End: 515 * ms},
		}},
	}, {
		name:   "pushback -1: no more hedges, but the attempts in flight run on",
		policy: hedging(3),
		steps:  []step{ok(200 * ms), pushback(10*ms, codes.Unavailable, "-1"), ok(0)},
		want: result{Status: statusOf(0), Trailer: []string{"0"}, At: 200 * ms, Events: []event{
			{Call: c, Start: 0, End: 200 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: d, End: 110 * ms},
		}},
	}, {
		name:   "malformed pushback: no more hedges; with nothing in flight, its failure is returned",
		policy: hedging(3),
		steps:  []step{pushback(10*ms, codes.Unavailable, "soon"), ok(0), ok(0)},
		want: result{Code: codes.Unavailable, Message: "c attempt 0", Trailer: []string{"0"}, At: 10 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms},
		}},
	}, {
		name:   "pushback n on a fatal code changes nothing",
		policy: hedging(3),
		steps:  []step{pushback(10*ms, codes.NotFound, "300"), ok(0), ok(0)},
		want: result{Code: codes.NotFound, Message: "c attempt 0", Trailer: []string{"0"}, At: 10 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms},
		}},
	}, {
		name:    "pushback past the deadline ends hedging with the server's failure",
		policy:  hedging(3),
		timeout: 200 * ms,
		steps:   []step{pushback(10*ms, codes.Unavailable, "500"), ok(0), ok(0)},
		want: result{Code: codes.Unavailable, Message: "c attempt 0", Trailer: []string{"0"}, At: 10 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms},
		}},
	}, {
		name:   "pushback after the last attempt started does not delay the answer",
		policy: hedgegrpc.HedgingPolicy{MaxAttempts: 2, NonFatalStatusCodes: unavailable},
		steps:  []step{pushback(10*ms, codes.Unavailable, "300"), fail(50*ms, codes.Unavailable)},
		want: result{Code: codes.Unavailable, Message: "c attempt 1", Trailer: []string{"1"}, At: 50 * ms, Events: []event{
			{Call: c, Start: 0, End: 10 * ms},
			{Call: c, Attempt: 1, Previous: "1", Start: 0, End: 50 * ms},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
					"grpc.health.v1.Health/Check": tt.policy,
				}}
				e := newEnv(t, cfg, map[string][]step{c: tt.steps})
				ctx := context.Background()
				if tt.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				if tt.cancel > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer time.AfterFunc(tt.cancel, cancel).Stop()
				}
				if diff := cmp.Diff(tt.want, e.run(ctx, c)); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}
