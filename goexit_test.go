package hedge_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

var runtime_Goexit = runtime.Goexit

// exitBudget calls runtime.Goexit in Allow or Done for attempt k, as a
// test's fake budget does when it calls t.Fatal.
type exitBudget struct {
	allow bool
	k     int
}

func (b exitBudget) Allow(_ context.Context, k int) bool {
	if b.allow && k == b.k {
		runtime.Goexit()
	}
	return true
}

func (b exitBudget) Done(_ context.Context, k int, _ hedge.Outcome) {
	if !b.allow && k == b.k {
		runtime.Goexit()
	}
}

// runtime.Goexit in Delay.Next, Budget.Allow or Budget.Done ends the call
// like an attempt's Goexit: the other attempts are cancelled and Do calls
// runtime.Goexit in the caller's goroutine. It never hangs: a hang leaves
// the bubble's goroutines blocked, which synctest reports.
func TestGoexitInAHook(t *testing.T) {
	exitAt := func(at int) hedge.Delay {
		return hedge.DelayFunc(func(_ context.Context, k int) time.Duration {
			if k == at {
				runtime.Goexit()
			}
			return 10 * ms
		})
	}
	tests := []struct {
		name string
		p    hedge.Policy[int]
	}{
		{"Delay.Next for the primary", hedge.Policy[int]{Delay: exitAt(0)}},
		{"Delay.Next for the first hedge", hedge.Policy[int]{Delay: exitAt(1), MaxAttempts: 3}},
		{"Budget.Allow for the primary", hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: exitBudget{allow: true, k: 0}}},
		{"Budget.Allow for a hedge", hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: exitBudget{allow: true, k: 1}}},
		{"Budget.Done for a retryable primary", hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Budget: exitBudget{k: 0}}},
		{"Budget.Done for the winner", hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: exitBudget{k: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var returned, exited atomic.Bool
				var live atomic.Int32 // attempts whose fn has not returned
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { exited.Store(!returned.Load()) }()
					hedge.Do(t.Context(), tt.p, func(ctx context.Context) (int, error) {
						live.Add(1)
						defer live.Add(-1)
						if hedge.Attempt(ctx) == 0 && tt.name == "Budget.Done for a retryable primary" {
							return 0, errBusy
						}
						if hedge.Attempt(ctx) == 1 {
							time.Sleep(ms)
							return 1, nil
						}
						<-ctx.Done() // ends only when cancelled
						return 0, ctx.Err()
					})
					returned.Store(true)
				}()
				<-done
				if !exited.Load() {
					t.Fatal("Do returned; want runtime.Goexit in the caller")
				}
				synctest.Wait()
				if n := live.Load(); n != 0 {
					t.Errorf("%d attempts still running after Do exited: the others were not cancelled", n)
				}
			})
		})
	}
}

// releasing records what a budget hears.
type releasing struct {
	mu  sync.Mutex
	log []string
}

func (r *releasing) note(s string) { r.mu.Lock(); r.log = append(r.log, s); r.mu.Unlock() }

func (r *releasing) Allow(_ context.Context, k int) bool {
	r.note(fmt.Sprint("allow ", k))
	return true
}
func (r *releasing) Done(_ context.Context, k int, o hedge.Outcome) {
	r.note(fmt.Sprint("done ", k, " ", o))
}
func (r *releasing) Release(_ context.Context, k int) { r.note(fmt.Sprint("release ", k)) }

// A hedge granted while the primary answers never starts: Do takes the
// grant back with Release, not with a Done that would say it ran.
func TestAGrantThatNeverStartsIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &releasing{}
		slowNext := hedge.DelayFunc(func(_ context.Context, k int) time.Duration {
			if k == 1 {
				time.Sleep(10 * ms) // the primary answers meanwhile
			}
			return 10 * ms
		})
		p := hedge.Policy[int]{Delay: slowNext, MaxAttempts: 3, Budget: b}
		hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			time.Sleep(15 * ms)
			return 1, nil
		})
		time.Sleep(time.Second) // Next returns at 20ms
		b.mu.Lock()
		defer b.mu.Unlock()
		want := []string{"allow 0", "allow 1", "done 0 Accept", "release 1"}
		if diff := cmp.Diff(want, b.log); diff != "" {
			t.Errorf("budget heard (-want +got):\n%s", diff)
		}
	})
}
