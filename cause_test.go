package hedge_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tailcut/hedge"
)

// An attempt's context says why it ended: context.Cause is ErrSuperseded
// for a loser (Err stays context.Canceled), the caller's cause when the
// caller gave up, DeadlineExceeded at the Timeout. Contexts derived from
// the attempt, as instrumentation makes them, see the same cause.
func TestAttemptsTellWhyTheyEnded(t *testing.T) {
	errGone := errors.New("caller gone")
	type ended struct{ Err, Cause, Derived error }
	tests := []struct {
		name    string
		timeout time.Duration
		cancel  time.Duration // when the caller cancels; 0: never
		answers map[int]time.Duration
		want    map[int]ended
	}{{
		name:    "the hedge wins: the primary lost",
		answers: map[int]time.Duration{1: 5 * ms},
		want:    map[int]ended{0: {context.Canceled, hedge.ErrSuperseded, hedge.ErrSuperseded}},
	}, {
		name:    "the primary wins: the hedge lost",
		answers: map[int]time.Duration{0: 15 * ms},
		want:    map[int]ended{1: {context.Canceled, hedge.ErrSuperseded, hedge.ErrSuperseded}},
	}, {
		name:   "the caller gives up",
		cancel: 15 * ms,
		want: map[int]ended{
			0: {context.Canceled, errGone, errGone},
			1: {context.Canceled, errGone, errGone},
		},
	}, {
		name:    "the Timeout passes",
		timeout: 15 * ms,
		want: map[int]ended{
			0: {context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded},
			1: {context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				if tt.cancel > 0 {
					time.AfterFunc(tt.cancel, func() { cancel(errGone) })
				}
				var mu sync.Mutex
				got := map[int]ended{}
				p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Timeout: tt.timeout}
				hedge.Do(ctx, p, func(ctx context.Context) (int, error) {
					k := hedge.Attempt(ctx)
					derived, stop := context.WithCancelCause(ctx)
					defer stop(nil)
					if d, ok := tt.answers[k]; ok {
						time.Sleep(d)
						return k, nil
					}
					<-ctx.Done()
					<-derived.Done()
					mu.Lock()
					got[k] = ended{ctx.Err(), context.Cause(ctx), context.Cause(derived)}
					mu.Unlock()
					return 0, ctx.Err()
				})
				time.Sleep(time.Second)
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(tt.want, got, cmpopts.EquateErrors()); diff != "" {
					t.Errorf("how attempts ended (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// The winner's context outlives Do until the deadline; it then ends with
// DeadlineExceeded as its cause too, whether or not anything waited on it.
func TestWinnerEndsAtTheDeadlineWithItsCause(t *testing.T) {
	for _, waits := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var won context.Context
			hedge.Do(t.Context(), hedge.Policy[int]{Timeout: 50 * ms}, func(ctx context.Context) (int, error) {
				if waits {
					ctx.Done()
				}
				won = ctx
				return 1, nil
			})
			if err := context.Cause(won); err != nil {
				t.Errorf("waits %v: cause %v before the deadline, want none", waits, err)
			}
			time.Sleep(50 * ms)
			if err, cause := won.Err(), context.Cause(won); err != context.DeadlineExceeded || cause != context.DeadlineExceeded {
				t.Errorf("waits %v: after the deadline Err %v, Cause %v; want DeadlineExceeded for both", waits, err, cause)
			}
		})
	}
}

// An attempt that notices the caller's cancellation itself and returns
// ctx.Err() races the call's own link to the caller's context: whichever
// comes first, the call ends with the caller's cause, not the attempt's
// plain context.Canceled. Many rounds, because the race is the
// scheduler's to decide.
func TestCallerCauseBeatsTheAttemptsError(t *testing.T) {
	errGone := errors.New("caller gone")
	for range 2000 {
		ctx, cancel := context.WithCancelCause(context.Background())
		started := make(chan struct{})
		go func() { <-started; cancel(errGone) }()
		_, err := hedge.Do(ctx, hedge.Policy[int]{MaxAttempts: 1}, func(context.Context) (int, error) {
			close(started)
			<-ctx.Done() // the caller's, as a transport that watches its request's context does
			return 0, ctx.Err()
		})
		if err != errGone {
			t.Fatalf("Do = %v, want the caller's cause", err)
		}
	}
}
