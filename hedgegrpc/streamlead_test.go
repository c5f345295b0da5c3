package hedgegrpc_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// runServerStream makes one server-streaming call of scenario name, with
// the request m1, receives every reply, and returns what happened.
func (e *streamEnv) runServerStream(ctx context.Context, name string, opts ...grpc.CallOption) streamResult {
	var r streamResult
	s, err := e.client.StreamingOutputCall(callCtx(ctx, name), duplex("m1"), opts...)
	if err == nil {
		r.Replies, err = recvBodies(s)
	}
	r.At = time.Since(e.srv.t0)
	st := status.Convert(err)
	r.Code, r.Message = st.Code(), st.Message()
	synctest.Wait() // let the losers' handlers see their cancellation
	r.Seen = e.srv.seen(name)
	return r
}

// TestServerStreamA6 plays TestStreamA6's scenarios as server-streaming
// calls, whose primary runs on the caller's goroutine until the first
// hedge is due: what the caller and the server see is the same. The
// server records the one request of every attempt as received.
func TestServerStreamA6(t *testing.T) {
	for _, tt := range streamA6Cases() {
		if len(tt.sends.later) > 0 {
			continue // one request: nothing is sent later
		}
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newStreamEnv(t, hedgeStreams(tt.policy, nil), map[string][]script{"c": tt.scripts}, false)
				want := tt.want
				want.Seen = slices.Clone(want.Seen)
				for i := range want.Seen {
					want.Seen[i].Received = []string{"m1"}
				}
				if diff := cmp.Diff(want, e.runServerStream(tt.ctx(t), "c")); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// TestServerStreamReports: the Observer hears of a server-streaming call
// what it hears of a race through hedge.Do from the start, whether the
// primary committed the call on the caller's goroutine or a hedge fell
// due first: the report covers the race until the commit, timed from the
// call's start.
func TestServerStreamReports(t *testing.T) {
	const d = 100 * ms
	tests := []struct {
		name    string
		timeout time.Duration // the caller's; 0: none
		scripts []script
		want    hedge.Report
	}{{
		name:    "the primary commits first",
		scripts: []script{answersAfter(50 * ms)},
		want:    hedge.Report{Attempts: 1, Primary: 50 * ms, PrimaryAnswered: true, Outcome: hedge.Accept, Elapsed: 50 * ms},
	}, {
		name:    "the primary fails with a fatal code first",
		scripts: []script{failsAfter(20*ms, codes.InvalidArgument, "")},
		want:    hedge.Report{Attempts: 1, Primary: 20 * ms, PrimaryAnswered: true, Outcome: hedge.Terminal, Elapsed: 20 * ms},
	}, {
		name:    "the hedge commits first",
		scripts: []script{hangs, answersAfter(30 * ms)},
		want: hedge.Report{Attempts: 2, Started: started(d), Winner: 1, Primary: d + 30*ms, Outcome: hedge.Accept,
			Elapsed: d + 30*ms},
	}, {
		name:    "the primary commits after the hedge started",
		scripts: []script{answersAfter(150 * ms), hangs},
		want: hedge.Report{Attempts: 2, Started: started(d), Primary: 150 * ms, PrimaryAnswered: true,
			Outcome: hedge.Accept, Elapsed: 150 * ms},
	}, {
		name:    "a non-fatal failure first starts the hedge at once",
		scripts: []script{failsAfter(30*ms, codes.Unavailable, ""), answersAfter(20 * ms)},
		want: hedge.Report{Attempts: 2, Started: started(30 * ms), Retry: retried, Winner: 1, Primary: 30 * ms, PrimaryAnswered: true,
			Outcome: hedge.Accept, Elapsed: 50 * ms},
	}, {
		name:    "the deadline leaves too little for the hedge",
		timeout: 140 * ms,
		scripts: []script{hangs},
		want: hedge.Report{Attempts: 1, Winner: -1, Primary: 140 * ms, Outcome: hedge.Canceled, DeadlineSkips: 1,
			Elapsed: 140 * ms},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				obs := &everyReport{}
				e := newStreamEnv(t, hedgeStreams(hedgegrpc.HedgingPolicy{MaxAttempts: 3, HedgingDelay: d,
					NonFatalStatusCodes: unavailable}, obs), map[string][]script{"c": tt.scripts}, false)
				ctx := context.Background()
				if tt.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				e.runServerStream(ctx, "c")
				if diff := cmp.Diff([]hedge.Report{tt.want}, obs.take()); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// TestServerStreamHeaderAndOptions: Header, called before any message,
// and the caller's grpc.Header, grpc.Trailer, grpc.Peer and OnFinish get
// the winner's, whether the primary won on the caller's goroutine or a
// hedge won a race while the caller waited in Header.
func TestServerStreamHeaderAndOptions(t *testing.T) {
	headerLate := func(at time.Duration) script {
		return func(h *side) error {
			if err := h.Sleep(at); err != nil {
				return err
			}
			return h.Send("r" + string(rune('0'+h.k)))
		}
	}
	tests := []struct {
		name    string
		scripts []script
		winner  string
	}{
		{"the primary", []script{headerLate(50 * ms), headerLate(0)}, "0"},
		{"the hedge", []script{hangs, headerLate(10 * ms)}, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newStreamEnv(t, hedgeStreams(hedgegrpc.HedgingPolicy{MaxAttempts: 2, HedgingDelay: 100 * ms,
					NonFatalStatusCodes: unavailable}, nil), map[string][]script{"h": tt.scripts}, false)
				var header, trailer metadata.MD
				var p peer.Peer
				var finished []error
				s, err := e.client.StreamingOutputCall(callCtx(context.Background(), "h"), duplex("m1"),
					grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p),
					grpc.OnFinish(func(err error) { finished = append(finished, err) }))
				if err != nil {
					t.Fatal(err)
				}
				md, err := s.Header()
				if err != nil || !slices.Equal(md.Get("attempt"), []string{tt.winner}) {
					t.Errorf("Header = %v, %v; want attempt %s's", md, err, tt.winner)
				}
				bodies, err := recvBodies(s)
				if err != nil || !slices.Equal(bodies, []string{"r" + tt.winner}) {
					t.Errorf("received %v, %v; want r%s", bodies, err, tt.winner)
				}
				if tr := s.Trailer().Get("attempt"); !slices.Equal(tr, []string{tt.winner}) {
					t.Errorf("Trailer = %v, want attempt %s's", s.Trailer(), tt.winner)
				}
				synctest.Wait()
				if !slices.Equal(header.Get("attempt"), []string{tt.winner}) || !slices.Equal(trailer.Get("attempt"), []string{tt.winner}) ||
					p.Addr == nil || len(finished) != 1 || finished[0] != nil {
					t.Errorf("header %v, trailer %v, peer %v, OnFinish %v: want attempt %s's, and one nil", header, trailer, p.Addr, finished, tt.winner)
				}
			})
		})
	}
}

// TestServerStreamContextCommits: Context, called before the first hedge
// is due, commits a server-streaming call to its primary, which then
// answers late with no hedge sent.
func TestServerStreamContextCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newStreamEnv(t, twoAttempts, map[string][]script{"ctx": {answersAfter(50 * ms), answersAfter(0)}}, false)
		s, err := e.client.StreamingOutputCall(callCtx(context.Background(), "ctx"), duplex("m1"))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := peer.FromContext(s.Context()); !ok {
			t.Error("Context has no peer: it is not the primary's stream context")
		}
		bodies, err := recvBodies(s)
		if err != nil || !slices.Equal(bodies, []string{"r0"}) {
			t.Errorf("received %v, %v; want the primary's r0", bodies, err)
		}
		synctest.Wait()
		want := []seen{{Attempt: 0, Received: []string{"m1"}, End: 50 * ms}}
		if diff := cmp.Diff(want, e.srv.seen("ctx")); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
}

// TestServerStreamPanics: a panic of the primary's streamer, which runs
// on the caller's goroutine, reaches the caller from the interceptor as
// a *hedge.PanicError; one of a hedge's, from Recv.
func TestServerStreamPanics(t *testing.T) {
	recvPanic := func(f func()) (pe *hedge.PanicError) {
		defer func() {
			if !errors.As(asError(recover()), &pe) {
				t.Errorf("recovered %T, want a *hedge.PanicError", pe)
			}
		}()
		f()
		return nil
	}
	t.Run("the primary", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newStreamEnv(t, twoAttempts, nil, false, panicky(0))
			pe := recvPanic(func() { e.client.StreamingOutputCall(context.Background(), duplex("m1")) })
			if pe == nil || pe.Value != "attempt 0" {
				t.Errorf("panic %v, want attempt 0's", pe)
			}
		})
	})
	t.Run("a hedge", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newStreamEnv(t, twoAttempts, map[string][]script{"p": {hangs}}, false, panicky(1))
			s, err := e.client.StreamingOutputCall(callCtx(context.Background(), "p"), duplex("m1"))
			if err != nil {
				t.Fatal(err)
			}
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
}

// TestServerStreamLargeRequestCommits: a request larger than the call's
// grpc.MaxRetryRPCBufferSize commits a server-streaming call to its
// primary at once, as the buffer's limit commits any stream: no hedge
// goes out.
func TestServerStreamLargeRequestCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newStreamEnv(t, twoAttempts, map[string][]script{"big": {answersAfter(50 * ms), answersAfter(0)}}, false)
		// m1 and its framing take more than 5 bytes.
		s, err := e.client.StreamingOutputCall(callCtx(context.Background(), "big"), duplex("m1"), grpc.MaxRetryRPCBufferSize(5))
		if err != nil {
			t.Fatal(err)
		}
		bodies, err := recvBodies(s)
		if err != nil || !slices.Equal(bodies, []string{"r0"}) {
			t.Errorf("received %v, %v; want the primary's r0", bodies, err)
		}
		synctest.Wait()
		if got := e.srv.seen("big"); len(got) != 1 || got[0].Attempt != 0 {
			t.Errorf("the server saw %+v, want the primary alone", got)
		}
	})
}

// TestServerStreamLateReceiver: a caller that receives only after the
// first hedge fell due still gets the primary's reply, whose headers came
// first: the race sees them at once, and the hedge loses.
func TestServerStreamLateReceiver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newStreamEnv(t, hedgeStreams(hedgegrpc.HedgingPolicy{MaxAttempts: 2, HedgingDelay: 100 * ms,
			NonFatalStatusCodes: unavailable}, nil), map[string][]script{"late": {answersAfter(10 * ms), hangs}}, false)
		s, err := e.client.StreamingOutputCall(callCtx(context.Background(), "late"), duplex("m1"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * ms)
		bodies, err := recvBodies(s)
		if err != nil || !slices.Equal(bodies, []string{"r0"}) {
			t.Errorf("received %v, %v; want the primary's r0", bodies, err)
		}
		synctest.Wait()
		for _, a := range e.srv.seen("late") {
			if a.Attempt == 1 && (!a.Canceled || a.End != 100*ms) {
				t.Errorf("the hedge %+v, want it cancelled as it started, at 100ms", a)
			}
		}
	})
}
