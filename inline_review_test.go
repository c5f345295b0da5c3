package hedge_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// discards notes the values a policy hands to Discard.
type discards struct {
	mu   sync.Mutex
	vals []int
}

func (d *discards) discard(v int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vals = append(d.vals, v)
}

func (d *discards) got() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.vals...)
}

// A primary on the caller's goroutine that calls runtime.Goexit after a
// hedge has won, in fn or in its Budget.Done, takes the caller's
// goroutine with it: Do cannot return the hedge's value, so it goes to
// Discard, once.
func TestInlineGoexitAfterTheDecisionDiscardsTheWinner(t *testing.T) {
	for _, where := range []string{"fn", "Budget.Done"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var d discards
				p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Inline: true, Discard: d.discard}
				if where == "Budget.Done" {
					p.Budget = exitBudget{k: 0}
				}
				returned := false
				done := make(chan struct{})
				go func() {
					defer close(done)
					hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
						if hedge.Attempt(ctx) == 1 {
							time.Sleep(5 * ms)
							return 1, nil
						}
						<-ctx.Done() // lost to the hedge
						if where == "fn" {
							runtime.Goexit()
						}
						return 0, ctx.Err()
					})
					returned = true
				}()
				<-done
				synctest.Wait()
				if returned {
					t.Fatal("Do returned; want runtime.Goexit in the caller")
				}
				if diff := cmp.Diff([]int{1}, d.got()); diff != "" {
					t.Errorf("discarded (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// panicBudget panics in Allow for attempt allow, and in Done for attempt
// done (-1: never).
type panicBudget struct{ allow, done int }

func (b panicBudget) Allow(_ context.Context, k int) bool {
	if k == b.allow {
		panic("budget bug")
	}
	return true
}

func (b panicBudget) Done(_ context.Context, k int, _ hedge.Outcome) {
	if k == b.done {
		panic("budget bug")
	}
}

// A hook that fails on the caller's goroutine with a value to discard
// (the kept retryable result when the retry's Allow panics, the winner
// when its Done does) does not hold Do in a slow Discard: the caller's
// cancellation ends Do's wait for it, as it does without Inline.
func TestInlineHookFailureDiscardsAside(t *testing.T) {
	tests := []struct {
		name   string
		budget hedge.Budget
		v      int // what the primary returns; 7 is retryable
	}{
		{"Allow of the retry", panicBudget{allow: 1, done: -1}, 7},
		{"Done of the winner", panicBudget{allow: -1, done: 0}, 1},
	}
	for _, tt := range tests {
		for _, inline := range []bool{false, true} {
			t.Run(tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var d discards
					ctx, cancel := context.WithCancel(t.Context())
					time.AfterFunc(10*ms, cancel)
					p := hedge.Policy[int]{
						Delay: hedge.Fixed(time.Second), Budget: tt.budget, Inline: inline,
						Classify: func(v int, err error) hedge.Outcome {
							if v == 7 {
								return hedge.Retryable
							}
							return hedge.Accept
						},
						Discard: func(v int) {
							time.Sleep(time.Second) // draining a body
							d.discard(v)
						},
					}
					start := time.Now()
					var pe *hedge.PanicError
					func() {
						defer func() { pe, _ = recover().(*hedge.PanicError) }()
						hedge.Do(ctx, p, func(ctx context.Context) (int, error) { return tt.v, nil })
					}()
					if pe == nil || pe.Value != "budget bug" || time.Since(start) != 10*ms {
						var v any
						if pe != nil {
							v = pe.Value
						}
						t.Errorf("Inline %v: Do panicked with %v at %v; want the budget's panic at 10ms", inline, v, time.Since(start))
					}
					time.Sleep(time.Second)
					synctest.Wait()
					if diff := cmp.Diff([]int{tt.v}, d.got()); diff != "" {
						t.Errorf("Inline %v: discarded (-want +got):\n%s", inline, diff)
					}
				})
			})
		}
	}
}

// Whether the primary runs on the caller's goroutine, where Do waits for
// it past the deadline, is the Policy's to say, not the environment's: a
// program started with HEDGE_INLINE set runs a Policy without Inline as
// any other. The test runs itself again in such a process.
func TestInlineIsThePolicysAlone(t *testing.T) {
	if os.Getenv("HEDGE_TEST_CHILD") != "" {
		caller := goroutineID()
		here := true
		hedge.Do(t.Context(), hedge.Policy[int]{}, func(context.Context) (int, error) {
			here = goroutineID() == caller
			return 0, nil
		})
		if here {
			t.Error("with HEDGE_INLINE set, a Policy without Inline ran its primary on the caller's goroutine")
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInlineIsThePolicysAlone$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HEDGE_INLINE=1", "HEDGE_TEST_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%v:\n%s", err, out)
	}
}
