package hedgegrpc_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// ignoreTimes leaves timing out of comparisons over real connections,
// which have no exact instants: these tests check order and outcome.
var ignoreTimes = cmpopts.IgnoreFields(seen{}, "Start", "End")

// hedgeStreams hedges every method of TestService with policy.
func hedgeStreams(policy hedgegrpc.HedgingPolicy, obs hedge.Observer) hedgegrpc.Config {
	return hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.testing.TestService": policy}, Observer: obs}
}

// recvBodies receives until the stream ends and returns the bodies and
// the final error (nil for io.EOF).
func recvBodies(s grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse]) ([]string, error) {
	var bodies []string
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return bodies, nil
		}
		if err != nil {
			return bodies, err
		}
		bodies = append(bodies, string(m.GetPayload().GetBody()))
	}
}

// TestStreamHedgeWinsMidStream: a bidi stream whose primary stalls after
// the client has sent two messages is won by the hedge, which receives
// both from the buffer and, once it is committed, what the client sends
// after. The hedge starts either after a non-fatal failure of the
// primary (at once, so after both messages, from the buffer) or after the
// hedging delay.
func TestStreamHedgeWinsMidStream(t *testing.T) {
	tests := []struct {
		name    string
		policy  hedgegrpc.HedgingPolicy
		primary script
		want0   seen
	}{{
		name:   "after a non-fatal failure",
		policy: hedgegrpc.HedgingPolicy{MaxAttempts: 2, HedgingDelay: time.Hour, NonFatalStatusCodes: unavailable},
		primary: func(h *side) error {
			if err := h.RecvN(2); err != nil {
				return err
			}
			return h.Fail(codes.Unavailable, "")
		},
		want0: seen{Received: []string{"m1", "m2"}},
	}, {
		name:   "after the hedging delay",
		policy: hedgegrpc.HedgingPolicy{MaxAttempts: 2, HedgingDelay: ms, NonFatalStatusCodes: unavailable},
		primary: func(h *side) error {
			if err := h.RecvN(2); err != nil {
				return err
			}
			return h.Hang()
		},
		want0: seen{Received: []string{"m1", "m2"}, Canceled: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stats := &hedge.Stats{}
			e := newStreamEnv(t, hedgeStreams(tt.policy, stats), map[string][]script{"mid": {
				tt.primary,
				func(h *side) error {
					if err := h.RecvN(2); err != nil {
						return err
					}
					// Answer once the primary has both: then it is the
					// commit that cancels it, not a race.
					if err := h.Await("0 got m2"); err != nil {
						return err
					}
					if err := h.Send("r2"); err != nil {
						return err
					}
					for {
						body, err := h.Recv()
						if err == io.EOF {
							return nil
						} else if err != nil {
							return err
						}
						if err := h.Send("r-" + body); err != nil {
							return err
						}
					}
				},
			}}, true)
			var header, trailer metadata.MD
			var p peer.Peer
			var finished []error
			s, err := e.client.FullDuplexCall(callCtx(context.Background(), "mid"),
				grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p),
				grpc.OnFinish(func(err error) { finished = append(finished, err) }))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"m1", "m2"} {
				if err := s.Send(duplex(m)); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			r, err := s.Recv()
			got = append(got, string(r.GetPayload().GetBody()))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(duplex("m3")); err != nil {
				t.Fatal(err)
			}
			if r, err = s.Recv(); err != nil {
				t.Fatal(err)
			}
			got = append(got, string(r.GetPayload().GetBody()))
			if err := s.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err != io.EOF {
				t.Fatalf("Recv after CloseSend = %v, want io.EOF", err)
			}
			if diff := cmp.Diff([]string{"r2", "r-m3"}, got); diff != "" {
				t.Errorf("replies (-want +got)\n%s", diff)
			}
			if h, tr := header.Get("attempt"), trailer.Get("attempt"); len(h) != 1 || h[0] != "1" || len(tr) != 1 || tr[0] != "1" {
				t.Errorf("header %v, trailer %v: want attempt 1's", header, trailer)
			}
			if p.Addr == nil || len(finished) != 1 || finished[0] != nil {
				t.Errorf("peer %v, OnFinish calls %v: want the winner's peer and one call with nil", p.Addr, finished)
			}
			want := []seen{tt.want0, {Attempt: 1, Received: []string{"m1", "m2", "m3"}}}
			if diff := cmp.Diff(want, e.srv.await(t, "mid", 2), ignoreTimes); diff != "" {
				t.Errorf("the server saw (-want +got)\n%s", diff)
			}
			if s := stats.Snapshot(); s.Calls != 1 || s.Attempts != 2 || s.Wins[1] != 1 {
				t.Errorf("stats %+v: want one call of two attempts, won by the hedge", s)
			}
		})
	}
}

// TestStreamCommitsOnHeaders: the first attempt to receive response
// headers wins, before any message: the others are cancelled on the
// server while the winner has sent nothing but its header.
func TestStreamCommitsOnHeaders(t *testing.T) {
	hangs := func(h *side) error { return h.Hang() }
	e := newStreamEnv(t, hedgeStreams(hedgegrpc.HedgingPolicy{MaxAttempts: 3, NonFatalStatusCodes: unavailable}, nil),
		map[string][]script{"hdr": {hangs, func(h *side) error {
			if err := h.Await("0 started", "2 started"); err != nil {
				return err
			}
			if err := h.Header(); err != nil {
				return err
			}
			// Only the commit on that header can end the others.
			if err := h.Await("0 ended", "2 ended"); err != nil {
				return err
			}
			if err := h.Send("a"); err != nil {
				return err
			}
			return h.Send("b")
		}, hangs}}, true)
	s, err := e.client.StreamingOutputCall(callCtx(context.Background(), "hdr"), &testpb.StreamingOutputCallRequest{Payload: payload("q")})
	if err != nil {
		t.Fatal(err)
	}
	header, err := s.Header()
	if err != nil || len(header.Get("attempt")) != 1 || header.Get("attempt")[0] != "1" {
		t.Fatalf("Header = %v, %v; want attempt 1's", header, err)
	}
	bodies, err := recvBodies(s)
	if err != nil || !cmp.Equal(bodies, []string{"a", "b"}) {
		t.Fatalf("received %v, %v; want [a b], nil", bodies, err)
	}
	if tr := s.Trailer().Get("attempt"); len(tr) != 1 || tr[0] != "1" {
		t.Errorf("Trailer = %v, want attempt 1's", s.Trailer())
	}
	want := []seen{
		{Attempt: 0, Received: []string{"q"}, Canceled: true},
		{Attempt: 1, Received: []string{"q"}},
		{Attempt: 2, Received: []string{"q"}, Canceled: true},
	}
	if diff := cmp.Diff(want, e.srv.await(t, "hdr", 3), ignoreTimes); diff != "" {
		t.Errorf("the server saw (-want +got)\n%s", diff)
	}
}

// stall is a stream interceptor chained after the hedging ones, where it
// sees each attempt as a stream of its own: it holds every SendMsg of
// attempt k until that attempt is cancelled, as a connection that does
// not drain would.
func stall(k int) grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || hedge.Attempt(ctx) != k {
			return cs, err
		}
		return &stalled{ClientStream: cs, ctx: ctx}, nil
	})
}

type stalled struct {
	grpc.ClientStream
	ctx context.Context
}

func (s *stalled) SendMsg(any) error {
	<-s.ctx.Done()
	return io.EOF
}

// TestStreamBufferOverflowCommits: when the messages buffered outgrow the
// call's grpc.MaxRetryRPCBufferSize, the call commits to the attempt
// that has sent the most, whichever it is, and cancels the other; the
// winner gets every message, those sent after the commit included.
func TestStreamBufferOverflowCommits(t *testing.T) {
	body := strings.Repeat("x", 100) // with its name and framing, a message counts 110 bytes
	for _, laggard := range []int{0, 1} {
		leader := 1 - laggard
		t.Run("laggard "+string(rune('0'+laggard)), func(t *testing.T) {
			stats := &reports{}
			recvAll := func(h *side) error {
				if err := h.RecvAll(); err != nil {
					return err
				}
				return h.Send("")
			}
			cfg := hedgeStreams(hedgegrpc.HedgingPolicy{MaxAttempts: 2, NonFatalStatusCodes: unavailable}, stats)
			e := newStreamEnv(t, cfg, map[string][]script{"big": {recvAll, recvAll}}, true, stall(laggard))
			s, err := e.client.StreamingInputCall(callCtx(context.Background(), "big"), grpc.MaxRetryRPCBufferSize(250))
			if err != nil {
				t.Fatal(err)
			}
			// Both attempts start at once and reach the server; the
			// laggard sends nothing. Once the server has the leader's m2,
			// the leader has sent m1.
			<-e.srv.mark("big/0 started")
			<-e.srv.mark("big/1 started")
			send := func(m string, to ...int) {
				t.Helper()
				if err := s.Send(input(m + body)); err != nil {
					t.Fatal(err)
				}
				for _, k := range to {
					<-e.srv.mark("big/" + string(rune('0'+k)) + " got " + m + body)
				}
			}
			send("1", leader)
			send("2", leader)
			send("3") // 330 bytes buffered, over 250: commit to the leader
			send("4") // after the commit: straight to the winner
			r, err := s.CloseAndRecv()
			if err != nil || r.GetAggregatedPayloadSize() != 4*101 {
				t.Fatalf("CloseAndRecv = %v, %v; want the winner's 404 bytes", r, err)
			}
			want := []seen{
				{Attempt: laggard, Canceled: true},
				{Attempt: leader, Received: []string{"1" + body, "2" + body, "3" + body, "4" + body}},
			}
			if want[0].Attempt > want[1].Attempt {
				want[0], want[1] = want[1], want[0]
			}
			if diff := cmp.Diff(want, e.srv.await(t, "big", 2), ignoreTimes); diff != "" {
				t.Errorf("the server saw (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff([]hedge.Report{{Attempts: 2, Winner: leader}}, stats.take(), cmpopts.IgnoreFields(hedge.Report{}, "Started", "Primary", "PrimaryAnswered")); diff != "" {
				t.Errorf("reports (-want +got)\n%s", diff)
			}
		})
	}
}

// TestStreamCancellation: the commit cancels every loser on the server,
// and the caller cancelling its context, before or after the commit,
// cancels every attempt still running.
func TestStreamCancellation(t *testing.T) {
	hangs := func(h *side) error {
		if err := h.RecvN(1); err != nil {
			return err
		}
		return h.Hang()
	}
	winner := func(h *side) error {
		if err := h.Await("0 got m", "1 got m"); err != nil {
			return err
		}
		if err := h.RecvN(1); err != nil {
			return err
		}
		if err := h.Send("r"); err != nil {
			return err
		}
		return h.Hang()
	}
	policy := hedgegrpc.HedgingPolicy{MaxAttempts: 3, NonFatalStatusCodes: unavailable}
	t.Run("after the commit", func(t *testing.T) {
		e := newStreamEnv(t, hedgeStreams(policy, nil), map[string][]script{"c": {hangs, hangs, winner}}, true)
		ctx, cancel := context.WithCancel(callCtx(context.Background(), "c"))
		defer cancel()
		s, err := e.client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(duplex("m")); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Recv(); err != nil || string(r.GetPayload().GetBody()) != "r" {
			t.Fatalf("Recv = %v, %v; want r", r, err)
		}
		losers := e.srv.await(t, "c", 2)
		cancel()
		if _, err := s.Recv(); status.Code(err) != codes.Canceled {
			t.Errorf("Recv after cancel = %v, want Canceled", err)
		}
		want := []seen{
			{Attempt: 0, Received: []string{"m"}, Canceled: true},
			{Attempt: 1, Received: []string{"m"}, Canceled: true},
		}
		if diff := cmp.Diff(want, losers, ignoreTimes); diff != "" {
			t.Errorf("the losers, once the caller has the winner's reply (-want +got)\n%s", diff)
		}
		want = append(want, seen{Attempt: 2, Received: []string{"m"}, Canceled: true})
		if diff := cmp.Diff(want, e.srv.await(t, "c", 3), ignoreTimes); diff != "" {
			t.Errorf("every attempt, once the caller cancelled (-want +got)\n%s", diff)
		}
	})
	t.Run("before the commit", func(t *testing.T) {
		e := newStreamEnv(t, hedgeStreams(policy, nil), map[string][]script{"c": {hangs, hangs, hangs}}, true)
		ctx, cancel := context.WithCancel(callCtx(context.Background(), "c"))
		defer cancel()
		s, err := e.client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(duplex("m")); err != nil {
			t.Fatal(err)
		}
		for k := range 3 {
			<-e.srv.mark("c/" + string(rune('0'+k)) + " got m")
		}
		cancel()
		if _, err := s.Recv(); status.Code(err) != codes.Canceled {
			t.Errorf("Recv = %v, want Canceled", err)
		}
		want := []seen{
			{Attempt: 0, Received: []string{"m"}, Canceled: true},
			{Attempt: 1, Received: []string{"m"}, Canceled: true},
			{Attempt: 2, Received: []string{"m"}, Canceled: true},
		}
		if diff := cmp.Diff(want, e.srv.await(t, "c", 3), ignoreTimes); diff != "" {
			t.Errorf("the server saw (-want +got)\n%s", diff)
		}
	})
}
