// Package hedge cuts tail latency by hedging calls: when an idempotent
// call has not answered within a delay near its normal p95, Do starts a
// duplicate (ideally on another replica) and returns the first acceptable
// answer, cancelling the rest.
//
//	v, err := hedge.Do(ctx, policy, func(ctx context.Context) (Profile, error) {
//		return client.Profile(ctx, id) // hedge.Attempt(ctx) says which attempt this is
//	})
//
// All attempts of a call share one deadline: the earlier of ctx's and the
// policy's Timeout. A Policy says when to hedge (Delay), how many attempts
// at most (MaxAttempts), which results to accept (Classify), how much
// extra load is allowed across calls (Budget), what to do with the values
// Do does not return (Discard), and who hears about each call (Observer).
//
// Start with Auto, the production setup in one expression: it learns how
// early to hedge and how many times, bounds the extra load to a tenth of
// the calls, and stops hedging when hedges stop winning or primaries
// fail. Make it once per kind of call and share it:
//
//	var profiles = hedge.Auto[Profile]()
//
// For a plan per route, give an Adaptive a Key and put it in both the
// Delay and the Budget of a Policy. The zero Policy is a plain,
// stateless value: it hedges once, after DefaultDelay, with no bound.
// Policy.Validate reports a setting out of range at startup, naming the
// field, rather than at the first call.
//
// For HTTP, hedgehttp.Transport is an http.RoundTripper whose zero value
// does all of this per route; for gRPC, hedgegrpc (a module of its own)
// is an interceptor configured as a gRPC service config is. Both can
// share a Budget with a retry loop around them (see Tries). The other
// delays (Fixed, Percentile, Planner, Keyed) and budgets (RatioBudget,
// TokenBucket, InflightLimit, Breaker, WinRateBudget, AllOf) are for
// doing better than the default; every budget's zero value is ready too.
//
// Do does not wait for the attempts it cancels: fn must honour its
// context, or its goroutine runs on until fn returns. (Policy.Inline
// trades that for speed: the primary runs on the caller's goroutine, and
// Do waits for it.) Everything Do holds
// (goroutines, timers, budget permits, the link to ctx) is released once
// every fn it started has returned.
package hedge

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"
)

var defaultDelay Delay = fixed(DefaultDelay)

// Do calls fn and, while no acceptable answer has come, starts more
// attempts of it as p says, each on its own goroutine (but with
// p.Inline); it returns the first accepted or terminal result, or, when
// nothing is in flight and no more attempts may start, the last retryable
// result as fn returned it.
//
// Attempt 0 starts at once, on a goroutine of its own, which first asks
// p.Delay and p.Budget about it if they may run code of the user's: a
// slow hook delays fn, never Do's deadline. With p.Inline it runs on the
// caller's goroutine instead, hooks and the retries it starts at once
// included, and Do returns only once they have (see Policy.Inline).
// Attempt k+1 starts when attempt k has run for p.Delay's delay for k, or
// at once when an attempt ends retryable, as long as no result has been
// chosen, fewer than p.MaxAttempts have started, p.Budget grants it, and
// at least half of that delay is left before the deadline (less would
// mostly be cut off: it would add load, not cut latency).
//
// fn's context carries the call's deadline and Attempt. Do cancels the
// attempts whose results it does not return. It does not cancel the
// winner's context: a value tied to it (a response body, a stream) stays
// usable after Do returns, until the call's deadline, when the context
// ends with context.DeadlineExceeded (as http.Client.Timeout covers
// reading the body). When that deadline is ctx's own (no earlier
// Timeout), ctx ends the winner's context, and cancelling ctx after Do
// returns reaches it too; a Timeout's deadline is kept by a timer of the
// winner's own. Either exists only once something waits on the winner's
// context, and holds a small object, not the call. When Do returns it
// unlinks the call from ctx, so a long-lived ctx retains nothing of it.
//
// If ctx is done before the call starts, Do returns context.Cause(ctx)
// without calling fn. If ctx is done during the call (its deadline
// included), Do returns context.Cause(ctx) at once; if the Timeout passes
// first, it returns context.DeadlineExceeded at once; either way it
// cancels every attempt and waits neither for fn nor for Discard (but
// for the fn of those it runs on the caller's goroutine with p.Inline).
//
// If an attempt (fn or the classifier) panics, Do cancels the others and
// panics in the caller's goroutine with a *PanicError carrying the
// attempt's stack; so does a panic in p.Delay (Learn included) or
// p.Budget, which run on the call's goroutines. If an attempt calls
// runtime.Goexit, Do cancels the others and calls runtime.Goexit. Panics
// of attempts that end after the call was decided are dropped.
//
// Do returns ErrNilFunc for a nil fn and the error of p.Validate, which
// wraps ErrInvalidPolicy, for a Policy out of range, without calling fn.
func Do[T any](ctx context.Context, p Policy[T], fn func(context.Context) (T, error)) (T, error) {
	return do(ctx, p, fn, nil)
}

// do is Do; outcome, if not nil, receives how the returned result was
// classified.
func do[T any](ctx context.Context, p Policy[T], fn func(context.Context) (T, error), outcome *Outcome) (T, error) {
	var zero T
	if outcome != nil {
		*outcome = Terminal // bad input, unless the call runs
	}
	if ctx == nil {
		panic("hedge: nil Context")
	}
	t := takeTry(ctx)
	if t != nil { // the call is a try of a retry loop, which hears how it ended
		if outcome != nil {
			defer func() { *outcome = t.outcome }()
		}
		outcome = &t.outcome
		*outcome = Terminal
	}
	if fn == nil {
		return zero, ErrNilFunc
	}
	max, err := p.attempts()
	if _, self := p.Delay.(validator); err == nil && !(self && any(p.Budget) == any(p.Delay)) {
		// An Adaptive in both fields reports its settings once, as the
		// Delay, below.
		err = p.checkBudget()
	}
	if err != nil {
		return zero, err
	}
	if ctx.Err() != nil {
		if outcome != nil {
			*outcome = Canceled
		}
		return zero, context.Cause(ctx)
	}
	c := &call[T]{
		fn: fn, delay: p.Delay, classify: p.Classify, budget: p.Budget,
		discard: p.Discard, max: int8(max), nextAt: never,
	}
	if p.Clock != nil {
		c.clock = &policyClock{Clock: p.Clock}
	}
	c.primary.parent, c.primary.owner = ctx, c
	if t != nil {
		c.primary.n, c.looped = int32(t.n), true
		c.granted = sameBudget(c.budget, t.budget)
	}
	if c.delay == nil {
		c.delay = defaultDelay
	}
	c.stepFn = c.step
	c.wake.L = &c.mu
	if v, ok := c.delay.(validator); ok {
		var planned int
		if !c.guard(0, func() { planned, err = v.validate(ctx, p.MaxAttempts) }) {
			panic(c.panicked) // a Keyed's Key panicked; a Goexit does not return here
		}
		if err != nil {
			return zero, err
		}
		if p.MaxAttempts == 0 && planned > 0 {
			c.max = int8(planned)
		}
	}
	// A call that asks its hooks anything before it ends looks its key up
	// once; one that cannot hedge and has no budget leaves the key to its
	// Learner, which hears only of an accepted primary. A call with no
	// hook that keeps state per key skips the guard's deferred recover.
	if (c.max > 1 || c.budget != nil) && (binds(c.delay) || binds(c.budget)) {
		if !c.guard(0, func() { err = c.bind(ctx) }) {
			panic(c.panicked) // an Adaptive's Key panicked; a Goexit does not return here
		}
		if err != nil {
			return zero, err
		}
	}
	_, c.learns = c.delay.(learner)
	_, c.counts = c.delay.(counter)
	c.track = c.learns || p.Observer != nil
	c.sched, c.timeout = never, never
	if parentDeadline, hasDeadline := ctx.Deadline(); hasDeadline || p.Timeout > 0 {
		begin := c.now()
		c.begin = c.stamp(begin)
		var realNow time.Time
		if p.Clock != nil {
			realNow = time.Now()
		}
		dl := callDeadlines(begin, realNow, p.Timeout, parentDeadline, hasDeadline)
		c.sched, c.timeout = offset(dl.sched, begin), offset(dl.timeout, begin)
		c.primary.deadline = dl.real
	}
	asks := c.max > 1 || c.counts
	c.firstHooks = c.budget != nil && !c.granted || asks && !quickDelay(c.delay)
	switch {
	case c.sched != never:
	case c.track || c.clock != nil || c.firstHooks:
		c.begin = c.reading() // no deadline: no wall time to read
	default:
		c.begin = unread // see since
	}

	// The primary's hooks run on its goroutine (see claimFirst), so that
	// Do keeps the deadline while they do (but with Inline, where that
	// goroutine is the caller's); a delay of this package that
	// calls no code of the user's cannot block, and Do asks it here, so
	// that a hedge due at once is started with the primary. The timer
	// armed here may fire at once: from here on c is shared.
	if t != nil {
		t.counted = c.granted // from here on, the loop's grant is the call's
	}
	d := time.Duration(-1)
	if asks && !c.firstHooks {
		d = c.starting(0)
	}
	c.mu.Lock()
	c.runFirst.Store(true)
	if c.firstHooks {
		c.last, c.started, c.inflight = &c.primary, 1, 1
		c.claiming = true
		c.armFirst()
	} else {
		c.start(0, 0, d) // unlock starts the first hedge if it is due already
	}
	// A hedge due at once would race the caller to the primary's start,
	// and its start signal could tie the primary before fn is called: the
	// primary then starts on a goroutine of its own first, as without
	// Inline.
	inline := p.Inline && !c.kick
	c.unlock()
	if !inline {
		go c.stepFn()
	}
	// The call stays linked to ctx until Do returns, and not after: a
	// long-lived ctx must not accumulate finished calls.
	var unlink func() bool
	if ctx.Done() != nil {
		unlink = context.AfterFunc(ctx, c.stepFn)
	}
	if inline {
		return c.runHere(ctx, p.Observer, outcome, t, unlink)
	}
	return c.await(ctx, p.Observer, outcome, t, unlink, false)
}

// runHere runs the primary on the caller's goroutine (Policy.Inline),
// then waits for the call as await does. If fn calls runtime.Goexit
// there, the call ends as it does when fn does so on a goroutine of its
// own, and the Goexit goes on once await has reported it.
func (c *call[T]) runHere(ctx context.Context, obs Observer, outcome *Outcome, t *try, unlink func() bool) (T, error) {
	exiting := true
	defer func() {
		if exiting {
			c.await(ctx, obs, outcome, t, unlink, true)
		}
	}()
	c.steps(true)
	exiting = false
	return c.await(ctx, obs, outcome, t, unlink, false)
}

// await waits for the call's decision and for the discards before it,
// reports the call to the Learner and obs, and returns the decision, or
// re-raises its panic or runtime.Goexit; exiting says the caller's
// goroutine exits already.
func (c *call[T]) await(ctx context.Context, obs Observer, outcome *Outcome, t *try, unlink func() bool, exiting bool) (T, error) {
	var zero T
	c.mu.Lock()
	// A result or a panic waits for the values superseded before it to be
	// discarded, unless ctx or the deadline ends the wait; a context error
	// does not wait: it returns at once.
	for !c.decided || (c.discarding > 0 && !c.abandoned && c.outcome != Canceled) {
		c.wake.Wait()
	}
	c.stopTimer()
	v, err, pe, goexit := c.val, c.err, c.panicked, c.goexit
	if outcome != nil {
		*outcome = c.outcome
	}
	if t != nil {
		t.started = int(c.started)
	}
	var report Report
	if obs != nil {
		report = Report{
			Attempts: int(c.started), Winner: int(c.winner), Outcome: c.outcome,
			Primary: c.primaryRan, PrimaryAnswered: c.primaryDone,
			BudgetRefusals: int(c.refusals), DeadlineSkips: int(c.skips), Panicked: pe != nil || goexit,
		}
		for a := &c.primary; a != nil; a = a.next {
			report.Started[c.local(a)] = a.at
			report.Retry[c.local(a)] = c.retried&(1<<c.local(a)) != 0
			if a.tied {
				report.Tied++
			}
		}
	}
	c.val = zero // the call may outlive Do in a loser; do not pin the result
	learn, ran, complete, elapsed, began := c.learn, c.primaryRan, c.primaryDone, c.elapsed, c.began
	c.mu.Unlock()
	if unlink != nil {
		unlink()
	}
	// The Learner and the Observer run before Do returns v: if either
	// panics or calls runtime.Goexit, v is not returned, so it goes to
	// Discard. So does v when the caller's goroutine exits already (an
	// attempt on it, or its hook, called runtime.Goexit after the
	// decision): no one gets it.
	unreturned := (learn || obs != nil || exiting) && err == nil && pe == nil && !goexit && c.discard != nil
	if unreturned {
		defer func() {
			if unreturned {
				c.discard(v)
			}
		}()
	}
	if learn {
		if lp := c.learnSafely(ctx, ran, complete); pe == nil {
			pe = lp
		}
		c.learnWait(began, ran, complete)
	}
	if obs != nil {
		report.Elapsed = elapsed
		obs.Observe(ctx, report)
	}
	if pe != nil {
		panic(pe)
	}
	if goexit && !exiting {
		runtime.Goexit()
	}
	if !exiting {
		unreturned = false
	}
	return v, err
}

// PanicError is the value Do panics with when an attempt panicked: the
// attempt (its number as Attempt gives it), the value it panicked with
// and its goroutine's stack. Do makes a new one for each panic; it is not
// shared.
type PanicError struct {
	Attempt int
	Value   any
	Stack   []byte
}

// Error returns the panic value and the attempt's stack.
func (p *PanicError) Error() string {
	return fmt.Sprintf("hedge: attempt %d panicked: %v\n\n%s", p.Attempt, p.Value, p.Stack)
}

// Unwrap returns the panic value if it is an error.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// learnSafely calls the learner, catching its panic so that Do re-raises
// it as a *PanicError after reporting the call.
func (c *call[T]) learnSafely(ctx context.Context, ran time.Duration, complete bool) (pe *PanicError) {
	defer func() {
		if v := recover(); v != nil {
			pe = &PanicError{Attempt: 0, Value: v, Stack: debug.Stack()}
		}
	}()
	c.delay.(learner).Learn(ctx, ran, complete)
	return nil
}
