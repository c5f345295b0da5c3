package hedgegrpc_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// twoAttempts hedges TestService once, 10ms after the primary.
var twoAttempts = hedgeStreams(hedgegrpc.HedgingPolicy{MaxAttempts: 2, HedgingDelay: 10 * ms, NonFatalStatusCodes: unavailable}, nil)

// TestStreamContextCommits: Context, called before the commit, commits
// the call to the attempt that has sent the most, as grpc-go's Context
// ends its retries, and returns that attempt's stream context.
func TestStreamContextCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newStreamEnv(t, twoAttempts, map[string][]script{"ctx": {hangs, answersAfter(0)}}, false, stall(0))
		s, err := e.client.FullDuplexCall(callCtx(context.Background(), "ctx"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(duplex("m1")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * ms) // the hedge has started and sent m1; the stalled primary has sent nothing
		if _, ok := peer.FromContext(s.Context()); !ok {
			t.Error("Context has no peer: it is not an attempt's stream context")
		}
		s.CloseSend()
		r, err := s.Recv()
		if err != nil || string(r.GetPayload().GetBody()) != "r1" {
			t.Fatalf("Recv = %v, %v; want the hedge's r1", r, err)
		}
		synctest.Wait()
		want := []seen{
			{Attempt: 0, End: 20 * ms, Canceled: true},
			{Attempt: 1, Received: []string{"m1"}, Start: 10 * ms, End: 20 * ms},
		}
		if diff := cmp.Diff(want, e.srv.seen("ctx")); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}

// TestStreamNonProtoMessageCommits: a message that is not a
// proto.Message cannot be buffered: it commits the call before it is
// sent, and the winner's stream gets it. Here the proto codec refuses
// it, and grpc-go aborts that stream too.
func TestStreamNonProtoMessageCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &reports{}
		cfg := twoAttempts
		cfg.Observer = obs
		e := newStreamEnv(t, cfg, map[string][]script{"raw": {hangs, hangs}}, false)
		s, err := e.conn.NewStream(callCtx(context.Background(), "raw"), &testpb.TestService_ServiceDesc.Streams[2],
			testpb.TestService_FullDuplexCall_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(duplex("m1")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * ms) // both attempts have sent m1: the earlier wins the tie
		if err := s.SendMsg("not a proto message"); status.Code(err) != codes.Internal {
			t.Errorf("SendMsg = %v, want the codec's Internal error from the winner's stream", err)
		}
		synctest.Wait()
		if reps := obs.take(); len(reps) != 1 || reps[0].Winner != 0 || reps[0].Attempts != 2 {
			t.Errorf("reports %+v, want one call of two attempts committed to the first", reps)
		}
		want := []seen{
			{Attempt: 0, Received: []string{"m1"}, End: 20 * ms, Canceled: true},
			{Attempt: 1, Received: []string{"m1"}, Start: 10 * ms, End: 20 * ms, Canceled: true},
		}
		if diff := cmp.Diff(want, e.srv.seen("raw")); diff != "" {
			t.Errorf("the server saw (-want +got)\n%s", diff)
		}
	})
}

// panicky is a stream interceptor chained after the hedging ones that
// panics when it opens attempt k.
func panicky(k int) grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if hedge.Attempt(ctx) == k {
			panic("attempt " + string(rune('0'+k)))
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
}

// TestStreamAttemptPanics: a panic in an attempt cancels the others and
// reaches the caller, in its next call that waits for the commit, as a
// *hedge.PanicError; one before any attempt opened its stream reaches it
// from the interceptor itself.
func TestStreamAttemptPanics(t *testing.T) {
	recvPanic := func(f func()) (pe *hedge.PanicError) {
		defer func() {
			if !errors.As(asError(recover()), &pe) {
				t.Errorf("recovered %T, want a *hedge.PanicError", pe)
			}
		}()
		f()
		return nil
	}
	t.Run("a hedge", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newStreamEnv(t, twoAttempts, map[string][]script{"p": {hangs}}, false, panicky(1))
			s, err := e.client.FullDuplexCall(callCtx(context.Background(), "p"))
			if err != nil {
				t.Fatal(err)
			}
			s.Send(duplex("m1"))
			pe := recvPanic(func() { s.Recv() })
			if pe == nil || pe.Value != "attempt 1" {
				t.Errorf("panic %v, want attempt 1's", pe)
			}
			synctest.Wait()
			want := []seen{{Received: []string{"m1"}, End: 10 * ms, Canceled: true}}
			if diff := cmp.Diff(want, e.srv.seen("p")); diff != "" {
				t.Errorf("the primary (-want +got)\n%s", diff)
			}
		})
	})
	t.Run("the primary", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newStreamEnv(t, twoAttempts, nil, false, panicky(0))
			pe := recvPanic(func() { e.client.FullDuplexCall(context.Background()) })
			if pe == nil || pe.Value != "attempt 0" {
				t.Errorf("panic %v, want attempt 0's", pe)
			}
		})
	})
}

// asError returns v if it is an error, else nil.
func asError(v any) error {
	err, _ := v.(error)
	return err
}

// ourGoroutines returns the stacks of the goroutines running code of this
// package's streams or of hedge.Do.
func ourGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "hedge/hedgegrpc.(*stream)") || strings.Contains(g, "tailcut/hedge.(*call[") {
			ours = append(ours, g)
		}
	}
	return ours
}

// TestStreamLeavesNoGoroutine: once a hedged stream has ended, whether
// its hedge won, the caller cancelled it mid-race, or the buffer limit
// committed it, no goroutine of it is left, while the channel stays open.
func TestStreamLeavesNoGoroutine(t *testing.T) {
	tests := []struct {
		name    string
		scripts []script
		cancel  bool // the caller cancels at 15ms
		limit   int  // grpc.MaxRetryRPCBufferSize; 0: the default
	}{
		{name: "the hedge wins", scripts: []script{hangs, answersAfter(0)}},
		{name: "the caller cancels mid-race", scripts: []script{hangs, hangs}, cancel: true},
		{name: "the buffer limit commits", scripts: []script{answersAfter(0), hangs}, limit: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newStreamEnv(t, twoAttempts, map[string][]script{"g": tt.scripts}, false)
				ctx, cancel := context.WithCancel(callCtx(context.Background(), "g"))
				defer cancel()
				var opts []grpc.CallOption
				if tt.limit > 0 {
					opts = append(opts, grpc.MaxRetryRPCBufferSize(tt.limit))
				}
				s, err := e.client.FullDuplexCall(ctx, opts...)
				if err != nil {
					t.Fatal(err)
				}
				s.Send(duplex("m1"))
				time.Sleep(15 * ms) // the hedge, if any, has started
				if tt.cancel {
					cancel()
				} else {
					s.CloseSend()
				}
				for {
					if _, err := s.Recv(); err != nil {
						break
					}
				}
				synctest.Wait()
				if ours := ourGoroutines(); len(ours) > 0 {
					t.Errorf("%d goroutines left:\n%s", len(ours), strings.Join(ours, "\n\n"))
				}
			})
		})
	}
}
