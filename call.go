package hedge

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// call is the state of one Do. Every goroutine of the call enters through
// step: Do starts it for the primary, the hedge timer and the caller's
// context fire it, and an attempt that ends retryable runs the next
// attempt itself. Sharing that one func value between the go statement,
// the timer and context.AfterFunc is what keeps the fast path at three
// allocations: the call, stepFn, the timer.
type call[T any] struct {
	mu   sync.Mutex
	wake sync.Cond // Do waits on it for decided, and for early discards

	fn       func(context.Context) (T, error)
	parent   context.Context
	delay    Delay
	learner  Learner                // delay, if it learns; nil otherwise
	classify func(T, error) Outcome // nil: classifyErr, without a generic func value's allocation
	budget   Budget
	discard  func(T)
	clock    clock.Clock // nil: real time
	max      int
	begin    time.Time // by the policy's clock; the primary starts then
	deadlines

	stepFn func()
	timer  *time.Timer
	ctimer *clock.Timer

	primary   attemptCtx
	last      *attemptCtx
	started   int
	inflight  int
	nextAt    time.Time     // when the next timed hedge is due; zero: none
	kick      bool          // a step is due now; start it after unlocking
	lastDelay time.Duration // the delay that set nextAt

	// The last retryable result, returned if nothing better comes.
	kept    *attemptCtx
	keptVal T
	keptErr error

	decided    bool
	discarding int // early drops not yet through Discard; Do waits for them
	val        T
	err        error
	winner     int
	outcome    Outcome
	panicked   *PanicError
	hookPanic  *PanicError // a panic in Delay.Next or the Budget, to re-raise
	goexit     bool
	refusals   int
	skips      int

	// What the learner hears: how long the primary ran, and whether it
	// answered (false: it was still running at the decision).
	primaryRan  time.Duration
	primaryDone bool
	learn       bool
}

// result is what one attempt's function did.
type result[T any] struct {
	v        T
	err      error
	o        Outcome
	produced bool        // fn returned normally
	returned bool        // fn and the classifier returned normally
	panic    *PanicError // fn or the classifier panicked
}

// drop is a value bound for Discard, handed over outside the lock. An
// early drop was superseded before the decision: Do waits for its Discard
// when it returns a result, so that its return orders after it.
type drop[T any] struct {
	v     T
	ok    bool
	early bool
}

func (c *call[T]) now() time.Time {
	if c.clock == nil {
		return time.Now()
	}
	return c.clock.Now()
}

// step starts whatever is due and runs it on this goroutine.
func (c *call[T]) step() {
	c.mu.Lock()
	a, d := c.advance()
	c.unlock()
	c.drop(d)
	for a != nil {
		a = c.run(a)
	}
}

// unlock releases c.mu, first ending the call if a hook panicked, and
// starts a step that is due at once.
func (c *call[T]) unlock() {
	var d drop[T]
	if c.hookPanic != nil && !c.decided {
		c.panicked, c.winner, c.outcome = c.hookPanic, -1, Terminal
		d = c.dropKept()
		c.finish(nil, context.Canceled)
	}
	kick := c.kick
	c.kick = false
	c.mu.Unlock()
	if kick {
		go c.stepFn()
	}
	c.drop(d)
}

// advance decides on the caller's context and the deadline, and claims the
// primary or a due hedge. Called with c.mu held.
func (c *call[T]) advance() (*attemptCtx, drop[T]) {
	if c.decided {
		return nil, drop[T]{}
	}
	if err := c.parent.Err(); err != nil {
		return nil, c.end(context.Cause(c.parent), err)
	}
	if c.started == 0 {
		// The primary starts when Do was called: its schedule and its
		// latency count from there, and it saves reading the clock.
		return c.start(c.begin), drop[T]{}
	}
	now := c.now()
	if !c.timeout.IsZero() && !now.Before(c.timeout) {
		return nil, c.end(context.DeadlineExceeded, context.DeadlineExceeded)
	}
	if c.nextAt.IsZero() || now.Before(c.nextAt) {
		c.arm(now) // an early or stale timer: keep the real one
		return nil, drop[T]{}
	}
	c.nextAt = time.Time{}
	a := c.tryStart(now)
	if a == nil {
		c.arm(now)
	}
	return a, drop[T]{}
}

// tryStart starts the next extra attempt if the bound, the deadline and
// the budget all allow it. Called with c.mu held.
func (c *call[T]) tryStart(now time.Time) *attemptCtx {
	if c.started >= c.max {
		return nil
	}
	if !worthStarting(now, c.sched, c.lastDelay) {
		c.skips++
		return nil
	}
	if c.budget != nil && !c.allow(c.started) {
		c.refusals++
		return nil
	}
	return c.start(now)
}

// start claims attempt c.started and schedules the hedge after it. Called
// with c.mu held.
func (c *call[T]) start(now time.Time) *attemptCtx {
	k := c.started
	a := &c.primary
	if k > 0 {
		a = &attemptCtx{}
		c.last.next = a
	}
	a.parent, a.n, a.deadline = c.parent, k, c.real
	if k == 0 {
		if c.budget != nil {
			c.allow(0) // the primary always runs; a ratio budget counts the call
		}
	}
	c.last = a
	c.started++
	c.inflight++
	c.nextAt = time.Time{}
	if c.started < c.max {
		d := c.next(k)
		c.lastDelay = d
		if d >= 0 {
			c.nextAt = now.Add(d)
		}
	}
	c.arm(now)
	return a
}

// arm makes step run at the next hedge or the Timeout, whichever is
// first. Called with c.mu held.
func (c *call[T]) arm(now time.Time) {
	at := earliest(c.nextAt, c.timeout)
	if at.IsZero() {
		return
	}
	d := at.Sub(now)
	switch {
	case d <= 0:
		c.kick = true // started by whoever unlocks, so it does not wait on c.mu
	case c.clock != nil && c.ctimer != nil:
		c.ctimer.Reset(d)
	case c.clock != nil:
		c.ctimer = c.clock.AfterFunc(d, c.stepFn)
	case c.timer != nil:
		c.timer.Reset(d)
	default:
		c.timer = time.AfterFunc(d, c.stepFn)
	}
}

// run runs attempt a on this goroutine and returns the attempt to run next
// on it, if its result made one start at once.
func (c *call[T]) run(a *attemptCtx) (next *attemptCtx) {
	if a.canceled() {
		// Claimed just before the call was decided: do not call fn.
		c.mu.Lock()
		c.inflight--
		if c.budget != nil {
			c.done(a.n, Canceled)
		}
		c.unlock()
		return nil
	}
	var r result[T]
	// Deferred so that it also runs when fn calls runtime.Goexit.
	defer func() { next = c.record(a, &r) }()
	c.invoke(a, &r)
	return nil
}

func (c *call[T]) invoke(a *attemptCtx, r *result[T]) {
	defer func() {
		if !r.returned {
			if v := recover(); v != nil {
				r.panic = &PanicError{Attempt: a.n, Value: v, Stack: debug.Stack()}
			}
		}
	}()
	r.v, r.err = c.fn(a)
	r.produced = true
	if c.classify != nil {
		r.o = c.classify(r.v, r.err)
	} else {
		r.o = classifyErr(r.err)
	}
	if r.o < Accept || r.o > Terminal {
		r.o = Terminal
	}
	r.returned = true
}

// record takes attempt a's result into the call.
func (c *call[T]) record(a *attemptCtx, r *result[T]) *attemptCtx {
	var d, own drop[T]
	var next *attemptCtx
	c.mu.Lock()
	c.inflight--
	if c.learner != nil && a == &c.primary && !c.decided {
		c.primaryDone = true
		// Only an accepted answer says how long a good one takes.
		if c.learn = r.returned && r.o == Accept; c.learn {
			c.primaryRan = c.now().Sub(c.begin)
		}
	}
	if c.budget != nil {
		o := r.o
		if !r.returned {
			o = Terminal
		}
		if a.canceled() {
			o = Canceled
		}
		c.done(a.n, o)
	}
	switch {
	case c.decided:
		own = drop[T]{v: r.v, ok: r.produced && r.err == nil} // a late loser
	case c.hookPanic != nil:
		// Budget.Done panicked on this attempt: unlock ends the call
		// with that panic; the value is superseded by it.
		own = c.early(r.v, r.produced && r.err == nil)
	case !r.returned:
		c.panicked, c.goexit = r.panic, r.panic == nil
		c.winner, c.outcome = -1, Terminal
		d = c.dropKept()
		own = c.early(r.v, r.produced && r.err == nil) // the classifier failed on it
		c.finish(nil, context.Canceled)
	case r.o == Retryable:
		if a == c.last {
			c.nextAt = time.Time{} // a's own hedge is moot: the next starts now
		}
		d = c.dropKept()
		c.kept, c.keptVal, c.keptErr = a, r.v, r.err
		next = c.tryStart(c.now())
		if next == nil && c.inflight == 0 && c.hookPanic == nil {
			c.kept = nil
			c.settle(a, r.v, r.err, Retryable)
		}
	default:
		d = c.dropKept()
		c.settle(a, r.v, r.err, r.o)
	}
	c.unlock()
	if next != nil && d.ok {
		// Discard may be slow (draining a body): the next attempt must
		// not wait for it.
		go c.drop(d)
	} else {
		c.drop(d)
	}
	c.drop(own)
	return next
}

// settle ends the call with attempt a's result. Called with c.mu held.
func (c *call[T]) settle(a *attemptCtx, v T, err error, o Outcome) {
	c.val, c.err, c.winner, c.outcome = v, err, a.n, o
	c.finish(a, context.Canceled)
}

// end ends the call with a context error: err for the caller, cancel for
// the attempts' contexts. Called with c.mu held.
func (c *call[T]) end(err, cancel error) drop[T] {
	c.err, c.winner, c.outcome = err, -1, Canceled
	d := c.dropKept()
	c.finish(nil, cancel)
	return d
}

// dropKept cancels the kept retryable attempt and hands its value over
// for Discard. Called with c.mu held.
func (c *call[T]) dropKept() drop[T] {
	if c.kept == nil {
		return drop[T]{}
	}
	var zero T
	d := c.early(c.keptVal, c.keptErr == nil)
	c.kept.cancel(context.Canceled)
	c.kept, c.keptVal, c.keptErr = nil, zero, nil
	return d
}

// early makes an early drop of v, counted until it is through Discard.
// Called with c.mu held.
func (c *call[T]) early(v T, ok bool) drop[T] {
	d := drop[T]{v, ok && c.discard != nil, true}
	if d.ok {
		c.discarding++
	}
	return d
}

// finish marks the call decided, cancels every attempt but the winner,
// hands the winner its own deadline, releases the timer and wakes Do.
// Called with c.mu held.
func (c *call[T]) finish(winner *attemptCtx, cancel error) {
	c.decided = true
	c.nextAt = time.Time{}
	if c.learner != nil && c.started > 0 && !c.primaryDone {
		// The primary lost or was cut off: it would have run at least
		// this long.
		c.primaryRan, c.learn = c.now().Sub(c.begin), true
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.ctimer != nil {
		c.ctimer.Stop()
	}
	if c.started > 0 {
		for a := &c.primary; a != nil; a = a.next {
			if a != winner {
				a.cancel(cancel)
			}
		}
	}
	if winner != nil {
		winner.detach()
	}
	c.wake.Signal()
}

func (c *call[T]) drop(d drop[T]) {
	if !d.ok || c.discard == nil {
		return
	}
	if d.early {
		defer func() {
			c.mu.Lock()
			c.discarding--
			c.wake.Signal()
			c.mu.Unlock()
		}()
	}
	c.discard(d.v)
}

// next, allow and done call the policy's Delay and Budget. They run on
// the call's goroutines, where a panic would crash the process: it is
// caught, and re-raised in the caller's goroutine once c.mu is released.

func (c *call[T]) next(k int) (d time.Duration) {
	defer c.catch(k)
	return c.delay.Next(c.parent, k)
}

func (c *call[T]) allow(k int) (ok bool) {
	defer c.catch(k)
	return c.budget.Allow(c.parent, k)
}

func (c *call[T]) done(k int, o Outcome) {
	defer c.catch(k)
	c.budget.Done(c.parent, k, o)
}

// catch keeps the first hook panic. Results of a hook that panicked are
// their zero values: no hedge (a zero delay only when the call is still
// undecided, and the panic ends it), no budget.
func (c *call[T]) catch(k int) {
	if v := recover(); v != nil && c.hookPanic == nil {
		c.hookPanic = &PanicError{Attempt: k, Value: v, Stack: debug.Stack()}
	}
}
