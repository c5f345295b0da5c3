package hedge

// Budget bounds the extra attempts that hedging adds, across calls. One
// Budget is usually shared by many calls (and by a retry loop of another
// library), so implementations must be safe for concurrent use. A nil
// Budget in a Policy grants everything.
//
// Do calls Allow(k) before it starts attempt k ≥ 1; false skips that
// attempt. It never asks for the primary (k = 0), which always runs.
// Do calls Done(k, o) exactly once for every attempt that started, the
// primary included, as soon as that attempt's function returns: o is the
// attempt's Outcome, or Canceled when Do had cancelled the attempt before
// it answered. So a ratio budget can deposit on Done(0, ...) and withdraw
// on Allow, a token bucket can drain on Retryable and refill on Accept, and
// a concurrency cap can hold a permit from a granted Allow to its Done.
//
// Both methods run while the call holds its lock: they must not block.
//
// A retry loop draws on the same Budget by calling Allow(k) before its
// k-th retry and Done(k, o) after every try, the first one as Done(0, o).
type Budget interface {
	Allow(k int) bool
	Done(k int, o Outcome)
}
