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
// unregisters when it is decided.
//
// Until the call is decided, cancellation reaches it from the call (loser,
// deadline, caller done). The winner's is then detached: values tied to it
// stay usable after Do returns, and it ends at the call's deadline. What
// ends it then is a watch, a small object of its own, made only once
// something waits on the context: the timer or the registration that ends
// the winner at its deadline retains the watch, never the call.
type attemptCtx struct {
	parent   context.Context
	deadline time.Time     // by the real clock; zero: none
	next     *attemptCtx   // the call's attempts, in start order
	at       time.Duration // when it started, from the call's start, by the policy's clock
	n        int32

	// Once detached, the winner's own deadline ends it: followParent says
	// that deadline is the caller's own, so the caller's context ends it
	// (and a cancellation of the caller still reaches it); otherwise a
	// timer does. watch holds done and hooks from then on.
	detached     bool
	followParent bool
	// Guarded by the call's mu, not by mu: began says the attempt reported
	// its start (Started), tied that another's start cancelled it.
	began, tied bool
	watch       *watch

	mu    sync.Mutex
	done  chan struct{} // made on first Done, closed on cancel
	err   error
	hooks hookList // AfterFunc registrations waiting for cancel
	// why is the cause the call cancelled the attempt with (an error; nil:
	// the caller's context did, and has the cause), replaced on first
	// context.Cause by a cancelled context carrying it (see causeContext).
	// One slot for both keeps the attempt in its size class.
	why any
	// owner is the call, for Started; nil once the attempt is cancelled or
	// detached, so that neither a loser nor the winner retains the call.
	owner tier
}

// hook is one AfterFunc registration.
type hook struct {
	f    func()
	next *hook
}

// hookList is a context's AfterFunc registrations, newest first: one word
// in the attempt, where a slice takes three, linked through the hooks'
// own allocations.
type hookList struct{ head *hook }

func (l *hookList) push(h *hook) {
	h.next = l.head
	l.head = h
}

// remove unlinks h, and reports whether it was there. A removed hook
// links to nothing: its func closes over the context it watched, and a
// stop func that outlives the list must not keep the rest alive.
func (l *hookList) remove(h *hook) bool {
	for p := &l.head; *p != nil; p = &(*p).next {
		if *p == h {
			*p = h.next
			h.next = nil
			return true
		}
	}
	return false
}

// fire starts every hook on a goroutine of its own and empties the list.
func (l *hookList) fire() {
	for h := l.head; h != nil; {
		next := h.next
		h.next = nil
		go h.f()
		h = next
	}
	l.head = nil
}

func (l *hookList) empty() bool { return l.head == nil }

type attemptKey struct{}

// closedDone is handed out by Done after cancellation when no channel was
// made before it.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (a *attemptCtx) Deadline() (time.Time, bool) { return a.deadline, !a.deadline.IsZero() }

func (a *attemptCtx) Done() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		if a.done == nil {
			return closedDone
		}
		return a.done
	}
	if a.detached {
		if w := a.watchLocked(); w != nil {
			return w.doneChan()
		}
	}
	if a.done == nil {
		a.done = make(chan struct{})
	}
	return a.done
}

func (a *attemptCtx) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil || !a.detached {
		return a.err
	}
	if a.watch != nil {
		if err := a.watch.error(); err != nil {
			return err
		}
	}
	if a.followParent {
		return a.parent.Err()
	}
	if !a.deadline.IsZero() && !time.Now().Before(a.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (a *attemptCtx) Value(key any) any {
	switch key {
	case attemptKey{}:
		return int(a.n)
	case tieKey{}:
		return a
	case cancelCtxKey:
		if why := a.causeContext(); why != nil {
			return why.Value(key)
		}
	}
	return a.parent.Value(key)
}

// cancelCtxKey is the key under which the context package finds the
// cancelCtx that holds a context's cause (context.Cause asks Value for
// it). The package does not export it; init learns it by asking a probe.
var cancelCtxKey any

type keyProbe struct{ context.Context }

func (p keyProbe) Value(key any) any {
	cancelCtxKey = key
	return nil
}

func init() {
	ended, cancel := context.WithCancel(context.Background())
	cancel() // Cause asks Value only of a context that has ended
	context.Cause(keyProbe{ended})
}

// causeContext returns a cancelled context whose cause is the one the
// call cancelled a with (ErrSuperseded for a loser), so that
// context.Cause(a) and the contexts derived from a tell "lost the race"
// from "the caller gave up". It is made on first use: most losers are
// never asked. Nil while a runs, or when the caller's context ended it
// and holds the cause itself.
func (a *attemptCtx) causeContext() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	if why, ok := a.why.(context.Context); ok {
		return why
	}
	var cause error
	switch {
	case a.err != nil:
		cause, _ = a.why.(error)
	case a.watch != nil && a.watch.error() != nil:
		cause = a.watch.causeOf() // nil when the caller's context ended it
	case a.detached && !a.followParent && !a.deadline.IsZero() && !time.Now().Before(a.deadline):
		cause = context.DeadlineExceeded
	}
	if cause == nil {
		return nil
	}
	why, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	a.why = why
	return why
}

func (a *attemptCtx) String() string {
	return "hedge.Attempt(" + strconv.Itoa(int(a.n)) + ")"
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
	h := &hook{f: f}
	if a.detached {
		if w := a.watchLocked(); w != nil {
			return w.add(h)
		}
	}
	a.hooks.push(h)
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.watch != nil {
			return a.watch.remove(h)
		}
		return a.hooks.remove(h)
	}
}

// cancel ends the attempt's context with err and cause (nil: the
// caller's context ended it and holds the cause), and reports whether it
// did; later calls do nothing.
func (a *attemptCtx) cancel(err, cause error) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return false
	}
	a.owner = nil
	if a.watch != nil {
		a.watch.expire(err, cause != nil)
		return true
	}
	a.err, a.why = err, nil
	if cause != nil {
		a.why = cause
	}
	if a.done != nil {
		close(a.done)
	}
	a.hooks.fire()
	return true
}

// detach hands the winner its deadline: from now on the call no longer
// cancels it, and its deadline ends it. followParent says that deadline is
// the caller's own.
func (a *attemptCtx) detach(followParent bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.detached, a.followParent = true, followParent
	a.owner = nil
	if a.err == nil && (a.done != nil || !a.hooks.empty()) {
		if w := a.watchLocked(); w != nil {
			w.arm() // something waits on the winner already
		}
	}
}

// watchLocked returns the detached winner's watch, making it when its
// deadline can end it: an unobserved deadline needs no watch (Err checks
// the clock), and a winner without a deadline never ends by itself.
func (a *attemptCtx) watchLocked() *watch {
	if a.watch == nil && (!a.deadline.IsZero() || a.followParent) {
		a.watch = &watch{done: a.done, hooks: a.hooks, deadline: a.deadline.UnixNano()}
		if a.followParent {
			a.watch.parent = a.parent
		}
		a.hooks = hookList{}
	}
	return a.watch
}

// watch ends a detached winner's context at its deadline. The timer or
// the registration on the caller's context that does it holds only this,
// never the call.
type watch struct {
	deadline int64           // by the real clock, in Unix nanoseconds: a small watch retains less
	parent   context.Context // non-nil: the deadline is the caller's, and its context ends the winner

	mu    sync.Mutex
	done  chan struct{}
	hooks hookList
	err   error
	stop  func() bool // releases the timer or the registration; nil: none armed
	// own says err is also the cause; false: the caller's context ended
	// the winner and holds the cause. One bool rather than a second
	// error keeps the watch in a smaller size class.
	own bool
}

// arm makes the deadline end the watch, unless it is armed or over.
func (w *watch) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armLocked()
}

// armLocked is arm with w.mu held. Whoever makes the watch wait (a Done
// channel handed out, a hook added) arms it under the same hold, so that
// a remove releasing the last waiter cannot fall in between and leave a
// waiter that the deadline never reaches.
func (w *watch) armLocked() {
	if w.stop != nil || w.err != nil {
		return
	}
	if w.parent != nil {
		w.stop = context.AfterFunc(w.parent, w.parentDone)
	} else if d := time.Until(time.Unix(0, w.deadline)); d > 0 {
		w.stop = time.AfterFunc(d, w.deadlinePassed).Stop
	} else {
		w.expireLocked(context.DeadlineExceeded, true)
	}
}

func (w *watch) deadlinePassed() { w.expire(context.DeadlineExceeded, true) }

func (w *watch) parentDone() { w.expire(w.parent.Err(), false) }

// expire ends the watch with err; own says err is its cause too (the
// call's cancellations of a winner are: the deadline, a release),
// otherwise the caller's context holds the cause.
func (w *watch) expire(err error, own bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expireLocked(err, own)
}

func (w *watch) expireLocked(err error, own bool) {
	if w.err != nil {
		return
	}
	w.err, w.own = err, own
	if w.done != nil {
		close(w.done)
	}
	w.hooks.fire()
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
}

func (w *watch) error() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// causeOf returns the cause the watch ended with, if it has ended and
// the caller's context does not hold it. For a deadline that passed
// without anything waiting, that is DeadlineExceeded too.
func (w *watch) causeOf() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.own {
		return nil
	}
	return w.err
}

func (w *watch) doneChan() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done == nil {
		if w.err != nil {
			return closedDone
		}
		w.done = make(chan struct{})
	}
	w.armLocked()
	return w.done
}

func (w *watch) add(h *hook) (stop func() bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		go h.f()
		return func() bool { return false }
	}
	w.hooks.push(h)
	w.armLocked()
	return func() bool { return w.remove(h) }
}

// remove unregisters h. When nothing waits on the winner any more (its
// last derived context was cancelled, as hedgehttp does when the caller
// closes the body, and no Done channel was handed out), the timer or
// registration is released at once rather than at the deadline; a later
// wait arms it again.
func (w *watch) remove(h *hook) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok := w.hooks.remove(h)
	if ok && w.hooks.empty() && w.done == nil && w.stop != nil {
		w.stop()
		w.stop = nil
	}
	return ok
}

// canceled reports whether the call cancelled the attempt.
func (a *attemptCtx) canceled() bool { return a.canceledWith() != nil }

// canceledWith returns the error the call cancelled the attempt with:
// context.DeadlineExceeded when the call's deadline cut it off, or nil
// while the call has not cancelled it.
func (a *attemptCtx) canceledWith() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Attempt returns which attempt of a hedged call ctx belongs to: 0 in the
// primary, k in the k-th hedge, and 0 outside Do. Use it to send each
// attempt to a different replica. In a retry loop of Tries, attempts are
// numbered across the loop's tries, so that retries move on to other
// replicas too: a try's Do starts after the last attempt of the try
// before, and outside Do, the try's context gives the try's number.
func Attempt(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok {
		return n
	}
	return 0
}
