package hedge

import (
	"context"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// call is the state of one Do. Every goroutine of the call enters through
// step: Do starts it for the primary, the hedge timer and the caller's
// context fire it, and an attempt that ends retryable claims the next
// attempt itself. Sharing that one func value between the go statement,
// the timer and context.AfterFunc is what keeps the fast path at three
// allocations: the call, stepFn, the timer.
//
// The policy's hooks (Delay.Next, Budget.Allow and Done) run outside mu:
// a goroutine decides under mu what to ask, asks, then takes mu again to
// act on the answer. A hook that panics or calls runtime.Goexit ends the
// call through guard, whatever goroutine it ran on.
type call[T any] struct {
	mu   sync.Mutex
	wake sync.Cond // Do waits on it for decided, and for early discards

	// Set by Do before the primary starts; read-only after.
	fn       func(context.Context) (T, error)
	parent   context.Context
	delay    Delay
	learner  Learner                // delay, if it learns; nil otherwise
	counter  counter                // delay, if it counts the attempts it causes; nil otherwise
	track    bool                   // a Learner or an Observer hears how long the primary ran
	classify func(T, error) Outcome // nil: classifyErr, without a generic func value's allocation
	budget   Budget
	discard  func(T)
	clock    clock.Clock // nil: real time
	max      int
	begin    time.Time // by the policy's clock; the primary starts then
	deadlines
	stepFn func()

	// Scheduling: the attempts, and when the next one is due.
	timer     *time.Timer
	ctimer    *clock.Timer
	primary   attemptCtx
	last      *attemptCtx
	started   int           // attempts claimed, the primary included
	inflight  int           // claimed attempts whose fn has not returned
	runFirst  bool          // the primary is claimed and waits for a goroutine
	nextAt    time.Time     // when the next timed hedge is due; zero: none
	lastDelay time.Duration // the delay that set nextAt
	claiming  bool          // a goroutine asks the hooks for attempt started, outside mu
	retryDue  int           // retryable results owed an attempt at once
	kick      bool          // a step is due now; start it after unlocking

	// The last retryable result, returned if nothing better comes.
	kept    *attemptCtx
	keptVal T
	keptErr error
	keptO   Outcome // Retryable or Failed

	// The decision.
	decided    bool
	abandoned  bool // the caller's context or the deadline ended the wait for early discards
	discarding int  // early drops not yet through Discard; Do waits for them
	val        T
	err        error
	winner     int
	won        *attemptCtx // the winner's context, detached; nil: none
	outcome    Outcome
	panicked   *PanicError
	goexit     bool
	refusals   int
	skips      int

	// What the learner and the observer hear: how long the primary ran,
	// and whether it answered (false: it was still running at the
	// decision). learn: the Learner hears it (an accepted answer, or a
	// lower bound).
	primaryRan  time.Duration
	primaryDone bool
	learn       bool
	elapsed     time.Duration // from the start to the decision, when tracked
	// seen is a clock reading taken under mu by the goroutine that holds
	// it, for the rest of its turn to use; zero: none. An observed call
	// reads the clock once per answer, not once per use.
	seen time.Time
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
	a, k, d := c.advance()
	c.unlock()
	c.drop(d)
	if k > 0 {
		a = c.claim(k)
	}
	for a != nil {
		a = c.run(a)
	}
}

// unlock releases c.mu and starts a step that is due at once.
func (c *call[T]) unlock() {
	kick := c.kick
	c.kick = false
	c.mu.Unlock()
	if kick {
		go c.stepFn()
	}
}

// advance decides on the caller's context and the deadline, and returns
// the primary to run, or the number of an extra attempt that is due and
// that this goroutine now claims (0: none). Called with c.mu held.
func (c *call[T]) advance() (*attemptCtx, int, drop[T]) {
	var d drop[T]
	if err := c.parent.Err(); err != nil && !c.decided {
		d = c.end(context.Cause(c.parent), err, nil)
	}
	if c.runFirst {
		// The primary is claimed: it runs, or, when the call ended
		// before it could, run finds it cancelled and returns its grant.
		c.runFirst = false
		return &c.primary, 0, d
	}
	if c.decided {
		if !d.ok {
			d = c.interruptWait()
		}
		return nil, 0, d
	}
	now := c.now()
	if !c.timeout.IsZero() && !now.Before(c.timeout) {
		return nil, 0, c.end(context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded)
	}
	k := c.due(now)
	if k == 0 {
		c.arm(now) // an early or stale timer: keep the real one
	}
	return nil, k, drop[T]{}
}

// due returns the number of the extra attempt that may start now, and
// marks it claimed by the caller; 0 if none may. A retryable result owes
// the next attempt at once: it has no delay to be too late for, so only
// the deadline itself stops it. A timed hedge starts only with half its
// delay left before the deadline. Called with c.mu held.
func (c *call[T]) due(now time.Time) int {
	if c.claiming || c.decided {
		return 0 // the claimer looks again when it is done
	}
	retry := c.retryDue > 0
	timed := !c.nextAt.IsZero() && !now.Before(c.nextAt)
	switch {
	case !retry && !timed:
		return 0
	case c.started >= c.max:
		c.retryDue, c.nextAt = 0, time.Time{}
		return 0
	case retry:
		c.retryDue--
		if !c.sched.IsZero() && !now.Before(c.sched) {
			c.skips++
			return 0
		}
	default:
		c.nextAt = time.Time{}
		if !worthStarting(now, c.sched, c.lastDelay) {
			c.skips++
			return 0
		}
	}
	c.claiming = true
	return c.started
}

// claim asks the Budget for attempt k and the Delay for the hedge after
// it, outside c.mu, then starts k if the budget granted it and the call is
// still undecided. It returns the attempt to run on this goroutine.
func (c *call[T]) claim(k int) *attemptCtx {
	granted := true
	if c.budget != nil && !c.guard(k, func() { granted = c.budget.Allow(c.parent, k) }) {
		return nil
	}
	d := time.Duration(-1)
	if granted && !c.startHooks(k, &d) {
		return nil
	}
	c.mu.Lock()
	c.claiming = false
	if c.decided {
		c.unlock()
		if granted {
			c.release(k)
		}
		return nil
	}
	now := c.now()
	var a *attemptCtx
	if granted {
		a = c.start(k, now, d)
	} else {
		c.refusals++
		c.retryDue = 0
		c.arm(now)
	}
	if c.retryDue > 0 || (!c.nextAt.IsZero() && !now.Before(c.nextAt)) {
		c.kick = true
	} else {
		c.runOut()
	}
	c.unlock()
	return a
}

// start starts attempt k at now and schedules the hedge after it, d later
// (negative: none). Called with c.mu held.
func (c *call[T]) start(k int, now time.Time, d time.Duration) *attemptCtx {
	a := &c.primary
	if k > 0 {
		a = &attemptCtx{}
		c.last.next = a
	}
	a.parent, a.n, a.deadline, a.at = c.parent, k, c.real, now.Sub(c.begin)
	c.last = a
	c.started++
	c.inflight++
	c.nextAt, c.lastDelay = time.Time{}, d
	if d >= 0 && c.started < c.max {
		c.nextAt = now.Add(d)
	}
	c.arm(now)
	return a
}

// startHooks runs the delay's hooks for granted attempt k (starting), and
// gives the grant back if they fail: when they panic, and when they call
// runtime.Goexit, which guard does not return from.
func (c *call[T]) startHooks(k int, d *time.Duration) (ok bool) {
	defer func() {
		if !ok {
			c.release(k)
		}
	}()
	return c.guard(k, func() { *d = c.starting(k) })
}

// arm makes step run at the next hedge or the Timeout, whichever is
// first. A hedge that falls due while another goroutine claims an attempt
// waits for that claim, which looks again when it is done. Called with
// c.mu held.
func (c *call[T]) arm(now time.Time) {
	next := c.nextAt
	if c.claiming {
		next = time.Time{}
	}
	at := earliest(next, c.timeout)
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

// stopTimer releases the call's timer. Called with c.mu held.
func (c *call[T]) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.ctimer != nil {
		c.ctimer.Stop()
	}
}
