package hedgegrpc_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
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

// everyReport keeps every hedge.Report whole, times included.
type everyReport struct {
	mu   sync.Mutex
	list []hedge.Report
}

func (r *everyReport) Observe(_ context.Context, rep hedge.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rep)
}

func (r *everyReport) take() []hedge.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.list
	r.list = nil
	return l
}

// started is a Report's Started for the attempts started at the times
// given after the primary's 0.
func started(at ...time.Duration) (s [hedge.MaxAttemptsLimit]time.Duration) {
	copy(s[1:], at)
	return s
}

// TestUnaryReports: the Observer hears the same of a unary call whether
// its primary answered before the first hedge was due, on the caller's
// goroutine, or the call went on as a race: times count from the call's

// retried is Report.Retry of a call whose primary failed with a
// non-fatal code: attempt 1 is its retry, started at once.
var retried = [hedge.MaxAttemptsLimit]bool{1: true}

// start, the skip or refusal of the first hedge included.
func TestUnaryReports(t *testing.T) {
	const d = 100 * ms
	const c = "c"
	tests := []struct {
		name    string
		timeout time.Duration // the caller's; 0: none
		cancel  time.Duration // when the caller cancels; 0: never
		steps   []step
		want    hedge.Report
	}{{
		name:  "the primary answers first",
		steps: []step{ok(50 * ms)},
		want:  hedge.Report{Attempts: 1, Primary: 50 * ms, PrimaryAnswered: true, Outcome: hedge.Accept, Elapsed: 50 * ms},
	}, {
		name:  "the primary fails with a fatal code first",
		steps: []step{fail(20*ms, codes.InvalidArgument)},
		want:  hedge.Report{Attempts: 1, Primary: 20 * ms, PrimaryAnswered: true, Outcome: hedge.Terminal, Elapsed: 20 * ms},
	}, {
		name:  "the hedge wins",
		steps: []step{hang(), ok(30 * ms)},
		want: hedge.Report{Attempts: 2, Started: started(d), Winner: 1, Primary: d + 30*ms, Outcome: hedge.Accept,
			Elapsed: d + 30*ms},
	}, {
		name:  "the primary wins after the hedge started",
		steps: []step{ok(150 * ms), hang()},
		want: hedge.Report{Attempts: 2, Started: started(d), Primary: 150 * ms, PrimaryAnswered: true,
			Outcome: hedge.Accept, Elapsed: 150 * ms},
	}, {
		name:  "a non-fatal failure first starts the hedge at once",
		steps: []step{fail(30*ms, codes.Unavailable), ok(20 * ms)},
		want: hedge.Report{Attempts: 2, Started: started(30 * ms), Retry: retried, Winner: 1, Primary: 30 * ms, PrimaryAnswered: true,
			Outcome: hedge.Accept, Elapsed: 50 * ms},
	}, {
		name:  "the hedges after a non-fatal failure",
		steps: []step{fail(30*ms, codes.Unavailable), hang(), ok(10 * ms)},
		want: hedge.Report{Attempts: 3, Started: started(30*ms, 30*ms+d), Retry: retried, Winner: 2, Primary: 30 * ms,
			PrimaryAnswered: true, Outcome: hedge.Accept, Elapsed: 40*ms + d},
	}, {
		name:    "the deadline leaves too little for the hedge",
		timeout: 140 * ms,
		steps:   []step{hang()},
		want: hedge.Report{Attempts: 1, Winner: -1, Primary: 140 * ms, Outcome: hedge.Canceled, DeadlineSkips: 1,
			Elapsed: 140 * ms},
	}, {
		name:   "the caller cancels before the hedge",
		cancel: 50 * ms,
		steps:  []step{hang()},
		want:   hedge.Report{Attempts: 1, Winner: -1, Primary: 50 * ms, Outcome: hedge.Canceled, Elapsed: 50 * ms},
	}, {
		name:   "the caller cancels during the race",
		cancel: 150 * ms,
		steps:  []step{hang(), hang()},
		want: hedge.Report{Attempts: 2, Started: started(d), Winner: -1, Primary: 150 * ms, Outcome: hedge.Canceled,
			Elapsed: 150 * ms},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				obs := &everyReport{}
				cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
					"grpc.health.v1.Health": {MaxAttempts: 3, HedgingDelay: d, NonFatalStatusCodes: unavailable},
				}, Observer: obs}
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
				e.run(ctx, c)
				if diff := cmp.Diff([]hedge.Report{tt.want}, obs.take()); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// unaryPanics is a unary interceptor chained after the hedging one: for
// attempt k, it waits for wait, calls the invoker when call is set, and
// then panics with "attempt k", or calls runtime.Goexit when exit is set.
func unaryPanics(k int, wait time.Duration, call, exit bool) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if hedge.Attempt(ctx) != k {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		time.Sleep(wait)
		if call {
			invoker(ctx, method, req, reply, cc, opts...)
		}
		if exit {
			runtime.Goexit()
		}
		panic("attempt " + string(rune('0'+k)))
	})
}

// primaryStalls is a probe act whose first attempt of a call waits until
// the client gives up, and whose others answer after d.
func primaryStalls(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) == 0 {
			return stalls(ctx)
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestUnaryAttemptPanics: a panic in an attempt of a unary call reaches
// the caller as a *hedge.PanicError, the primary's too, which runs on the
// caller's goroutine, and the other attempts are cancelled; a panic of a
// primary that lost, after the call was decided, is dropped, as Do drops
// its losers' panics; runtime.Goexit in an attempt ends the caller's
// goroutine, as Do's does.
func TestUnaryAttemptPanics(t *testing.T) {
	const d = 100 * ms
	cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
		"grpc.health.v1.Health": {MaxAttempts: 2, HedgingDelay: d, NonFatalStatusCodes: unavailable},
	}}
	tests := []struct {
		name   string
		act    func(context.Context) error
		dial   grpc.DialOption
		panics string        // the panic's value; "": the call returns
		exits  bool          // the call's goroutine exits
		code   codes.Code    // what the call returns
		at     time.Duration // when the call ended
		seen   int           // the attempts that reached the server
	}{{
		name: "the primary, before the hedge",
		dial: unaryPanics(0, 0, false, false), panics: "attempt 0",
	}, {
		name: "the primary, as it answers",
		dial: unaryPanics(0, 0, true, false), panics: "attempt 0", seen: 1,
	}, {
		name: "the primary, after it lost",
		act:  primaryStalls(10 * ms), dial: unaryPanics(0, 0, true, false), at: d + 10*ms, seen: 2,
	}, {
		name: "the primary, while the hedge runs",
		act:  stalls, dial: unaryPanics(0, d+50*ms, false, false), panics: "attempt 0", at: d + 50*ms, seen: 1,
	}, {
		name: "the hedge",
		act:  stalls, dial: unaryPanics(1, 0, false, false), panics: "attempt 1", at: d, seen: 1,
	}, {
		name: "runtime.Goexit in the primary",
		dial: unaryPanics(0, 0, true, true), exits: true, seen: 1,
	}, {
		name: "runtime.Goexit in the hedge",
		act:  stalls, dial: unaryPanics(1, 0, false, true), exits: true, at: d, seen: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newProbeEnv(t, newProbe(tt.act), cfg, nil, tt.dial)
				var (
					err      error
					pe       *hedge.PanicError
					returned bool
					at       time.Duration
				)
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() {
						at = time.Since(e.t0)
						if v := recover(); v != nil && !errors.As(asError(v), &pe) {
							t.Errorf("recovered %v, want a *hedge.PanicError", v)
						}
					}()
					_, err = e.client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "c"})
					returned = true
				}()
				<-done
				synctest.Wait()
				switch {
				case tt.exits:
					if returned || pe != nil {
						t.Errorf("the call returned %v, or panicked with %v; want runtime.Goexit", err, pe)
					}
				case tt.panics != "":
					if pe == nil || pe.Value != tt.panics {
						t.Errorf("the call panicked with %v, want %q", pe, tt.panics)
					}
				default:
					if code := status.Code(err); !returned || code != tt.code {
						t.Errorf("the call returned %v (returned %v), want %v", err, returned, tt.code)
					}
				}
				if at != tt.at || e.p.attemptsOf("c") != tt.seen {
					t.Errorf("ended at %v with %d attempts at the server, want %v with %d", at, e.p.attemptsOf("c"), tt.at, tt.seen)
				}
			})
		})
	}
}
