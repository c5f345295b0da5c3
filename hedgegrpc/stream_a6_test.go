package hedgegrpc_test

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge/hedgegrpc"
)

// streamResult is what a test observes of one hedged bidi stream: the
// replies and the final status as the caller got them, when the stream
// ended, and every attempt as the server saw it.
type streamResult struct {
	Replies []string
	Code    codes.Code
	Message string
	At      time.Duration
	Seen    []seen
}

// sends is what the caller sends: m1 at once, the rest after a pause,
// then CloseSend.
type sends struct {
	pause time.Duration
	later []string
}

// runStream makes one bidi call of scenario name, and returns what
// happened.
func (e *streamEnv) runStream(t *testing.T, ctx context.Context, name string, s sends) streamResult {
	t.Helper()
	stream, err := e.client.FullDuplexCall(callCtx(ctx, name))
	var r streamResult
	if err == nil {
		err = stream.Send(duplex("m1"))
	}
	if err == nil && len(s.later) > 0 {
		time.Sleep(s.pause) // virtual: the bubble's clock
		for _, m := range s.later {
			if err = stream.Send(duplex(m)); err != nil {
				break
			}
		}
	}
	if err == io.EOF {
		// The stream ended before the caller was done sending: as with
		// grpc-go's streams, Recv tells how.
		err = nil
	}
	if err == nil {
		stream.CloseSend()
		for {
			m, rerr := stream.Recv()
			if rerr != nil {
				if rerr != io.EOF {
					err = rerr
				}
				break
			}
			r.Replies = append(r.Replies, string(m.GetPayload().GetBody()))
		}
	}
	r.At = time.Since(e.srv.t0)
	st := status.Convert(err)
	r.Code, r.Message = st.Code(), st.Message()
	synctest.Wait() // let the losers' handlers see their cancellation
	r.Seen = e.srv.seen(name)
	return r
}

// Scripts for the attempts of a bidi stream.
var (
	// hangs receives until the caller closes, then waits to be cancelled.
	hangs script = func(h *side) error {
		if err := h.RecvAll(); err != nil {
			return err
		}
		return h.Hang()
	}
	// failsAfter receives the first message (a server-streaming call's
	// has come already), waits d and fails with c, and pushback in the
	// trailer if set.
	failsAfter = func(d time.Duration, c codes.Code, pushback string) script {
		return func(h *side) error {
			if len(h.got) == 0 {
				if err := h.RecvN(1); err != nil {
					return err
				}
			}
			if err := h.Sleep(d); err != nil {
				return err
			}
			return h.Fail(c, pushback)
		}
	}
	// answersAfter receives until the caller closes, waits d and sends
	// one reply naming the attempt.
	answersAfter = func(d time.Duration) script {
		return func(h *side) error {
			if err := h.RecvAll(); err != nil {
				return err
			}
			if err := h.Sleep(d); err != nil {
				return err
			}
			return h.Send("r" + string(rune('0'+h.k)))
		}
	}
)

// streamCase is one scenario of A6's hedging of a stream, and what the
// caller and the server see of it.
type streamCase struct {
	name    string
	policy  hedgegrpc.HedgingPolicy
	timeout time.Duration
	cancel  time.Duration // when the caller cancels; 0: never
	sends   sends         // what a bidi caller sends after m1
	scripts []script
	want    streamResult
}

// streamA6Cases are the scenarios of TestStreamA6 and
// TestServerStreamA6.
func streamA6Cases() []streamCase {
	const d = 100 * ms
	hedging := func(max int) hedgegrpc.HedgingPolicy {
		return hedgegrpc.HedgingPolicy{MaxAttempts: max, HedgingDelay: d, NonFatalStatusCodes: unavailable}
	}
	m1 := []string{"m1"}
	return []streamCase{{
		name:    "the primary answers before the delay: no hedge",
		policy:  hedging(3),
		scripts: []script{answersAfter(50 * ms)},
		want:    streamResult{Replies: []string{"r0"}, At: 50 * ms, Seen: []seen{{Received: m1, End: 50 * ms}}},
	}, {
		name:    "hedges at 0, d and 2d; the third's header commits and cancels the others",
		policy:  hedging(3),
		scripts: []script{hangs, hangs, answersAfter(10 * ms)},
		want: streamResult{Replies: []string{"r2"}, At: 210 * ms, Seen: []seen{
			{Attempt: 0, Received: m1, End: 210 * ms, Canceled: true},
			{Attempt: 1, Received: m1, Start: d, End: 210 * ms, Canceled: true},
			{Attempt: 2, Received: m1, Start: 2 * d, End: 210 * ms},
		}},
	}, {
		name:    "a hedge started mid-stream gets what was sent before it from the buffer",
		policy:  hedging(3),
		sends:   sends{pause: 50 * ms, later: []string{"m2", "m3"}},
		scripts: []script{hangs, answersAfter(0)},
		want: streamResult{Replies: []string{"r1"}, At: d, Seen: []seen{
			{Attempt: 0, Received: []string{"m1", "m2", "m3"}, End: d, Canceled: true},
			{Attempt: 1, Received: []string{"m1", "m2", "m3"}, Start: d, End: d},
		}},
	}, {
		name:    "a non-fatal code starts the next at once; later ones resume at the delay",
		policy:  hedging(3),
		scripts: []script{failsAfter(30*ms, codes.Unavailable, ""), hangs, answersAfter(10 * ms)},
		want: streamResult{Replies: []string{"r2"}, At: 140 * ms, Seen: []seen{
			{Attempt: 0, Received: m1, End: 30 * ms},
			{Attempt: 1, Received: m1, Start: 30 * ms, End: 140 * ms, Canceled: true},
			{Attempt: 2, Received: m1, Start: 130 * ms, End: 140 * ms},
		}},
	}, {
		name:    "a fatal code ends the call with it and cancels the others",
		policy:  hedging(3),
		scripts: []script{hangs, failsAfter(20*ms, codes.InvalidArgument, ""), hangs},
		want: streamResult{Code: codes.InvalidArgument, Message: "c attempt 1", At: 120 * ms, Seen: []seen{
			{Attempt: 0, Received: m1, End: 120 * ms, Canceled: true},
			{Attempt: 1, Received: m1, Start: d, End: 120 * ms},
		}},
	}, {
		name:   "when every attempt fails, the last failure is returned",
		policy: hedging(3),
		scripts: []script{failsAfter(30*ms, codes.Unavailable, ""), failsAfter(50*ms, codes.Unavailable, ""),
			failsAfter(10*ms, codes.Unavailable, "")},
		want: streamResult{Code: codes.Unavailable, Message: "c attempt 2", At: 90 * ms, Seen: []seen{
			{Attempt: 0, Received: m1, End: 30 * ms},
			{Attempt: 1, Received: m1, Start: 30 * ms, End: 80 * ms},
			{Attempt: 2, Received: m1, Start: 80 * ms, End: 90 * ms},
		}},
	}, {
		name:    "pushback n: the next hedge after n ms, later ones at n + the delay",
		policy:  hedging(3),
		scripts: []script{failsAfter(10*ms, codes.Unavailable, "300"), hangs, answersAfter(5 * ms)},
		want: streamResult{Replies: []string{"r2"}, At: 415 * ms, Seen: []seen{
			{Attempt: 0, Received: m1, End: 10 * ms},
			{Attempt: 1, Received: m1, Start: 310 * ms, End: 415 * ms, Canceled: true},
			{Attempt: 2, Received: m1, Start: 410 * ms, End: 415 * ms},
		}},
	}, {
		name:    "pushback -1: no more hedges, but the attempts in flight run on",
		policy:  hedging(3),
		scripts: []script{answersAfter(200 * ms), failsAfter(10*ms, codes.Unavailable, "-1"), answersAfter(0)},
		want: streamResult{Replies: []string{"r0"}, At: 200 * ms, Seen: []seen{
			{Attempt: 0, Received: m1, End: 200 * ms},
			{Attempt: 1, Received: m1, Start: d, End: 110 * ms},
		}},
	}, {
		name:    "a stream that ends OK without a header or a message commits",
		policy:  hedging(3),
		scripts: []script{func(h *side) error { return h.Sleep(30 * ms) }},
		want:    streamResult{At: 30 * ms, Seen: []seen{{End: 30 * ms}}},
	}, {
		name:    "the call's deadline covers every attempt",
		policy:  hedging(5),
		timeout: 250 * ms,
		scripts: []script{hangs, hangs, hangs, hangs, hangs},
		want: streamResult{Code: codes.DeadlineExceeded, Message: "context deadline exceeded", At: 250 * ms, Seen: []seen{
			{Attempt: 0, Received: m1, End: 250 * ms, Canceled: true},
			{Attempt: 1, Received: m1, Start: d, End: 250 * ms, Canceled: true},
			{Attempt: 2, Received: m1, Start: 2 * d, End: 250 * ms, Canceled: true},
		}},
	}, {
		name:    "the caller cancelling cancels every attempt",
		policy:  hedging(5),
		cancel:  150 * ms,
		scripts: []script{hangs, hangs, hangs},
		want: streamResult{Code: codes.Canceled, Message: "context canceled", At: 150 * ms, Seen: []seen{
			{Attempt: 0, Received: m1, End: 150 * ms, Canceled: true},
			{Attempt: 1, Received: m1, Start: d, End: 150 * ms, Canceled: true},
		}},
	}}
}

// TestStreamA6 checks A6's hedging of a bidi stream against a real gRPC
// server, in virtual time: every time is exact.
func TestStreamA6(t *testing.T) {
	for _, tt := range streamA6Cases() {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newStreamEnv(t, hedgeStreams(tt.policy, nil), map[string][]script{"c": tt.scripts}, false)
				if diff := cmp.Diff(tt.want, e.runStream(t, tt.ctx(t), "c", tt.sends)); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// ctx is the caller's context of tc: with its timeout, and cancelled at
// its time, until the test ends.
func (tc streamCase) ctx(t *testing.T) context.Context {
	ctx := context.Background()
	if tc.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, tc.timeout)
		t.Cleanup(cancel)
	}
	if tc.cancel > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		timer := time.AfterFunc(tc.cancel, cancel)
		t.Cleanup(func() { timer.Stop() })
	}
	return ctx
}

// TestStreamThrottling drives A6's token bucket with streams: failures
// with a non-fatal code before the commit drain it, and a committed
// stream counts when it ends, a success refilling it and a non-fatal
// failure draining it.
func TestStreamThrottling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &reports{}
		cfg := hedgeStreams(hedgegrpc.HedgingPolicy{MaxAttempts: 3, HedgingDelay: 100 * ms, NonFatalStatusCodes: unavailable}, obs)
		// 4 tokens; no hedges at 2 or fewer; a success refills half a token.
		cfg.RetryThrottling = &hedgegrpc.RetryThrottling{MaxTokens: 4, TokenRatio: 0.5}
		down := failsAfter(ms, codes.Unavailable, "")
		e := newStreamEnv(t, cfg, map[string][]script{
			"down": {down, down, down},
			"slow": {answersAfter(500 * ms), answersAfter(10 * ms)}, // a hedge wins if it is sent
			"ok":   {answersAfter(ms)},
			"late": {func(h *side) error { // commits, then fails
				if err := h.Send("r0"); err != nil {
					return err
				}
				return h.Fail(codes.Unavailable, "")
			}},
		}, false)
		type call struct {
			Name     string
			Code     codes.Code
			Attempts int
			Refused  int
			Winner   int
		}
		run := func(names ...string) []call {
			var got []call
			for _, name := range names {
				r := e.runStream(t, context.Background(), name, sends{})
				reps := obs.take()
				if len(reps) != 1 {
					t.Fatalf("call %q: %d reports, want 1", name, len(reps))
				}
				got = append(got, call{name, r.Code, reps[0].Attempts, reps[0].BudgetRefusals, reps[0].Winner})
			}
			return got
		}
		want := []call{
			{Name: "down", Code: codes.Unavailable, Attempts: 2, Refused: 1, Winner: 1}, // 4 → 3 → 2: the third is refused
			{Name: "slow", Attempts: 1, Refused: 1},                                     // still 2: no hedge; the primary ends OK: 2.5
			{Name: "slow", Attempts: 2, Winner: 1},                                      // 2.5: hedged; the winner's end: 3
			{Name: "late", Code: codes.Unavailable, Attempts: 1},                        // committed, then failed: 2
			{Name: "slow", Attempts: 1, Refused: 1},                                     // 2: no hedge; 2.5
		}
		if diff := cmp.Diff(want, run("down", "slow", "slow", "late", "slow")); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}
