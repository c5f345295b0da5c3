// Regression tests for races and leaks in the call's hooks, its
// primary's claim and the winner's watch, each driven into the state
// that showed it.

package hedge

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
)

// Goexit in Delay.Next on a hedge's goroutine leaks the budget grant.
func TestGoexitInNextReturnsTheGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := &InflightLimit{Max: 5}
		delay := DelayFunc(func(ctx context.Context, k int) time.Duration {
			if k == 1 {
				runtime.Goexit()
			}
			return time.Millisecond
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			Do(context.Background(), Policy[int]{Delay: delay, MaxAttempts: 3, Budget: lim},
				func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
		}()
		<-done
		time.Sleep(50 * time.Millisecond)
		if n := lim.InFlight(); n != 0 {
			t.Fatalf("InflightLimit holds %d permits after Do ended", n)
		}
	})
}

type countBudget struct {
	mu                           sync.Mutex
	allow0, done0, allowK, doneK int
}

func (b *countBudget) Allow(_ context.Context, k int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k == 0 {
		b.allow0++
	} else {
		b.allowK++
	}
	return true
}
func (b *countBudget) Done(_ context.Context, k int, _ Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k == 0 {
		b.done0++
	} else {
		b.doneK++
	}
}

// A primary claimed (Allow(0)) whose caller gives up before it runs is
// never run, and still gets Done(0).
func TestPrimaryCutOffBeforeItRunsIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &countBudget{}
		ctx, cancel := context.WithCancel(context.Background())
		delay := DelayFunc(func(_ context.Context, k int) time.Duration {
			cancel() // the caller gives up just after Do checked ctx
			return time.Second
		})
		var ran atomic.Bool
		_, err := Do(ctx, Policy[int]{Delay: delay, MaxAttempts: 2, Budget: b},
			func(ctx context.Context) (int, error) { ran.Store(true); return 1, nil })
		time.Sleep(50 * time.Millisecond)
		b.mu.Lock()
		defer b.mu.Unlock()
		if ran.Load() || !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v with fn run: %v; want context.Canceled, fn not run", err, ran.Load())
		}
		if b.allow0 != b.done0 {
			t.Fatalf("Allow(0)=%d but Done(0)=%d", b.allow0, b.done0)
		}
	})
}

// a counting Delay (Keyed/Planner) with MaxAttempts 1 calls Allow(0) twice.
func TestOneAllowForThePrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &countBudget{}
		Do(context.Background(), Policy[int]{Delay: &Keyed{}, MaxAttempts: 1, Budget: b},
			func(ctx context.Context) (int, error) { return 1, nil })
		time.Sleep(10 * time.Millisecond)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.allow0 != 1 {
			t.Fatalf("Allow(0) called %d times for one call (Done(0) %d)", b.allow0, b.done0)
		}
	})
}

type countClock struct {
	clock.Clock
	n atomic.Int64
}

func (c *countClock) Now() time.Time {
	if c.n.Add(1) > 100_000 {
		panic("steps spin: the clock was read 100,000 times") // in a bubble a spin never lets time pass
	}
	return c.Clock.Now()
}

type slowBudget struct{ d time.Duration }

func (b slowBudget) Allow(_ context.Context, k int) bool {
	if k == 2 {
		time.Sleep(b.d)
	}
	return true
}
func (slowBudget) Done(context.Context, int, Outcome) {}

// while a retry's claim waits on a hook, a due timed hedge spins steps.
func TestNoSpinWhileAClaimWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &countClock{Clock: clock.New()}
		delay := DelayFunc(func(_ context.Context, k int) time.Duration { return 10 * time.Millisecond })
		var before int64
		_, err := Do(context.Background(), Policy[int]{Delay: delay, MaxAttempts: 4, Budget: slowBudget{200 * time.Millisecond}, Clock: clk},
			func(ctx context.Context) (int, error) {
				switch Attempt(ctx) {
				case 0:
					time.Sleep(15 * time.Millisecond)
					before = clk.n.Load()
					return 0, errors.New("retry") // attempt 1 is last and its hedge is due at 20ms
				case 2:
					return 2, nil
				}
				<-ctx.Done()
				return 0, ctx.Err()
			})
		t.Logf("err=%v clock reads during a 200ms claim: %d", err, clk.n.Load()-before)
		if clk.n.Load()-before > 100 {
			t.Fatalf("steps spun while the claim ran: %d clock reads", clk.n.Load()-before)
		}
	})
}

// a detached winner's watch: a remove releasing the timer between
// arm and doneChan (a.Done racing with a derived context's cancel) hands
// out a Done channel that the deadline never closes. Deterministic
// replay of the interleaving.
func TestWatchArmedWhenAWaiterComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &attemptCtx{parent: context.Background(), deadline: time.Now().Add(30 * time.Millisecond)}
		a.detach(false)
		stop1 := a.AfterFunc(func() {}) // h1 added through the watch: its stop is w.remove, without a.mu
		// Goroutine X: a.Done() → a.mu → watchLocked → arm (no-op, armed) ...
		a.mu.Lock()
		w := a.watchLocked()
		// ... Goroutine Y: stop1() → w.remove(h1): no hooks, no done → timer released
		stop1()
		// ... X: w.doneChan()
		ch := w.doneChan()
		a.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond):
			t.Fatalf("Done channel not closed 170ms past the deadline; Err()=%v", a.Err())
		}
	})
}

// Cause of a winner past its own Timeout deadline, once a released
// watch exists and the caller then cancels with another cause.
func TestCauseAfterAReleasedWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancelCause(context.Background())
		w, _ := Do(parent, Policy[context.Context]{Timeout: 20 * time.Millisecond, MaxAttempts: 1},
			func(ctx context.Context) (context.Context, error) { return ctx, nil })
		c0 := w.(interface{ AfterFunc(func()) func() bool }).AfterFunc(func() {})
		c0() // the last waiter leaves: the watch's timer is released
		time.Sleep(40 * time.Millisecond)
		myCause := errors.New("request finished")
		cancel(myCause)
		t.Logf("Err=%v Cause=%v", w.Err(), context.Cause(w))
		if !errors.Is(context.Cause(w), context.DeadlineExceeded) {
			t.Fatalf("Err()=%v but Cause()=%v", w.Err(), context.Cause(w))
		}
	})
}

// Tries leaks a permit when op panics.
func TestTriesReportsAPanic(t *testing.T) {
	lim := &InflightLimit{Max: 1}
	try := Tries(context.Background(), lim, func(context.Context) (int, error) {
		panic("boom")
	}, nil)
	lim.Allow(context.Background(), 0)
	func() { defer func() { recover() }(); try() }() // try 0: primary
	func() { defer func() { recover() }(); try() }() // retry 1: takes the permit
	if lim.InFlight() != 0 {
		t.Fatalf("InflightLimit holds %d permits after the loop ended", lim.InFlight())
	}
}

// Discard calling Goexit (t.FailNow) on an attempt goroutine skips the
// next early drop's accounting: Do waits forever.
func TestDiscardGoexitDoesNotHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		res := make(chan error, 1)
		go func() {
			defer func() { recover(); res <- errors.New("returned (panic)") }()
			Do(context.Background(), Policy[int]{MaxAttempts: 3, Delay: DelayFunc(func(context.Context, int) time.Duration { return time.Hour }),
				Classify: func(v int, err error) Outcome {
					if v == 2 {
						panic("classifier")
					}
					if err != nil || v == 1 {
						return Retryable
					}
					return Accept
				},
				Discard: func(v int) {
					if calls.Add(1) == 1 {
						runtime.Goexit()
					}
				}},
				func(ctx context.Context) (int, error) { return Attempt(ctx) + 1, nil })
		}()
		select {
		case e := <-res:
			t.Logf("Do ended: %v", e)
		case <-time.After(500 * time.Millisecond):
			t.Fatalf("Do hangs")
		}
	})
}

// The primary's start arms the hedge timer, and the timer's step may run
// while Do is still setting the call up, if Do's goroutine is preempted
// there. Run with -race: once the timer is armed, Do touches the call's
// state only under its lock. (A bubble cannot show this race: its clock
// advances only when Do's goroutine blocks, which orders Do's writes
// before the timer's step. Many goroutines on few processors make the
// preemption likely, not certain.)
func TestTimerArmedByThePrimaryRacesNothing(t *testing.T) {
	p := Policy[int]{Delay: Fixed(time.Nanosecond), MaxAttempts: 2}
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 1000 {
				Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
			}
		})
	}
	wg.Wait()
}

// slowGrant grants every attempt, a hedge's only after 5ms.
type slowGrant struct{}

func (slowGrant) Allow(ctx context.Context, k int) bool {
	if k > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func (slowGrant) Done(context.Context, int, Outcome) {}

// The primary ends retryable while the timed hedge's grant is pending, so
// its retry is owed while nothing may start; the hedge then ends Failed.
// Nothing is in flight and nothing more may start: the step the claim
// kicked must return the kept result, not leave Do waiting for ever.
func TestOwedRetryPastTheLastAttemptEndsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := Policy[int]{
			Delay: Fixed(time.Millisecond), MaxAttempts: 2, Budget: slowGrant{},
			Classify: func(v int, err error) Outcome {
				if err == nil && v == 1 {
					return Failed
				}
				return Classify(v, err)
			},
		}
		start := time.Now()
		v, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if Attempt(ctx) == 0 {
				time.Sleep(2 * time.Millisecond)
				return 0, errors.New("retry")
			}
			return 1, nil
		})
		if v != 1 || err != nil || time.Since(start) != 6*time.Millisecond {
			t.Errorf("Do = %d, %v at %v; want 1, nil at 6ms", v, err, time.Since(start))
		}
	})
}

// A call outside any synctest bubble whose context is cancelled from
// inside one: the step that ends the call runs in the bubble, and waking
// Do from there must work (a WaitGroup that Do added to outside would
// stop the program).
func TestCallerCancelledFromABubble(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := Do(ctx, Policy[int]{MaxAttempts: 1}, func(ctx context.Context) (int, error) {
			close(started)
			<-ctx.Done()
			return 0, ctx.Err()
		})
		done <- err
	}()
	<-started
	synctest.Test(t, func(t *testing.T) { cancel() })
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
}
