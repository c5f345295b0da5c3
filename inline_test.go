package hedge_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/ctxtest"
	"github.com/tailcut/hedge/internal/goid"
	"github.com/tailcut/hedge/internal/lab"
)

// With Inline, the primary and the retry its retryable result starts at
// once run on the caller's goroutine; a timed hedge runs on one of its
// own. Without, none does.
func TestInlineRunsThePrimaryOnTheCallersGoroutine(t *testing.T) {
	for _, inline := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			caller := goid.Current()
			var here [3]bool
			p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), MaxAttempts: 3, Inline: inline}
			hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				k := hedge.Attempt(ctx)
				here[k] = goid.Current() == caller
				switch k {
				case 0:
					return 0, errBusy // retryable: attempt 1 starts at once
				case 1:
					return 0, lab.Wait(ctx, 50*ms) // attempt 2 is its hedge
				}
				return 2, nil
			})
			want := [3]bool{inline, inline, false}
			if here != want {
				t.Errorf("Inline %v: attempts on the caller's goroutine %v, want %v", inline, here, want)
			}
		})
	}
}

// A hedge that wins cancels the primary on the caller's goroutine, and Do
// returns as soon as the primary has: at the decision, for an fn that
// honours its context.
func TestInlineHedgeWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(step{after: time.Second}, step{after: 5 * ms})
		v, err := hedge.Do(t.Context(), hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Inline: true}, r.fn)
		if v != 1 || err != nil || r.since() != 15*ms {
			t.Errorf("Do = %d, %v at %v; want the hedge's 1, nil at 15ms", v, err, r.since())
		}
		synctest.Wait()
		if diff := cmp.Diff(map[int]time.Duration{0: 15 * ms}, r.cancels()); diff != "" {
			t.Errorf("cancelled at (-want +got):\n%s", diff)
		}
	})
}

// The caller's context ends the call as it does without Inline: its cause
// at once, for a primary that honours its context.
func TestInlineCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(120*ms, func() { cancel(errShutdown) })
		r := newRecorder(step{after: time.Second}, step{after: time.Second})
		_, err := hedge.Do(ctx, hedge.Policy[int]{Delay: hedge.Fixed(100 * ms), Inline: true}, r.fn)
		if !errors.Is(err, errShutdown) || r.since() != 120*ms {
			t.Errorf("Do returned %v at %v, want %v at 120ms", err, r.since(), errShutdown)
		}
	})
}

// A primary that answers just after it lost is discarded on a goroutine
// of its own: a slow Discard holds Do no more than it does without
// Inline.
func TestInlineLateLoserIsDiscardedAside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var discarded atomic.Int32
		p := hedge.Policy[int]{
			Delay: hedge.Fixed(10 * ms), Inline: true,
			Discard: func(int) {
				time.Sleep(time.Second) // draining a body
				discarded.Add(1)
			},
		}
		start := time.Now()
		v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			if hedge.Attempt(ctx) == 1 {
				time.Sleep(5 * ms)
				return 1, nil
			}
			<-ctx.Done()
			time.Sleep(ms) // answers anyway, a little after its cancellation
			return 0, nil
		})
		if v != 1 || err != nil || time.Since(start) != 16*ms {
			t.Errorf("Do = %d, %v at %v; want 1, nil at 16ms, before the loser's Discard", v, err, time.Since(start))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := discarded.Load(); n != 1 {
			t.Errorf("Discard ran %d times; want once, for the primary", n)
		}
	})
}

// A panic of the primary on the caller's goroutine reaches the caller as
// a *PanicError, as from any attempt, and the hedge is cancelled.
func TestInlinePrimaryPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(step{after: 20 * ms, panic: "boom"}, step{after: time.Second})
		func() {
			defer func() {
				pe, ok := recover().(*hedge.PanicError)
				if !ok || pe.Attempt != 0 || pe.Value != "boom" {
					t.Errorf("Do panicked with %v; want attempt 0's *hedge.PanicError", pe)
				}
			}()
			hedge.Do(t.Context(), hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Inline: true}, r.fn)
		}()
		synctest.Wait()
		if diff := cmp.Diff(map[int]time.Duration{0: 20 * ms, 1: 20 * ms}, r.cancels()); diff != "" {
			t.Errorf("cancelled at (-want +got):\n%s", diff)
		}
	})
}

// runtime.Goexit in the primary on the caller's goroutine ends the call
// as it does on a goroutine of its own: the hedge is cancelled, the
// Observer hears the call, and nothing stays linked to the caller's
// context; then the caller's goroutine exits.
func TestInlinePrimaryGoexits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reg ctxtest.Registry
		var reports []hedge.Report
		obs := hedge.ObserverFunc(func(_ context.Context, r hedge.Report) { reports = append(reports, r) })
		r := newRecorder(step{after: 20 * ms}, step{after: time.Second})
		p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Inline: true, Observer: obs}
		var returned atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			hedge.Do(&reg, p, func(ctx context.Context) (int, error) {
				if hedge.Attempt(ctx) == 0 {
					time.Sleep(20 * ms)
					runtime.Goexit()
				}
				return r.fn(ctx)
			})
			returned.Store(true)
		}()
		<-done
		synctest.Wait()
		if returned.Load() {
			t.Fatal("Do returned; want runtime.Goexit in the caller")
		}
		if len(reports) != 1 || !reports[0].Panicked {
			t.Errorf("the Observer heard %+v; want one report, Panicked", reports)
		}
		if n := reg.Live(); n != 0 {
			t.Errorf("%d registrations left on the caller's context", n)
		}
		if diff := cmp.Diff(map[int]time.Duration{1: 20 * ms}, r.cancels()); diff != "" {
			t.Errorf("cancelled at (-want +got):\n%s", diff)
		}
	})
}

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

// lateLink is a caller's context whose AfterFunc, which Do calls before
// it runs the primary on the caller's goroutine, takes wait: long enough
// for the first hedge's timer to fire first and take the primary. It
// hides its parent's values, or context.AfterFunc would find the parent's
// cancelCtx among them and register there instead.
type lateLink struct {
	context.Context
	wait time.Duration
}

func (lateLink) Value(any) any { return nil }

func (l lateLink) AfterFunc(f func()) (stop func() bool) {
	time.Sleep(l.wait)
	return context.AfterFunc(l.Context, f)
}

// When the hedge's timer takes the primary before the caller's goroutine
// does, the caller's goroutine runs the hedge it finds due instead, and
// Do returns once that hedge, which lost, has seen its cancellation.
func TestInlineCallerRunsTheHedgeWhenTheTimerTookThePrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		caller := goid.Current()
		var mu sync.Mutex
		onCaller := map[int]bool{}
		r := newRecorder(step{after: 30 * ms}, step{after: time.Second})
		p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Inline: true}
		ctx := lateLink{Context: t.Context(), wait: 15 * ms}
		v, err := hedge.Do(ctx, p, func(ctx context.Context) (int, error) {
			mu.Lock()
			onCaller[hedge.Attempt(ctx)] = goid.Current() == caller
			mu.Unlock()
			return r.fn(ctx)
		})
		// The timer's goroutine starts the primary at 10ms; it answers
		// 30ms later.
		if v != 0 || err != nil || r.since() != 40*ms {
			t.Errorf("Do = %d, %v at %v; want the primary's 0, nil at 40ms", v, err, r.since())
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff(map[int]bool{0: false, 1: true}, onCaller); diff != "" {
			t.Errorf("attempts on the caller's goroutine (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]time.Duration{10 * ms, 15 * ms}, r.starts()); diff != "" {
			t.Errorf("started at (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[int]time.Duration{1: 40 * ms}, r.cancels()); diff != "" {
			t.Errorf("cancelled at (-want +got):\n%s", diff)
		}
	})
}
