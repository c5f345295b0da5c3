package hedge

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// call is the state of one Do. Every goroutine of the call enters through
// step: Do starts it for the primary (or, with Policy.Inline, runs steps
// itself), the hedge timer and the caller's context fire it, and an
// attempt that ends retryable claims the next attempt itself. Sharing
// that one func value between the go statement, the timer and
// context.AfterFunc is what keeps the fast path at three allocations:
// the call, stepFn, the timer.
//
// The policy's hooks (Delay.Next, Budget.Allow and Done) run outside mu:
// a goroutine decides under mu what to ask, asks, then takes mu again to
// act on the answer. A hook that panics or calls runtime.Goexit ends the
// call through guard, whatever goroutine it ran on.
type call[T any] struct {
	mu sync.Mutex
	// wake is how Do waits, for the decision and then for early discards.
	// A sync.Cond, not a smaller WaitGroup or Mutex: a synctest bubble
	// counts a goroutine waiting on a Cond as durably blocked, which it
	// does not for a Mutex, and a Cond may be signalled from a bubble that
	// Do is not in (a caller's context cancelled there), which a
	// WaitGroup that Do added to may not.
	wake sync.Cond

	// Set by Do before the primary starts; read-only after. The caller's
	// context is primary.parent.
	fn       func(context.Context) (T, error)
	delay    Delay
	classify func(T, error) Outcome // nil: classifyErr, without a generic func value's allocation
	budget   Budget
	discard  func(T)
	clock    *policyClock  // nil: real time
	begin    time.Duration // the primary starts then: see stamp; unread: see since
	stepFn   func()
	// The call's times are offsets from begin by the policy's clock;
	// never: none.
	sched   time.Duration // the deadline: the skip rule reads it
	timeout time.Duration // the Timeout's deadline, when the call enforces it (see deadlines)
	max     int8          // at most MaxAttemptsLimit, as every count of attempts below
	learns  bool          // delay is a Learner
	counts  bool          // delay counts the attempts it causes (counter)
	track   bool          // a Learner or an Observer hears how long the primary ran
	learn   bool          // the Learner hears how long the primary ran (see primaryRan)
	// The decision's counts, beside outcome below in meaning, here in the
	// bytes that the flags above leave before a pointer: the call of a
	// one-word result then fits a smaller size class (callsize_test.go).
	winner   int8 // the returned attempt, within the call (see won); -1: none
	refusals int8
	skips    int8

	// Scheduling: the attempts, and when the next one is due.
	timer     *time.Timer // on real time; on a policy's clock, clock.timer
	primary   attemptCtx
	last      *attemptCtx
	nextAt    time.Duration // when the next timed hedge is due; never: none
	lastDelay time.Duration // the delay that set nextAt
	started   int8          // attempts claimed, the primary included
	inflight  int8          // claimed attempts whose fn has not returned, but for tied ones (see Started)
	retryDue  int8          // retryable results owed an attempt at once; at most max
	claiming  bool          // a goroutine asks the hooks for an attempt, outside mu
	retrying  bool          // the attempt being claimed is owed to a retryable result
	// discarding counts early drops not yet through Discard, for which Do
	// waits: a drop or a held report for each of at most MaxAttemptsLimit
	// attempts.
	discarding int8
	retried    uint16 // bit k: attempt k started for a retryable result, not at its delay
	kick       bool   // a step is due now; start it after unlocking
	letGo      bool   // the call was just decided: let Do go after unlocking
	hasSeen    bool   // seen holds this turn's clock reading
	// Set by Do before any other goroutine exists, read-only after.
	firstHooks bool // the first step asks the primary's hooks before it runs fn
	looped     bool // the call is a try of a retry loop (Tries), which retries
	granted    bool // the loop's budget is the call's and granted the primary already
	// runFirst says the primary is claimed and waits for a goroutine: the
	// first step takes it without c.mu, which the fast path then takes
	// only to record the answer.
	runFirst atomic.Bool

	decided     bool
	abandoned   bool // the caller's context or the deadline ended the wait for early discards
	goexit      bool
	primaryDone bool // the primary answered before the decision

	// The last retryable result, returned if nothing better comes; made on
	// the first one, which a call that answers at once never has.
	kept *kept[T]

	// The decision.
	outcome  Outcome
	val      T
	err      error
	panicked *PanicError

	// What the learner and the observer hear: how long the primary ran,
	// or a lower bound if it had not answered (primaryDone) by the
	// decision, which the Learner hears (learn) if it answered accepted or
	// not at all.
	primaryRan time.Duration
	began      time.Duration // when the primary reported its start (see Started); 0: it did not
	elapsed    time.Duration // from the start to the decision, when tracked
	// seen is a clock reading taken under mu by the goroutine that holds
	// it, for the rest of its turn to use, if hasSeen. An observed call
	// reads the clock once per answer, not once per use.
	seen time.Duration
}

// policyClock is a policy's own clock, and the call's timer on it: made
// only for a call on a policy's clock, so that a call on real time does
// not carry their words.
type policyClock struct {
	clock.Clock
	timer *clock.Timer
}

// kept is the last retryable (or failed) result of a call: its attempt,
// what fn returned, and how it was classified. a is nil when none is kept.
type kept[T any] struct {
	a   *attemptCtx
	v   T
	err error
	o   Outcome
}

// result is what one attempt's function did, and what record leaves to
// report.
type result[T any] struct {
	v        T
	err      error
	o        Outcome
	produced bool        // fn returned normally
	returned bool        // fn and the classifier returned normally
	recorded bool        // record took it into the call
	later    bool        // record left the budget's report to report: told, hold and d
	hold     bool        // Do waits for the report (see tell)
	told     Outcome     // what the budget hears
	panic    *PanicError // fn or the classifier panicked
	d        drop[T]     // a kept result's value, for Discard after the report
}

// drop is a value bound for Discard, handed over outside the lock. An
// early drop was superseded before the decision: Do waits for its Discard
// when it returns a result, so that its return orders after it.
type drop[T any] struct {
	v     T
	ok    bool
	early bool
}

// epoch is what the real clock's readings are offsets from:
// time.Since(epoch) reads the monotonic clock alone, where time.Now reads
// the wall clock as well, and a call without a deadline needs no wall
// time.
var epoch = time.Now()

func (c *call[T]) now() time.Time {
	if c.clock == nil {
		return time.Now()
	}
	return c.clock.Now()
}

// stamp returns a reading t of the policy's clock as an offset the
// call's times can count from: from epoch for the real clock, from the
// Unix epoch for a policy's clock.
func (c *call[T]) stamp(t time.Time) time.Duration {
	if c.clock == nil {
		return t.Sub(epoch)
	}
	return time.Duration(t.UnixNano())
}

// reading returns the policy's clock now, as stamp does, in one read of
// the monotonic clock for the real one.
func (c *call[T]) reading() time.Duration {
	if c.clock == nil {
		return time.Since(epoch)
	}
	return time.Duration(c.clock.Now().UnixNano())
}

// unread is the start of a call that reads it only when it first needs
// it (see since).
const unread = time.Duration(math.MinInt64)

// since returns the time since the call's start, by the policy's clock.
// Called with c.mu held.
//
// A call on real time without a deadline, an Observer, a Learner or hooks
// of the user's to ask first measures nothing from its start but its own
// hedges' schedule, and a primary that answers before its hedge is due,
// as most do, needs no clock at all: Do leaves the start unread. The
// first reading, when the first hedge's timer fires, an attempt fails
// first or the primary reports its start (Started), takes the start as
// the first hedge's delay before it. When the timer fires, that is the
// start but for the timer's own lateness, which delays the hedges after
// it alike either way, as they are scheduled from the reading their
// predecessor started at. When an attempt failed early, it is earlier
// than the real start, which changes nothing: the failure made the
// attempt's own hedge moot, and the attempts after it are scheduled from
// the reading. When the primary reported its start early, it is earlier
// too: the hedge then falls due at the timer, as it would have, and the
// primary's wait (began) is the delay, not its wait, which nothing reads,
// as only a Learner hears it. A delay of never armed no timer: it moves
// the start back by nothing, or the first reading would be never itself,
// which every deadline's test takes for one passed.
func (c *call[T]) since() time.Duration {
	now := c.reading()
	if c.begin == unread {
		back := max(c.lastDelay, 0)
		if back == never {
			back = 0
		}
		c.begin = now - back
	}
	return now - c.begin
}

// parent returns the caller's context.
func (c *call[T]) parent() context.Context { return c.primary.parent }

// step starts whatever is due and runs it on this goroutine.
func (c *call[T]) step() { c.steps(false) }

// steps is step; here says this goroutine is the caller's (see
// Policy.Inline).
func (c *call[T]) steps(here bool) {
	var a *attemptCtx
	if c.runFirst.Load() && c.runFirst.CompareAndSwap(true, false) {
		// The primary runs, or, when the call ended before it could, run
		// finds it cancelled and returns its grant. A caller that gave up
		// before this step ends the call first, as every step does.
		a = &c.primary
		if c.firstHooks {
			a = c.claimFirst()
		} else if c.parent().Err() != nil {
			c.mu.Lock()
			_, _, d := c.advance()
			c.unlock()
			c.dropFrom(here, d)
		}
	} else {
		c.mu.Lock()
		k, now, d := c.advance()
		c.unlock()
		c.dropFrom(here, d)
		if k > 0 {
			a = c.claim(k, now)
		}
	}
	for a != nil {
		a = c.run(a, here)
	}
}

// unlock releases c.mu, starts a step that is due at once, and wakes Do
// once the call is decided: after releasing c.mu, which Do takes next.
func (c *call[T]) unlock() {
	kick, letGo := c.kick, c.letGo
	c.kick, c.letGo = false, false
	c.mu.Unlock()
	if letGo {
		c.wake.Signal() // Do waits in Cond.Wait, queued before it let go of c.mu
	}
	if kick {
		go c.stepFn()
	}
}

// wakeDo lets Do look again at what it waits for after the decision.
// Called with c.mu held.
func (c *call[T]) wakeDo() { c.wake.Signal() }

// advance decides on the caller's context and the deadline, and returns
// the number of an extra attempt that is due and that this goroutine now
// claims (0: none), with the clock reading it claimed it at. Called with
// c.mu held.
func (c *call[T]) advance() (int, time.Duration, drop[T]) {
	var d drop[T]
	if err := c.parent().Err(); err != nil && !c.decided {
		d = c.end(context.Cause(c.parent()), err, nil)
	}
	if c.decided {
		if !d.ok {
			d = c.interruptWait()
		}
		return 0, -1, d
	}
	now := c.since()
	if now >= c.timeout {
		return 0, -1, c.end(context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded)
	}
	k := c.due(now)
	if k == 0 {
		c.arm(now) // an early or stale timer: keep the real one
		// A retry owed while a claim was under way may find that nothing
		// more may start: the kept result is then the answer.
		c.runOut()
	}
	return k, now, drop[T]{}
}

// due returns the number of the extra attempt that may start now, and
// marks it claimed by the caller; 0 if none may. A retryable result owes
// the next attempt at once: it has no delay to be too late for, so only
// the deadline itself stops it. A timed hedge starts only with half its
// delay left before the deadline, and not while the call's Adaptive holds
// it back (see holds). Called with c.mu held.
func (c *call[T]) due(now time.Duration) int {
	if c.claiming || c.decided {
		return 0 // the claimer looks again when it is done
	}
	retry := c.retryDue > 0
	timed := now >= c.nextAt
	switch {
	case !retry && !timed:
		return 0
	case c.started >= c.max:
		c.retryDue, c.nextAt = 0, never
		return 0
	case retry:
		c.retryDue--
		c.retrying = true
		if now >= c.sched {
			c.skips++
			return 0
		}
	default:
		c.nextAt = never
		c.retrying = false
		if !worthStarting(now, c.sched, c.lastDelay) {
			c.skips++
			return 0
		}
		if c.holds() {
			c.refusals++
			return 0
		}
	}
	c.claiming = true
	// The hooks the claimer asks may be slow: the Timeout must not wait
	// for them. arm, while claiming, arms for the Timeout alone.
	c.arm(now)
	return int(c.started)
}

// claim asks the Budget for attempt k and the Delay for the hedge after
// it, outside c.mu, then starts k if the budget granted it and the call is
// still undecided. It returns the attempt to run on this goroutine. seen
// is the clock reading of the turn that claimed k, or -1: with no Budget
// and a Delay of this package, which run no code of the user's, the
// attempt starts at it, without a second read.
func (c *call[T]) claim(k int, seen time.Duration) *attemptCtx {
	granted := true
	if c.budget != nil && !c.guard(k, func() { granted = c.budget.Allow(c.parent(), c.bn(k)) }) {
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
	now := seen
	if now < 0 || c.budget != nil || !quickDelay(c.delay) {
		now = c.since()
	}
	var a *attemptCtx
	if granted {
		a = c.start(k, now, d)
	} else {
		c.refusals++
		if c.retrying {
			// A refused retry refuses those owed with it. A refused
			// timed hedge says nothing of a retry owed meanwhile, by a
			// result that came while the Budget was asked: it is asked
			// for next (rule 2).
			c.retryDue = 0
		}
		c.arm(now)
	}
	if c.retryDue > 0 || now >= c.nextAt {
		c.kick = true
	} else {
		c.runOut()
	}
	c.unlock()
	return a
}

// claimFirst asks the primary's hooks, outside c.mu, on the primary's
// goroutine: the Delay for the first hedge and the Budget, which counts
// the call. Do waits meanwhile with the timer armed for the Timeout alone
// (see claiming), so slow hooks do not hold it past the deadline, unless
// this goroutine is the caller's (Policy.Inline). It returns the primary
// to run, or nil if the call ended first.
func (c *call[T]) claimFirst() (a *attemptCtx) {
	if c.granted {
		defer func() {
			if a == nil { // the hooks failed: the primary never runs
				c.release(0)
			}
		}()
	}
	d := time.Duration(-1)
	if !c.guard(0, func() {
		if c.max > 1 || c.counts {
			d = c.starting(0)
		}
		if c.budget != nil && !c.granted {
			c.budget.Allow(c.parent(), 0) // the primary always runs; a ratio budget counts the call
		}
	}) {
		return nil // guard ended the call
	}
	// The caller or the deadline may have ended the call meanwhile; if
	// their step is still to come, the call ends here. Either way run
	// then finds the primary cancelled, and returns its grant. Nothing is
	// kept yet, so ending the call drops nothing.
	c.mu.Lock()
	c.claiming = false
	now := c.since()
	switch err := c.parent().Err(); {
	case c.decided:
	case err != nil:
		c.end(context.Cause(c.parent()), err, nil)
	case now >= c.timeout:
		c.end(context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded)
	default:
		c.schedule(now, d)
	}
	c.unlock()
	return &c.primary
}

// start starts attempt k at now and schedules the hedge after it, d later
// (negative: none). Called with c.mu held.
func (c *call[T]) start(k int, now, d time.Duration) *attemptCtx {
	a := &c.primary
	if k > 0 {
		a = &attemptCtx{parent: c.primary.parent, deadline: c.primary.deadline, owner: c}
		if c.retrying {
			c.retried |= 1 << k
		}
		c.last.next = a
	}
	a.n, a.at = c.primary.n+int32(k), now
	c.last = a
	c.started++
	c.inflight++
	c.schedule(now, d)
	return a
}

// schedule makes the hedge after the last attempt due d after now
// (negative: none), and arms for it. Called with c.mu held.
func (c *call[T]) schedule(now, d time.Duration) {
	c.nextAt, c.lastDelay = never, d
	if d >= 0 && c.started < c.max {
		c.nextAt = now + d
		if c.nextAt < now {
			c.nextAt = never // a delay past the end of time
		}
	}
	c.arm(now)
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
func (c *call[T]) arm(now time.Duration) {
	next := c.nextAt
	if c.claiming {
		next = never
	}
	c.armAt(now, min(next, c.timeout))
}

// hookCheck is when a call with a Timeout first looks in on the primary's
// hooks (see armFirst).
const hookCheck = time.Millisecond

// armFirst arms for the Timeout while the primary's hooks run. The timer
// fires first at hookCheck, which the hooks have almost always answered
// by, and which is earlier than almost any hedge: a runtime timer moved to
// an earlier time keeps its old place in the runtime's heap, and once
// stopped it would hold the call there until the Timeout's time, where
// moved later, it leaves the heap from its top. If the hooks still run at
// hookCheck, the step then arms for the Timeout itself. Called with c.mu
// held.
func (c *call[T]) armFirst() {
	at := c.timeout
	if c.clock == nil && c.timeout != never && c.timeout > hookCheck {
		at = hookCheck
	}
	c.armAt(0, at)
}

// armAt makes step run at offset at (never: not at all). Called with c.mu
// held.
func (c *call[T]) armAt(now, at time.Duration) {
	if at == never {
		return
	}
	d := until(now, at)
	switch {
	case d <= 0:
		c.kick = true // started by whoever unlocks, so it does not wait on c.mu
	case c.clock != nil && c.clock.timer != nil:
		c.clock.timer.Reset(d)
	case c.clock != nil:
		c.clock.timer = c.clock.AfterFunc(d, c.stepFn)
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
	if c.clock != nil && c.clock.timer != nil {
		c.clock.timer.Stop()
	}
}
