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
	if c.decided {
		return nil, 0, c.interruptWait()
	}
	if err := c.parent.Err(); err != nil {
		return nil, 0, c.end(context.Cause(c.parent), err, nil)
	}
	if c.runFirst {
		c.runFirst = false
		return &c.primary, 0, drop[T]{}
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
	if granted && !c.guard(k, func() { d = c.starting(k) }) {
		c.release(k)
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
	var kept drop[T]
	if c.retryDue > 0 || (!c.nextAt.IsZero() && !now.Before(c.nextAt)) {
		c.kick = true
	} else {
		kept = c.runOut()
	}
	c.unlock()
	c.drop(kept)
	return a
}

// starting tells the delay that attempt k starts, if it counts attempts, and
// returns its delay for attempt k+1 (-1 when none may follow).
func (c *call[T]) starting(k int) time.Duration {
	if c.counter != nil {
		c.counter.began(c.parent, k)
	}
	if k+1 < c.max {
		return c.delay.Next(c.parent, k)
	}
	return -1
}

// release returns the grant of attempt k, whose fn never ran because the
// call ended first: Release if the budget takes grants back, Done(k,
// Canceled) otherwise (and always for the primary, which Allow(0) does
// not charge for).
func (c *call[T]) release(k int) {
	if c.budget == nil {
		return
	}
	if r, ok := c.budget.(Releaser); ok && k > 0 {
		c.guard(k, func() { r.Release(c.parent, k) })
		return
	}
	c.guard(k, func() { c.budget.Done(c.parent, k, Canceled) })
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

// stopTimer releases the call's timer. Called with c.mu held.
func (c *call[T]) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.ctimer != nil {
		c.ctimer.Stop()
	}
}

// run runs attempt a on this goroutine and returns the attempt to run next
// on it, if its result made one start at once.
func (c *call[T]) run(a *attemptCtx) (next *attemptCtx) {
	if a.canceled() {
		// Claimed just before the call was decided: do not call fn.
		c.mu.Lock()
		c.inflight--
		c.unlock()
		c.release(a.n)
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

// record tells the budget how attempt a ended, then takes its result into
// the call. The budget hears first, so that its answer to the next
// attempt already counts this one, and so that a budget's state is
// settled for the winner when Do returns.
func (c *call[T]) record(a *attemptCtx, r *result[T]) (next *attemptCtx) {
	if c.budget == nil {
		return c.take(a, r)
	}
	o := r.o
	if !r.returned {
		o = Terminal
	}
	if a.canceled() {
		o = Canceled
	}
	// Deferred so that the result is taken even when Done calls
	// runtime.Goexit; guard has then ended the call, and take finds it
	// decided.
	defer func() { next = c.take(a, r) }()
	c.guard(a.n, func() { c.budget.Done(c.parent, a.n, o) })
	return nil
}

// take records attempt a's result and returns the attempt it made start
// at once, if any.
func (c *call[T]) take(a *attemptCtx, r *result[T]) *attemptCtx {
	var d, own drop[T]
	k := 0
	c.mu.Lock()
	c.inflight--
	if c.track && a == &c.primary && !c.decided {
		c.primaryDone = true
		c.seen = c.now()
		c.primaryRan = c.seen.Sub(c.begin)
		// Only an accepted answer says how long a good one takes.
		c.learn = c.learner != nil && r.returned && r.o == Accept
	}
	var cut bool
	switch {
	case c.decided:
		own = drop[T]{v: r.v, ok: r.produced && r.err == nil} // a late loser
	case r.returned && r.o != Accept:
		// An attempt that fails because the caller gave up or the deadline
		// passed (its fn returned ctx.Err()) may get here before the
		// caller's context or the timer does: the call still ends with
		// their error and cause, not with the attempt's.
		if d, cut = c.cutOff(); cut {
			own = drop[T]{v: r.v, ok: r.produced && r.err == nil}
			break
		}
		fallthrough
	default:
		k, d, own = c.answer(a, r)
	}
	c.seen = time.Time{}
	c.unlock()
	if k > 0 && d.ok {
		// Discard may be slow (draining a body): the next attempt must
		// not wait for it.
		go c.drop(d)
	} else {
		c.drop(d)
	}
	c.drop(own)
	if k > 0 {
		return c.claim(k)
	}
	return nil
}

// clockNow returns the clock reading of this turn under c.mu, or reads
// the clock. Called with c.mu held.
func (c *call[T]) clockNow() time.Time {
	if !c.seen.IsZero() {
		return c.seen
	}
	return c.now()
}

// cutOff ends the call if the caller's context is done or the Timeout
// has passed. Called with c.mu held.
func (c *call[T]) cutOff() (drop[T], bool) {
	if err := c.parent.Err(); err != nil {
		return c.end(context.Cause(c.parent), err, nil), true
	}
	if !c.timeout.IsZero() && !c.now().Before(c.timeout) {
		return c.end(context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded), true
	}
	return drop[T]{}, false
}

// answer takes attempt a's result into an undecided call, and returns the
// number of the attempt it makes start at once (0: none) and the values
// to discard. Called with c.mu held.
func (c *call[T]) answer(a *attemptCtx, r *result[T]) (k int, d, own drop[T]) {
	switch {
	case !r.returned:
		c.panicked, c.goexit = r.panic, r.panic == nil
		c.winner, c.outcome = -1, Terminal
		d = c.dropKept()
		own = c.early(r.v, r.produced && r.err == nil) // the classifier failed on it
		c.finish(nil, context.Canceled, context.Canceled)
	case r.o == Retryable:
		if a == c.last {
			c.nextAt = time.Time{} // a's own hedge is moot: the next starts now
		}
		d = c.dropKept()
		c.kept, c.keptVal, c.keptErr = a, r.v, r.err
		c.retryDue++
		if k = c.due(c.clockNow()); k == 0 {
			own = c.runOut()
		}
	default:
		d = c.dropKept()
		c.settle(a, r.v, r.err, r.o)
	}
	return k, d, own
}

// runOut ends the call with the kept retryable result when nothing is in
// flight and nothing more will start. Called with c.mu held.
func (c *call[T]) runOut() drop[T] {
	if c.decided || c.kept == nil || c.inflight > 0 || c.claiming || c.retryDue > 0 {
		return drop[T]{}
	}
	if c.started < c.max && !c.nextAt.IsZero() {
		return drop[T]{} // a timed hedge is still to come
	}
	a := c.kept
	c.kept = nil
	var zero T
	v, err := c.keptVal, c.keptErr
	c.keptVal, c.keptErr = zero, nil
	c.settle(a, v, err, Retryable)
	return drop[T]{}
}

// settle ends the call with attempt a's result. Called with c.mu held.
func (c *call[T]) settle(a *attemptCtx, v T, err error, o Outcome) {
	c.val, c.err, c.winner, c.outcome = v, err, a.n, o
	c.finish(a, context.Canceled, ErrSuperseded)
}

// end ends the call with a context error: err for the caller, cancel
// and cause for the attempts' contexts (a nil cause: ctx holds it).
// Called with c.mu held.
func (c *call[T]) end(err, cancel, cause error) drop[T] {
	c.err, c.winner, c.outcome = err, -1, Canceled
	d := c.dropKept()
	c.finish(nil, cancel, cause)
	return d
}

// interruptWait ends Do's wait for early discards when the caller's
// context or the deadline ends first: Do then returns the context's
// error at once, and the result it had chosen goes to Discard instead.
// Called with c.mu held, on a decided call.
func (c *call[T]) interruptWait() drop[T] {
	if c.discarding == 0 || c.abandoned || c.outcome == Canceled {
		return drop[T]{}
	}
	err, cancel, cause := context.Cause(c.parent), c.parent.Err(), error(nil)
	if cancel == nil {
		now := c.now()
		if c.timeout.IsZero() || now.Before(c.timeout) {
			c.arm(now)
			return drop[T]{}
		}
		err, cancel, cause = context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded
	}
	c.abandoned = true
	c.wake.Signal()
	if c.panicked != nil || c.goexit {
		return drop[T]{} // a panic still reaches the caller, without waiting
	}
	var zero T
	d := drop[T]{v: c.val, ok: c.err == nil && c.discard != nil}
	c.val, c.err, c.winner, c.outcome = zero, err, -1, Canceled
	if c.won != nil {
		c.won.cancel(cancel, cause)
		c.won = nil
	}
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
	c.kept.cancel(context.Canceled, ErrSuperseded)
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
// hands the winner its own deadline and wakes Do. The timer stays armed
// while Do waits for early discards, so that the Timeout still ends the
// wait; Do stops it. Called with c.mu held.
func (c *call[T]) finish(winner *attemptCtx, cancel, cause error) {
	c.decided = true
	c.nextAt = time.Time{}
	c.retryDue = 0
	if c.track && c.started > 0 && !c.primaryDone {
		// The primary lost or was cut off: it would have run at least
		// this long.
		c.primaryRan, c.learn = c.clockNow().Sub(c.begin), c.learner != nil
	}
	if c.track {
		c.elapsed = c.clockNow().Sub(c.begin)
	}
	if c.started > 0 {
		for a := &c.primary; a != nil; a = a.next {
			if a != winner {
				a.cancel(cancel, cause)
			}
		}
	}
	if winner != nil {
		// Without a Timeout of its own, the winner ends with the
		// caller's context, which has a deadline: nothing more is needed.
		winner.detach(c.timeout.IsZero() && c.clock == nil && !c.real.IsZero())
		c.won = winner
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

// guard runs one of the policy's hooks for attempt k (Delay.Next, or the
// Budget's Allow or Done) outside c.mu. It reports whether hook returned.
// If hook panics, the call ends with that panic, which Do re-raises in the
// caller; if it calls runtime.Goexit, the call ends and Do calls
// runtime.Goexit in the caller, and guard does not return: the goroutine
// exits, so its caller defers what must still happen. Either way the
// other attempts are cancelled. A hook that fails after the decision
// changes nothing.
func (c *call[T]) guard(k int, hook func()) (ok bool) {
	defer func() {
		if ok {
			return
		}
		v := recover()
		var pe *PanicError
		if v != nil {
			pe = &PanicError{Attempt: k, Value: v, Stack: debug.Stack()}
		}
		var d drop[T]
		c.mu.Lock()
		if !c.decided {
			c.panicked, c.goexit = pe, pe == nil
			c.winner, c.outcome = -1, Terminal
			d = c.dropKept()
			c.finish(nil, context.Canceled, context.Canceled)
		}
		c.unlock()
		c.drop(d)
	}()
	hook()
	return true
}
