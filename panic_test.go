package hedge_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

func explode(ctx context.Context) (int, error) {
	time.Sleep(50 * ms)
	panic(errBusy)
}

func TestPanicIsRaisedInCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(step{after: time.Second}, step{after: 50 * ms, panic: errBusy})
		p := hedge.Policy[int]{Delay: hedge.Fixed(100 * ms)}
		var pe *hedge.PanicError
		func() {
			defer func() {
				v := recover()
				var ok bool
				if pe, ok = v.(*hedge.PanicError); !ok {
					t.Fatalf("recovered %#v, want a *hedge.PanicError", v)
				}
			}()
			hedge.Do(t.Context(), p, r.fn)
			t.Fatal("Do returned instead of panicking")
		}()
		if r.since() != 150*ms {
			t.Errorf("panicked at %v, want 150ms", r.since())
		}
		if pe.Attempt != 1 || !errors.Is(pe, errBusy) {
			t.Errorf("PanicError{Attempt: %d, Value: %v}, want attempt 1 and errBusy", pe.Attempt, pe.Value)
		}
		if !strings.Contains(string(pe.Stack), "(*recorder).fn") {
			t.Errorf("stack does not show the attempt's frames:\n%s", pe.Stack)
		}
		synctest.Wait()
		if diff := cmp.Diff(map[int]time.Duration{0: 150 * ms, 1: 150 * ms}, r.cancels()); diff != "" {
			t.Errorf("cancelled (-want +got)\n%s", diff)
		}
	})
}

func TestPanicInPrimaryWithoutHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer func() {
			if _, ok := recover().(*hedge.PanicError); !ok {
				t.Fatal("want a *hedge.PanicError")
			}
		}()
		hedge.Do(t.Context(), hedge.Policy[int]{MaxAttempts: 1}, explode)
	})
}

func TestGoexitDoesNotHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(step{after: time.Second}, step{after: 50 * ms})
		p := hedge.Policy[int]{Delay: hedge.Fixed(100 * ms)}
		returned, exited := false, make(chan time.Duration)
		go func() {
			defer func() { exited <- r.since() }()
			hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				if hedge.Attempt(ctx) == 1 {
					time.Sleep(50 * ms)
					runtime.Goexit()
				}
				return r.fn(ctx)
			})
			returned = true
		}()
		if at := <-exited; at != 150*ms || returned {
			t.Errorf("Do's goroutine ended at %v (returned %v), want Goexit at 150ms", at, returned)
		}
		synctest.Wait()
		if diff := cmp.Diff(map[int]time.Duration{0: 150 * ms}, r.cancels()); diff != "" {
			t.Errorf("cancelled (-want +got)\n%s", diff)
		}
	})
}

func TestLatePanicIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(step{after: 300 * ms, ignore: true, panic: "late"}, step{after: 50 * ms})
		v, err := hedge.Do(t.Context(), hedge.Policy[int]{Delay: hedge.Fixed(100 * ms)}, r.fn)
		if v != 1 || err != nil {
			t.Fatalf("Do = %v, %v; want 1, nil", v, err)
		}
		time.Sleep(time.Second) // the primary panics here, after the decision
		synctest.Wait()
	})
}

func TestClassifierPanicIsRaisedInCaller(t *testing.T) {
	defer func() {
		if pe, ok := recover().(*hedge.PanicError); !ok || pe.Value != "classify" {
			t.Fatalf("want a *hedge.PanicError from the classifier")
		}
	}()
	p := hedge.Policy[int]{Classify: func(int, error) hedge.Outcome { panic("classify") }}
	hedge.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
}

// A panic in the policy's own hooks, which run on the call's goroutines,
// reaches the caller too instead of crashing the process.
func TestHookPanicIsRaisedInCaller(t *testing.T) {
	tests := []struct {
		name string
		p    hedge.Policy[int]
	}{
		{"Delay.Next", hedge.Policy[int]{Delay: hedge.DelayFunc(func(context.Context, int) time.Duration { panic("next") })}},
		{"Budget.Allow", hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: panicky{allow: true}}},
		{"Budget.Done", hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: panicky{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				defer time.Sleep(time.Second) // let the primary end
				defer func() {
					if _, ok := recover().(*hedge.PanicError); !ok {
						t.Error("want a *hedge.PanicError in the caller")
					}
				}()
				hedge.Do(t.Context(), tt.p, func(ctx context.Context) (int, error) {
					if hedge.Attempt(ctx) == 0 {
						time.Sleep(50 * ms)
						return 0, errBusy // retryable: Done(0) runs before the decision
					}
					<-ctx.Done()
					return 0, ctx.Err()
				})
				t.Error("Do returned")
			})
		})
	}
}

type panicky struct{ allow bool }

func (p panicky) Allow(_ context.Context, _ int) bool {
	if p.allow {
		panic("allow")
	}
	return true
}

func (p panicky) Done(_ context.Context, _ int, _ hedge.Outcome) {
	if !p.allow {
		panic("done")
	}
}
