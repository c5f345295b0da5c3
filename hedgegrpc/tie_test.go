package hedgegrpc_test

import (
	"context"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgegrpc"
)

const tieDelay = 10 * ms

// byCall compares visits whatever their order.
var byCall = cmpopts.SortSlices(func(a, b visit) bool { return a.Call+a.Attempt < b.Call+b.Attempt })

// tied hedges method of Health every tieDelay, up to attempts in all,
// with UNAVAILABLE non-fatal: with a Delay, which hedge.Do runs from the
// start, or, when fixed, with a hedgingDelay, whose primary runs on the
// caller's goroutine until a hedge falls due.
func tied(method string, attempts int, obs hedge.Observer, fixed bool) hedgegrpc.Config {
	p := hedgegrpc.HedgingPolicy{MaxAttempts: attempts, Delay: hedge.Fixed(tieDelay), NonFatalStatusCodes: unavailable}
	if fixed {
		p.Delay, p.HedgingDelay = nil, tieDelay
	}
	return hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/" + method: p}, Observer: obs}
}

// unaryKinds are the two ways a unary call is hedged: see tied.
var unaryKinds = []struct {
	name  string
	fixed bool
}{{"Delay", false}, {"hedgingDelay", true}}

// eachUnaryKind runs test in a synctest bubble of its own for each of
// unaryKinds, as a subtest named after it.
func eachUnaryKind(t *testing.T, test func(t *testing.T, fixed bool)) {
	for _, kind := range unaryKinds {
		t.Run(kind.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { test(t, kind.fixed) })
		})
	}
}

// answers is a Check that answers after d, with SERVING from the primary
// and NOT_SERVING from a hedge, so that a test tells them apart.
func answers(d time.Duration) func(context.Context, string) (*healthpb.HealthCheckResponse, error) {
	return func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
		select {
		case <-time.After(d):
			return &healthpb.HealthCheckResponse{Status: servingOf(k)}, nil
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

func servingOf(k string) healthpb.HealthCheckResponse_ServingStatus {
	if k == "0" {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// tally is what a test checks of a call's hedge.Report.
type tally struct{ Attempts, Winner, Tied int }

func tallies(rs []hedge.Report) []tally {
	var out []tally
	for _, r := range rs {
		out = append(out, tally{r.Attempts, r.Winner, r.Tied})
	}
	return out
}

// hedgeApart routes a call's primary to the first replica and its hedge
// to the second.
func hedgeApart(_, k string) int {
	if k == "1" {
		return 1
	}
	return 0
}

func gates(gs ...*admit.Gate) []*hedgegrpc.Admission {
	var adms []*hedgegrpc.Admission
	for _, g := range gs {
		adms = append(adms, &hedgegrpc.Admission{Gate: g})
	}
	return adms
}

// In virtual time, against real gRPC servers whose calls wait at
// Admissions, each standing for a replica: the start signal reaches the
// client, which cancels the attempts still queued, and they leave their
// queue without running.
func TestTieUnary(t *testing.T) {
	req := &healthpb.HealthCheckRequest{}
	for _, kind := range unaryKinds {
		t.Run(kind.name+": a hedge that starts cancels the primary still queued", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rep := &reports{}
				svc := &guarded{check: answers(50 * ms)}
				// The primary waits at a busy replica, the hedge reaches a free one.
				r := startReplicas(t, svc, tied("Check", 2, rep, kind.fixed), gates(&admit.Gate{Limit: 1}, &admit.Gate{Limit: 1}), hedgeApart)
				r.warm(t, rep, kind.fixed)
				r.block(t, "Check")
				start := time.Now()
				resp, err := r.client.Check(withLabel(context.Background(), "c"), req)
				if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING || time.Since(start) != tieDelay+50*ms {
					t.Errorf("Check = %v, %v after %v; want the hedge's NOT_SERVING after %v", resp, err, time.Since(start), tieDelay+50*ms)
				}
				close(r.release)
				want := []visit{{"c", "0", false, codes.Canceled}, {"c", "1", true, codes.OK}, {"blocker", "0", true, codes.OK}}
				if diff := cmp.Diff(want, r.visits(t, 3)); diff != "" {
					t.Errorf("calls in the order they left the server (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]tally{{2, 1, 1}}, tallies(rep.take())); diff != "" {
					t.Errorf("reports (-want +got):\n%s", diff)
				}
			})
		})
	}

	// Until a server of the method has signalled a start, its calls'
	// attempts go through the invoker and see their headers only with
	// their answers: the first call cannot tie, and its primary waits in
	// its queue until the hedge answers. The signal in its answer makes
	// the next call tie.
	for _, kind := range unaryKinds {
		t.Run(kind.name+": the first call learns that the servers signal", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rep := &reports{}
				svc := &guarded{check: answers(50 * ms)}
				r := startReplicas(t, svc, tied("Check", 2, rep, kind.fixed), gates(&admit.Gate{Limit: 1}, &admit.Gate{Limit: 1}), hedgeApart)
				r.block(t, "Check")
				for _, call := range []string{"c", "d"} {
					if _, err := r.client.Check(withLabel(context.Background(), call), req); err != nil {
						t.Fatal(err)
					}
				}
				close(r.release)
				want := []visit{{"c", "1", true, codes.OK}, {"c", "0", false, codes.Canceled},
					{"d", "0", false, codes.Canceled}, {"d", "1", true, codes.OK}, {"blocker", "0", true, codes.OK}}
				if diff := cmp.Diff(want, r.visits(t, 5), byCall); diff != "" {
					t.Errorf("calls that left the server (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]tally{{2, 1, 0}, {2, 1, 1}}, tallies(rep.take())); diff != "" {
					t.Errorf("reports (-want +got):\n%s", diff)
				}
			})
		})
	}

	for _, kind := range unaryKinds {
		t.Run(kind.name+": the primary that starts cancels its hedge queued behind it", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rep := &reports{}
				svc := &guarded{check: answers(50 * ms)}
				r := startReplicas(t, svc, tied("Check", 2, rep, kind.fixed), gates(&admit.Gate{Limit: 1, HedgeWait: time.Hour}),
					func(string, string) int { return 0 })
				r.warm(t, rep, kind.fixed)
				r.block(t, "Check")
				done := make(chan error, 1)
				go func() {
					resp, err := r.client.Check(withLabel(context.Background(), "c"), req)
					if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
						t.Errorf("Check = %v, want the primary's SERVING", resp)
					}
					done <- err
				}()
				time.Sleep(2 * tieDelay) // virtual: both attempts wait in the queue
				synctest.Wait()
				close(r.release)
				if err := <-done; err != nil {
					t.Errorf("Check: %v", err)
				}
				// The blocker leaves as c's hedge is cancelled: their order is
				// not the test's.
				want := []visit{{"blocker", "0", true, codes.OK}, {"c", "0", true, codes.OK}, {"c", "1", false, codes.Canceled}}
				if diff := cmp.Diff(want, r.visits(t, 3), byCall); diff != "" {
					t.Errorf("calls that left the server (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]tally{{2, 0, 1}}, tallies(rep.take())); diff != "" {
					t.Errorf("reports (-want +got):\n%s", diff)
				}
			})
		})
	}

	// A hedge waits at a busy replica behind a primary of another call
	// that came after it, and starts only once that one has run; the
	// call's own primary, which had started, is not cancelled by it, and
	// wins.
	for _, kind := range unaryKinds {
		t.Run(kind.name+": primaries first, and a started attempt is never cancelled by a tie", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rep := &reports{}
				svc := &guarded{check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
					d := 50 * ms
					if labelOf(ctx) == "c" && k == "0" {
						d = 100 * ms
					}
					return answers(d)(ctx, k)
				}}
				r := startReplicas(t, svc, tied("Check", 2, rep, kind.fixed), gates(&admit.Gate{Limit: 1, HedgeWait: time.Hour}, &admit.Gate{Limit: 1}),
					func(call, k string) int {
						if call == "c" && k == "0" {
							return 1
						}
						return 0
					})
				r.warm(t, rep, kind.fixed)
				r.block(t, "Check")
				done := make(chan struct{}, 2)
				start := time.Now()
				go func() {
					resp, err := r.client.Check(withLabel(context.Background(), "c"), req)
					if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || time.Since(start) != 100*ms {
						t.Errorf("call c = %v, %v after %v; want its primary's SERVING after 100ms", resp, err, time.Since(start))
					}
					done <- struct{}{}
				}()
				time.Sleep(15 * ms) // c's hedge has queued behind the blocker
				go func() {
					r.client.Check(withLabel(context.Background(), "d"), req)
					done <- struct{}{}
				}()
				time.Sleep(5 * ms)
				synctest.Wait() // d's primary has queued behind c's hedge
				close(r.release)
				<-done
				<-done
				ran := []string{<-r.ran, <-r.ran, <-r.ran}
				if diff := cmp.Diff([]string{"c/0", "d/0", "c/1"}, ran); diff != "" {
					t.Errorf("calls in the order they ran (-want +got):\n%s", diff)
				}
				// d's hedge, sent after d's primary started, queued behind c's
				// and was cancelled there as the loser it was.
				r.visits(t, 5)
				if diff := cmp.Diff([]tally{{2, 0, 0}, {2, 0, 0}}, tallies(rep.take())); diff != "" {
					t.Errorf("reports, d's then c's (-want +got):\n%s", diff)
				}
			})
		})
	}

	// The start signal's headers do not commit the call as A6's headers
	// do: a primary that started and then failed with a non-fatal code
	// leaves the call to its hedge, with CommitOnHeaders too, whether the
	// attempts watch their headers (warm) or see them with their answers.
	for _, tc := range []struct{ warm, commitOnHeaders bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		name := "a started attempt that fails does not end the call"
		var dial []grpc.DialOption
		if tc.warm {
			name += ", warm"
		}
		if tc.commitOnHeaders {
			name += ", with CommitOnHeaders"
			dial = append(dial, grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()))
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svc := &guarded{check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
					if k == "0" {
						time.Sleep(2 * tieDelay)
						return nil, status.Error(codes.Unavailable, "busy")
					}
					return answers(50*ms)(ctx, k)
				}}
				r := startReplicas(t, svc, tied("Check", 2, nil, false), gates(&admit.Gate{Limit: 2}),
					func(string, string) int { return 0 }, dial...)
				if tc.warm {
					r.warm(t, nil, false)
				}
				start := time.Now()
				resp, err := r.client.Check(context.Background(), req)
				if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING || time.Since(start) != tieDelay+50*ms {
					t.Errorf("Check = %v, %v after %v; want the hedge's NOT_SERVING after %v", resp, err, time.Since(start), tieDelay+50*ms)
				}
				r.visits(t, 2)
			})
		})
	}
}

// A hedge that the Admission turns away fails with UNAVAILABLE and a
// pushback of -1: the client sends no further hedge, and the primary,
// which runs elsewhere, answers the call.
func TestAdmissionTurnsHedgesAway(t *testing.T) {
	req := &healthpb.HealthCheckRequest{}
	for _, tc := range []struct {
		name string
		gate *admit.Gate
	}{
		{"the queue is full", &admit.Gate{Limit: 1, Queue: 1}},
		{"it waited past HedgeWait", &admit.Gate{Limit: 1, HedgeWait: 5 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rep := &reports{}
				svc := &guarded{check: answers(50 * ms)}
				// c's primary runs at a free replica; its hedges reach the busy
				// one, where the blocker runs and, with a queue, another call
				// waits.
				r := startReplicas(t, svc, tied("Check", 3, rep, false), gates(tc.gate, &admit.Gate{Limit: 1}),
					func(call, k string) int {
						if call == "c" && k == "0" {
							return 1
						}
						return 0
					})
				r.warm(t, rep, false)
				r.block(t, "Check")
				if tc.gate.Queue > 0 {
					go func() {
						w, err := r.client.Watch(withLabel(context.Background(), "blocker 2"), req)
						if err == nil {
							w.Recv()
						}
					}()
					synctest.Wait() // a call of another client fills the queue
				}
				start := time.Now()
				resp, err := r.client.Check(withLabel(context.Background(), "c"), req)
				if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || time.Since(start) != 50*ms {
					t.Errorf("Check = %v, %v after %v; want the primary's SERVING after 50ms", resp, err, time.Since(start))
				}
				want := []visit{{"c", "1", false, codes.Unavailable}, {"c", "0", true, codes.OK}}
				if diff := cmp.Diff(want, r.visits(t, 2)); diff != "" {
					t.Errorf("calls in the order they left the server (-want +got):\n%s", diff)
				}
				close(r.release)
				if n := r.adms[0].TurnedAway(); n != 1 {
					t.Errorf("TurnedAway = %d, want 1", n)
				}
				if diff := cmp.Diff([]tally{{2, 0, 0}}, tallies(rep.take())); diff != "" {
					t.Errorf("reports (-want +got):\n%s", diff)
				}
				synctest.Wait()
			})
		})
	}
}

// The start signal crosses a server stream: the hedge that starts at a
// free replica commits the stream, and the primary queued at a busy one
// leaves its queue without running.
func TestTieServerStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := &reports{}
		svc := &guarded{watch: func(ss healthpb.Health_WatchServer, k string) error {
			time.Sleep(20 * ms)
			return ss.Send(&healthpb.HealthCheckResponse{Status: servingOf(k)})
		}}
		r := startReplicas(t, svc, tied("Watch", 2, rep, false), gates(&admit.Gate{Limit: 1}, &admit.Gate{Limit: 1}), hedgeApart)
		r.block(t, "Watch")
		start := time.Now()
		w, err := r.client.Watch(withLabel(context.Background(), "w"), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := w.Recv()
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING || time.Since(start) != tieDelay+20*ms {
			t.Errorf("Recv = %v, %v after %v; want the hedge's NOT_SERVING after %v", resp, err, time.Since(start), tieDelay+20*ms)
		}
		if _, err := w.Recv(); err != io.EOF {
			t.Errorf("Recv at the end = %v, want io.EOF", err)
		}
		close(r.release)
		want := []visit{{"w", "0", false, codes.Canceled}, {"w", "1", true, codes.OK}, {"blocker", "0", true, codes.OK}}
		if diff := cmp.Diff(want, r.visits(t, 3)); diff != "" {
			t.Errorf("calls in the order they left the server (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]tally{{2, 1, 1}}, tallies(rep.take())); diff != "" {
			t.Errorf("reports (-want +got):\n%s", diff)
		}
	})
}

// Over TCP on 127.0.0.1, in real time: the first call learns that the
// servers signal; in the second, a hedge that starts cancels the primary
// queued at a busy replica, which never runs. That hedge answers only
// once the server has seen the primary leave, so the test orders events
// by what the server saw, not by the clock: untied, it would wait for
// ever.
func TestTieUnaryTCP(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dLeft := make(chan struct{}) // d's primary left the server
	svc := &guarded{check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
		if labelOf(ctx) == "d" {
			<-dLeft
		}
		return &healthpb.HealthCheckResponse{Status: servingOf(k)}, nil
	}}
	cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
		"grpc.health.v1.Health/Check": {MaxAttempts: 2, Delay: hedge.Fixed(ms), NonFatalStatusCodes: unavailable},
	}}
	// A hedge goes to its Admission only once its primary has reached the
	// server: the hedge's delay, in real time, orders nothing.
	in := map[string]chan struct{}{"c": make(chan struct{}), "d": make(chan struct{})}
	arrive := func(v visit) {
		switch ch := in[v.Call]; {
		case ch == nil:
		case v.Attempt == "0":
			close(ch)
		default:
			<-ch
		}
	}
	r := serveReplicas(t, svc, cfg, gates(&admit.Gate{Limit: 1}, &admit.Gate{Limit: 1}), hedgeApart, arrive, lis, lis.Addr().String())
	r.block(t, "Check")
	defer close(r.release)
	go func() {
		for v := range r.left {
			if v.Call == "d" {
				if want := (visit{"d", "0", false, codes.Canceled}); v != want {
					t.Errorf("d's first to leave the server: %+v, want %+v", v, want)
				}
				close(dLeft)
				return
			}
		}
	}()
	// The timeout only keeps a broken test from hanging; it orders nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, call := range []string{"c", "d"} {
		resp, err := r.client.Check(withLabel(ctx, call), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("call %s = %v, %v; want the hedge's NOT_SERVING", call, resp, err)
		}
	}
}

// The attempts of a call that hedge.Do races from the start (a Delay)
// ask for the start signal. Those of a method hedged at a fixed
// hedgingDelay, whose primary runs on the caller's goroutine, do too,
// but for the primary, until a hedge has found that the method's servers
// signal: its first call's primary does not ask, and a server's
// Admission sends it its headers as usual. In the second call the
// primary asks, and its server signals its start before the hedge falls
// due: that race is left untied, so the hedge does not ask, and its
// answer carries no signal. With DisableTies, no attempt asks, and no
// answer carries the signal.
func TestTieAsked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  hedgegrpc.HedgingPolicy
		untied  bool
		want    []string
		started []string // StartedKey in the winner's headers, of each call
	}{
		{"Delay", hedgegrpc.HedgingPolicy{MaxAttempts: 2, Delay: hedge.Fixed(tieDelay)}, false, []string{"0:1", "1:1", "0:1", "1:1"}, []string{"1", "1"}},
		{"hedgingDelay", hedgegrpc.HedgingPolicy{MaxAttempts: 2, HedgingDelay: tieDelay}, false, []string{"0:", "1:1", "0:1", "1:"}, []string{"1", ""}},
		{"DisableTies", hedgegrpc.HedgingPolicy{MaxAttempts: 2, Delay: hedge.Fixed(tieDelay)}, true, []string{"0:", "1:", "0:", "1:"}, []string{"", ""}},
		{"DisableTies, hedgingDelay", hedgegrpc.HedgingPolicy{MaxAttempts: 2, HedgingDelay: tieDelay}, true, []string{"0:", "1:", "0:", "1:"}, []string{"", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				asked := make(chan string, 4)
				svc := &guarded{check: func(ctx context.Context, k string) (*healthpb.HealthCheckResponse, error) {
					v := metadata.ValueFromIncomingContext(ctx, hedgegrpc.TieKey)
					asked <- k + ":" + firstOf(v)
					if k == "0" {
						<-ctx.Done()
						return nil, status.FromContextError(ctx.Err()).Err()
					}
					return &healthpb.HealthCheckResponse{}, nil
				}}
				cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health/Check": tc.policy},
					DisableTies: tc.untied}
				r := startReplicas(t, svc, cfg, gates(&admit.Gate{Limit: 4}), func(string, string) int { return 0 })
				var got, started []string
				for range 2 {
					var header metadata.MD
					if _, err := r.client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header)); err != nil {
						t.Fatal(err)
					}
					started = append(started, firstOf(header.Get(hedgegrpc.StartedKey)))
					got = append(got, <-asked, <-asked)
					r.visits(t, 2)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("TieKey on attempts, of two calls (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.started, started); diff != "" {
					t.Errorf("StartedKey in the winners' headers, of two calls (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
