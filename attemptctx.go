package hedge

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// attemptCtx is the context one attempt runs under. Do builds it by hand
// rather than with context.WithCancel so that the primary's lives inside the
// call's own allocation, and so that cancelling it takes nothing from the
// caller's context: a call registers with its caller's context once, and
// unregisters when it returns.
//
// Until the call is decided, cancellation reaches it from the call (loser,
// deadline, caller done). The winner's is then detached: values tied to it
// stay usable after Do returns, the caller's context no longer reaches it,
// and it enforces its deadline by itself, with a timer made only once
// something waits on it.
type attemptCtx struct {
	parent   context.Context
	n        int
	deadline time.Time   // by the real clock; zero: none
	next     *attemptCtx // the call's attempts, in start order

	mu       sync.Mutex
	done     chan struct{} // made on first Done, closed on cancel
	err      error
	hooks    []*hook     // AfterFunc registrations waiting for cancel
	detached bool        // the winner, after the decision
	timer    *time.Timer // enforces the deadline once detached
}

type hook struct{ f func() }

type attemptKey struct{}

// closedDone is handed out by Done after cancellation when no channel was
// made before it.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (a *attemptCtx) Deadline() (time.Time, bool) { return a.deadline, !a.deadline.IsZero() }

func (a *attemptCtx) Done() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		if a.err != nil {
			return closedDone
		}
		a.done = make(chan struct{})
		a.watchLocked()
	}
	return a.done
}

func (a *attemptCtx) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil && a.detached && !a.deadline.IsZero() && !time.Now().Before(a.deadline) {
		a.cancelLocked(context.DeadlineExceeded)
	}
	return a.err
}

func (a *attemptCtx) Value(key any) any {
	if key == (attemptKey{}) {
		return a.n
	}
	return a.parent.Value(key)
}

func (a *attemptCtx) String() string {
	return "hedge.Attempt(" + strconv.Itoa(a.n) + ")"
}

// AfterFunc lets context.WithCancel and context.AfterFunc hook onto an
// attempt without a watcher goroutine per derived context.
func (a *attemptCtx) AfterFunc(f func()) (stop func() bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		go f()
		return func() bool { return false }
	}
	h := &hook{f}
	a.hooks = append(a.hooks, h)
	a.watchLocked()
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, x := range a.hooks {
			if x == h {
				a.hooks = append(a.hooks[:i], a.hooks[i+1:]...)
				return true
			}
		}
		return false
	}
}

// cancel ends the attempt's context with err; later calls do nothing.
func (a *attemptCtx) cancel(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancelLocked(err)
}

func (a *attemptCtx) cancelLocked(err error) {
	if a.err != nil {
		return
	}
	a.err = err
	if a.done != nil {
		close(a.done)
	}
	for _, h := range a.hooks {
		go h.f()
	}
	a.hooks = nil
	if a.timer != nil {
		a.timer.Stop()
	}
}

// detach hands the winner its deadline: from now on the call no longer
// cancels it, and it cancels itself when its deadline passes.
func (a *attemptCtx) detach() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.detached = true
	if a.done != nil || len(a.hooks) > 0 {
		a.watchLocked()
	}
}

// watchLocked arms the detached winner's deadline timer, once something
// waits on the context: an unobserved deadline needs no timer, Err checks
// the clock.
func (a *attemptCtx) watchLocked() {
	if !a.detached || a.deadline.IsZero() || a.timer != nil || a.err != nil {
		return
	}
	if d := time.Until(a.deadline); d > 0 {
		a.timer = time.AfterFunc(d, func() { a.cancel(context.DeadlineExceeded) })
	} else {
		a.cancelLocked(context.DeadlineExceeded)
	}
}

// canceled reports whether the call cancelled the attempt.
func (a *attemptCtx) canceled() bool { return a.Err() != nil }

// Attempt returns which attempt of a hedged call ctx belongs to: 0 in the
// primary, k in the k-th hedge, and 0 outside Do. Use it to send each
// attempt to a different replica.
func Attempt(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok {
		return n
	}
	return 0
}
