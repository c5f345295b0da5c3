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
// The zero Policy hedges once, after DefaultDelay.
//
// Do does not wait for the attempts it cancels: fn must honour its
// context, or its goroutine runs on until fn returns. Everything Do holds
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
// attempts of it as p says, each on its own goroutine; it returns the
// first accepted or terminal result, or, when nothing is in flight and no
// more attempts may start, the last retryable result as fn returned it.
//
// Attempt 0 starts at once. Attempt k+1 starts when attempt k has run for
// p.Delay's delay for k, or at once when an attempt ends retryable, as long
// as no result has been chosen, fewer than p.MaxAttempts have started,
// p.Budget grants it, and at least half of that delay is left before the
// deadline (less would mostly be cut off: it would add load, not cut
// latency).
//
// fn's context carries the call's deadline and Attempt. Do cancels the
// attempts whose results it does not return. It does not cancel the
// winner's context: a value tied to it (a response body, a stream) stays
// usable after Do returns, until the call's deadline, when the context
// ends with context.DeadlineExceeded (as http.Client.Timeout covers
// reading the body). When Do returns it unlinks the call from ctx, so a
// long-lived ctx retains nothing of it; from then on, cancelling ctx no
// longer reaches the winner's context. The winner's context holds a timer
// for its deadline only once something waits on it (Done, or a context
// derived from it).
//
// If ctx is done before the call starts, Do returns context.Cause(ctx)
// without calling fn. If ctx is done during the call (its deadline
// included), Do returns context.Cause(ctx) at once; if the Timeout passes
// first, it returns context.DeadlineExceeded at once; either way it
// cancels every attempt and waits neither for fn nor for Discard.
//
// If an attempt (fn or the classifier) panics, Do cancels the others and
// panics in the caller's goroutine with a *PanicError carrying the
// attempt's stack; so does a panic in p.Delay (Learn included) or
// p.Budget, which run on the call's goroutines. If an attempt calls
// runtime.Goexit, Do cancels the others and calls runtime.Goexit. Panics
// of attempts that end after the call was decided are dropped.
//
// Do returns ErrNilFunc for a nil fn and an error wrapping
// ErrInvalidPolicy for a Policy out of range, without calling fn.
func Do[T any](ctx context.Context, p Policy[T], fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if fn == nil {
		return zero, ErrNilFunc
	}
	max, err := p.attempts()
	if err != nil {
		return zero, err
	}
	if ctx.Err() != nil {
		return zero, context.Cause(ctx)
	}
	c := &call[T]{
		fn: fn, parent: ctx, delay: p.Delay, classify: p.Classify,
		budget: p.Budget, discard: p.Discard, clock: p.Clock, max: max,
	}
	if c.delay == nil {
		c.delay = defaultDelay
	}
	if v, ok := c.delay.(validator); ok {
		if err := v.validate(); err != nil {
			return zero, err
		}
	}
	c.learner, _ = c.delay.(Learner)
	c.wake.L = &c.mu
	c.stepFn = c.step
	c.begin = c.now()
	var realNow time.Time
	if p.Clock != nil {
		realNow = time.Now()
	}
	parentDeadline, hasDeadline := ctx.Deadline()
	c.deadlines = callDeadlines(c.begin, realNow, p.Timeout, parentDeadline, hasDeadline)

	go c.stepFn()
	// The call stays linked to ctx until it is decided, and not after: a
	// long-lived ctx must not accumulate finished calls.
	var unlink func() bool
	if ctx.Done() != nil {
		unlink = context.AfterFunc(ctx, c.stepFn)
	}
	c.mu.Lock()
	// A result or a panic waits for the values superseded before it to be
	// discarded; a context error does not wait: it returns at once.
	for !c.decided || (c.discarding > 0 && c.outcome != Canceled) {
		c.wake.Wait()
	}
	v, err, pe, goexit := c.val, c.err, c.panicked, c.goexit
	var report Report
	if p.Observer != nil {
		report = Report{
			Attempts: c.started, Winner: c.winner, Outcome: c.outcome,
			BudgetRefusals: c.refusals, DeadlineSkips: c.skips, Panicked: pe != nil || goexit,
		}
	}
	c.val = zero // the call may outlive Do in a loser; do not pin the result
	learn, ran, complete := c.learn, c.primaryRan, c.primaryDone
	c.mu.Unlock()
	if unlink != nil {
		unlink()
	}
	if learn {
		if lp := c.learnSafely(ctx, ran, complete); pe == nil {
			pe = lp
		}
	}

	if p.Observer != nil {
		report.Elapsed = c.now().Sub(c.begin)
		p.Observer.Observe(report)
	}
	if pe != nil {
		panic(pe)
	}
	if goexit {
		runtime.Goexit()
	}
	return v, err
}

// PanicError is the value Do panics with when an attempt panicked: the
// attempt, the value it panicked with and its goroutine's stack. Do makes a
// new one for each panic; it is not shared.
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
	c.learner.Learn(ctx, ran, complete)
	return nil
}
