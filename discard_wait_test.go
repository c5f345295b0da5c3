package hedge_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// A superseded retryable value goes to a Discard that takes a second. Do
// waits for it before returning the winner, but the caller's cancellation
// or the deadline ends that wait at once: Do returns the context's error
// then, and the winner it had chosen goes to Discard as well.
func TestSlowDiscardYieldsToTheDeadline(t *testing.T) {
	errGone := errors.New("caller gone")
	tests := []struct {
		name     string
		cancelAt time.Duration // 0: never
		wantAt   time.Duration
		wantErr  error
	}{
		{"the caller cancels at 50ms", 50 * ms, 50 * ms, errGone},
		{"the Timeout passes at 100ms", 0, 100 * ms, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				if tt.cancelAt > 0 {
					time.AfterFunc(tt.cancelAt, func() { cancel(errGone) })
				}
				var mu sync.Mutex
				var discarded []int
				p := hedge.Policy[*response]{
					Delay: hedge.Fixed(20 * ms), Timeout: 100 * ms, Classify: classify503,
					Discard: func(r *response) {
						time.Sleep(time.Second) // draining a slow body
						mu.Lock()
						discarded = append(discarded, r.attempt)
						mu.Unlock()
					},
				}
				start := time.Now()
				v, err := hedge.Do(ctx, p, func(ctx context.Context) (*response, error) {
					k := hedge.Attempt(ctx)
					if k == 0 {
						time.Sleep(5 * ms)
						return &response{k, 503}, nil
					}
					time.Sleep(5 * ms)
					return &response{k, 200}, nil
				})
				if at := time.Since(start); at != tt.wantAt || v != nil || !errors.Is(err, tt.wantErr) {
					t.Errorf("Do = %v, %v at %v; want nil, %v at %v", v, err, at, tt.wantErr, tt.wantAt)
				}
				time.Sleep(3 * time.Second)
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff([]int{0, 1}, discarded); diff != "" {
					t.Errorf("discarded (-want +got):\n%s", diff)
				}
			})
		})
	}
}

type panickyLearner struct {
	hedge.Delay
	exit bool
}

func (l panickyLearner) Learn(context.Context, time.Duration, bool) {
	if l.exit {
		runtime_Goexit()
	}
	panic("learn")
}

// When the Learner or the Observer panics or calls runtime.Goexit after
// the decision, Do does not return the winner's value, so it goes to
// Discard, once.
func TestHookFailureAfterTheDecisionDiscardsTheWinner(t *testing.T) {
	fails := []struct {
		name string
		p    hedge.Policy[*response]
	}{
		{"Learn panics", hedge.Policy[*response]{Delay: panickyLearner{Delay: hedge.Fixed(time.Hour)}}},
		{"Learn exits", hedge.Policy[*response]{Delay: panickyLearner{Delay: hedge.Fixed(time.Hour), exit: true}}},
		{"Observe panics", hedge.Policy[*response]{Observer: observerFunc(func(hedge.Report) { panic("observe") })}},
		{"Observe exits", hedge.Policy[*response]{Observer: observerFunc(func(hedge.Report) { runtime_Goexit() })}},
	}
	for _, tt := range fails {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &closer{closed: map[int]int{}}
				p := tt.p
				p.Discard = c.discard
				returned := false
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { recover() }()
					hedge.Do(t.Context(), p, func(ctx context.Context) (*response, error) {
						return &response{hedge.Attempt(ctx), 200}, nil
					})
					returned = true
				}()
				<-done
				if returned {
					t.Fatal("Do returned although its hook failed")
				}
				if diff := cmp.Diff(map[int]int{0: 1}, c.closed); diff != "" {
					t.Errorf("discarded (-want +got):\n%s", diff)
				}
			})
		})
	}
}
