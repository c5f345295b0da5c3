package hedge_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/ctxtest"
)

var errShutdown = errors.New("shutting down")

func TestDoneContextSkipsFn(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errShutdown)
	called := false
	_, err := hedge.Do(ctx, hedge.Policy[int]{}, func(context.Context) (int, error) {
		called = true
		return 1, nil
	})
	if !errors.Is(err, errShutdown) || called {
		t.Errorf("Do = %v (fn called: %v), want the cause and no call", err, called)
	}
}

func TestCallerCancelReturnsCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(120*ms, func() { cancel(errShutdown) })
		r := newRecorder(step{after: time.Second, ignore: true}, step{after: time.Second, ignore: true})
		_, err := hedge.Do(ctx, hedge.Policy[int]{Delay: hedge.Fixed(100 * ms)}, r.fn)
		if !errors.Is(err, errShutdown) || r.since() != 120*ms {
			t.Errorf("Do returned %v at %v, want %v at 120ms", err, r.since(), errShutdown)
		}
		synctest.Wait()
		for k, at := range r.cancels() {
			if at != 120*ms || !errors.Is(r.causes[k], context.Canceled) {
				t.Errorf("attempt %d cancelled at %v with %v, want 120ms, context.Canceled", k, at, r.causes[k])
			}
		}
		if len(r.cancels()) != 2 {
			t.Errorf("cancelled %v, want both attempts", r.cancels())
		}
		time.Sleep(2 * time.Second)
	})
}

func TestHedgeSharesTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var deadlines []time.Time
		var mu sync.Mutex
		p := hedge.Policy[int]{Delay: hedge.Fixed(50 * ms), MaxAttempts: 3, Timeout: 100 * ms}
		_, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			d, _ := ctx.Deadline()
			mu.Lock()
			deadlines = append(deadlines, d)
			mu.Unlock()
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 100*ms {
			t.Errorf("Do returned %v at %v, want DeadlineExceeded at 100ms", err, time.Since(start))
		}
		synctest.Wait()
		want := start.Add(100 * ms)
		if len(deadlines) != 2 || !deadlines[0].Equal(want) || !deadlines[1].Equal(want) {
			t.Errorf("attempt deadlines %v, want two at %v", deadlines, want)
		}
	})
}

func TestParentDeadlineIsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 70*ms)
		defer cancel()
		r := newRecorder(step{after: time.Second}, step{after: time.Second})
		// 30ms of the 70ms are left at the hedge: more than half its 40ms delay.
		_, err := hedge.Do(ctx, hedge.Policy[int]{Delay: hedge.Fixed(40 * ms), Timeout: time.Second}, r.fn)
		if !errors.Is(err, context.DeadlineExceeded) || r.since() != 70*ms {
			t.Errorf("Do returned %v at %v, want DeadlineExceeded at 70ms", err, r.since())
		}
		if got := r.starts(); len(got) != 2 {
			t.Errorf("starts %v, want the primary and a hedge", got)
		}
	})
}

// TestWinnerContextOutlivesDo: a value tied to the winner's context (a
// response body) stays usable after Do returns, until the call's deadline;
// the losers' are cancelled at the decision.
func TestWinnerContextOutlivesDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctxs := make([]context.Context, 2)
		p := hedge.Policy[context.Context]{Delay: hedge.Fixed(100 * ms), Timeout: time.Second}
		won, err := hedge.Do(t.Context(), p, func(ctx context.Context) (context.Context, error) {
			k := hedge.Attempt(ctx)
			ctxs[k] = ctx
			body, cancel := context.WithTimeout(ctx, time.Hour) // what a transport derives for the body
			_ = cancel
			if k == 0 {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			time.Sleep(10 * ms)
			return body, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(ctxs[0].Err(), context.Canceled) {
			t.Errorf("loser's context: %v, want context.Canceled", ctxs[0].Err())
		}
		time.Sleep(time.Second - 110*ms - time.Nanosecond)
		if won.Err() != nil || ctxs[1].Err() != nil {
			t.Errorf("just before the deadline: body %v, attempt %v; want both live", won.Err(), ctxs[1].Err())
		}
		<-won.Done()
		if at := time.Since(start); at != time.Second || !errors.Is(won.Err(), context.DeadlineExceeded) {
			t.Errorf("body context ended at %v with %v, want the call's deadline, 1s", at, won.Err())
		}
	})
}

// Do's own deadline reaches a winner that nobody waits on when asked.
func TestWinnerDeadlineWithoutWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.Policy[context.Context]{Timeout: 100 * ms}
		won, _ := hedge.Do(t.Context(), p, func(ctx context.Context) (context.Context, error) { return ctx, nil })
		if won.Err() != nil {
			t.Fatalf("winner cancelled at once: %v", won.Err())
		}
		time.Sleep(100 * ms)
		if !errors.Is(won.Err(), context.DeadlineExceeded) {
			t.Errorf("after the deadline: %v, want DeadlineExceeded", won.Err())
		}
		select {
		case <-won.Done():
		default:
			t.Error("Done is open while Err is set")
		}
	})
}

// When the deadline is ctx's own, Do returns ctx's cause, not a deadline
// of its own.
func TestParentDeadlineCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeoutCause(t.Context(), 100*ms, errShutdown)
		defer cancel()
		_, err := hedge.Do(ctx, hedge.Policy[int]{MaxAttempts: 1, Timeout: time.Second}, func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if !errors.Is(err, errShutdown) {
			t.Errorf("Do = %v, want ctx's cause %v", err, errShutdown)
		}
	})
}

// body stands in for a response body: a context derived from the
// attempt's, released when the caller closes it.
type body struct {
	ctx   context.Context
	close context.CancelFunc
}

func TestLongLivedParentRetainsNothing(t *testing.T) {
	reg := &ctxtest.Registry{}
	p := hedge.Policy[body]{
		Delay: hedge.Fixed(0), Timeout: time.Hour,
		Discard: func(b body) { b.close() },
	}
	for i := 0; i < 10_000; i++ {
		b, err := hedge.Do(reg, p, func(ctx context.Context) (body, error) {
			ctx, cancel := context.WithCancel(ctx)
			return body{ctx, cancel}, nil
		})
		if err != nil || b.ctx.Err() != nil {
			t.Fatalf("call %d: %v, body %v", i, err, b.ctx.Err())
		}
		b.close()
	}
	if n := reg.Live(); n != 0 {
		t.Errorf("%d registrations left on the parent after 10,000 calls", n)
	}
}

func TestAttemptRouting(t *testing.T) {
	if got := hedge.Attempt(context.Background()); got != 0 {
		t.Errorf("Attempt outside Do = %d, want 0", got)
	}
	synctest.Test(t, func(t *testing.T) {
		replicas := []string{"a", "b", "c"}
		p := hedge.Policy[string]{Delay: hedge.Fixed(10 * ms), MaxAttempts: 3}
		v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (string, error) {
			child, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			k := hedge.Attempt(child)
			if k < 2 {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return replicas[k], nil
		})
		if v != "c" || err != nil {
			t.Errorf("Do = %q, %v; want the third replica", v, err)
		}
	})
}
