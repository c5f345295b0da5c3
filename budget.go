package hedge

import "context"

// Budget bounds the extra attempts that hedging adds, across calls. One
// Budget is usually shared by many calls (and by a retry loop of another
// library), so implementations must be safe for concurrent use. A nil
// Budget in a Policy grants everything.
//
// Do calls Allow(k) before it starts attempt k ≥ 1; false skips that
// attempt. It also calls Allow(0) when it starts the primary, and ignores
// the answer: the primary always runs, but a ratio budget counts the call
// there. Do calls Done(k, o) exactly once for every attempt that started,
// the primary included, as soon as that attempt's function returns and
// the call has taken its result: o is the attempt's Outcome; Terminal if
// it panicked or called runtime.Goexit; TimedOut for an attempt that the
// call's deadline (the Timeout's or ctx's) cut off; Canceled for every
// other attempt whose result did not count, because the call had been
// decided by then (a loser, also one that answered in the same instant as
// the winner) or because the caller cut it off. When an attempt decides
// the call, Do returns after its Done. So a
// ratio budget can deposit on Allow(0) and withdraw on Allow(k ≥ 1), a
// token bucket can drain on Retryable and refill on Accept, and a
// concurrency cap can hold a permit from a granted Allow to its Done.
//
// ctx is the caller's context (the one passed to Do), so a budget can
// keep one bound per route it finds there, as a breaker does. Do calls
// both methods without holding any lock of its own, on the call's
// goroutines (an attempt's or a timer's): they should be fast, since an
// attempt waits for Allow. A slow one never holds Do past its deadline. If Allow grants an attempt whose fn
// never runs because the call ended meanwhile, Do takes the grant back
// with Release when the Budget has that method (below), and with
// Done(k, Canceled) otherwise; so it does for an attempt that a tie
// cancelled while it waited in a server's queue (see Started), instead
// of calling Done. A panic in either is re-raised in the caller's
// goroutine as a *PanicError, and runtime.Goexit ends the call as an
// attempt's would.
//
// A retry loop draws on the same Budget by calling Allow(0) before its
// first try and Allow(k) before each retry, k ≥ 1, and Done(k, o) after
// every try: Tries does this for the loop of a retry library, and hands
// the count to a Do that the try runs, so that a request is counted once.
//
// A Budget that can take back a grant whose attempt never started has a
// method
//
//	Release(ctx context.Context, k int)
//
// that undoes a granted Allow(ctx, k), k ≥ 1; no Done follows it. Do
// calls it for a grant whose attempt the call's end kept from starting,
// and for an attempt that a tie cancelled while it waited in a server's
// queue (see Started): it did no work. AllOf calls it on the budgets
// that granted an attempt when a later one refused it. Release is not Done(ctx, k, Canceled): Do reports Canceled
// for attempts that ran and lost too, and a budget that charges on Allow
// must not refund those, since a RatioBudget's withdrawal pays for load
// the attempt did add. For an attempt that never ran, there is nothing to
// pay for. Every budget of this package has it: a RatioBudget refunds the
// attempt, an InflightLimit returns its permit, a Breaker its trial slot,
// and a TokenBucket, whose Allow takes nothing, does nothing.
type Budget interface {
	Allow(ctx context.Context, k int) bool
	Done(ctx context.Context, k int, o Outcome)
}
