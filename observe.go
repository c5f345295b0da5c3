package hedge

import (
	"context"
	"sync/atomic"
	"time"
)

// Observer receives one Report for every call Do makes, with the
// caller's context (so that it can read the route, the gRPC method or
// the trace from it), on the caller's goroutine, just before Do returns.
// It must be safe for concurrent use. Stats is the stock implementation;
// metrics adapters (hedgeotel for OpenTelemetry) implement it to turn
// reports into their own instruments. A panic in Observe reaches Do's
// caller as it is; the value Do would have returned goes to Discard.
type Observer interface {
	Observe(ctx context.Context, r Report)
}

// ObserverFunc adapts a function to an Observer. It must be safe for
// concurrent use.
type ObserverFunc func(ctx context.Context, r Report)

// Observe calls f(ctx, r).
func (f ObserverFunc) Observe(ctx context.Context, r Report) { f(ctx, r) }

// Report is what one call decided. Durations are by the policy's clock,
// and attempts are numbered within the call, from 0 for its primary, also
// when the call is a try of a retry loop (see Tries).
type Report struct {
	// Attempts is how many attempts started, the primary included.
	Attempts int
	// Started[k] is when attempt k started, counted from the call's
	// start, for k < Attempts: Started[0] is 0, and Started[1] is the
	// delay the first hedge was started at (or sooner, when the primary
	// ended retryable). The rest are zero.
	Started [MaxAttemptsLimit]time.Duration
	// Retry[k] says attempt k was a retry: it started at once because an
	// attempt before it ended retryable, not because the delay for it
	// had passed, as a hedge does. Retry[0] is false.
	Retry [MaxAttemptsLimit]bool
	// Winner is the attempt whose result Do returned, or -1 when Do
	// returned the context's error or re-raised a panic.
	Winner int
	// Primary is how long the primary ran: its latency if it answered
	// before the call was decided (PrimaryAnswered), otherwise a lower
	// bound on it, the time until the decision, or until a tie cancelled
	// it (see Started).
	Primary time.Duration
	// PrimaryAnswered says whether the primary's fn returned before the
	// call was decided, whatever its outcome.
	PrimaryAnswered bool
	// Outcome is how the returned result was classified (Canceled when Do
	// returned the context's error).
	Outcome Outcome
	// BudgetRefusals counts extra attempts the Budget refused.
	BudgetRefusals int
	// DeadlineSkips counts extra attempts skipped because too little of the
	// deadline was left for them to help.
	DeadlineSkips int
	// Tied counts the attempts that a tie cancelled while they waited in
	// a server's queue, when another attempt reported its start (see
	// Started). They are counted in Attempts too.
	Tied int
	// Panicked is true when an attempt panicked or called runtime.Goexit
	// and Do re-raised it.
	Panicked bool
	// Elapsed is how long the call took until it was decided, by the
	// policy's clock.
	Elapsed time.Duration
}

// Stats counts what calls decided; attach it to a Policy as its Observer.
// The zero value is ready; a Stats is safe for concurrent use and must not
// be copied after first use.
type Stats struct {
	calls, attempts, hedged, refusals, skips, panics, failed atomic.Int64
	wins                                                     [MaxAttemptsLimit]atomic.Int64
}

// Observe adds r to the counts; it ignores ctx.
func (s *Stats) Observe(_ context.Context, r Report) {
	s.calls.Add(1)
	s.attempts.Add(int64(r.Attempts))
	if r.Attempts > 1 {
		s.hedged.Add(1)
	}
	if r.Winner >= 0 && r.Winner < MaxAttemptsLimit && r.Outcome == Accept {
		s.wins[r.Winner].Add(1)
	} else {
		s.failed.Add(1)
	}
	s.refusals.Add(int64(r.BudgetRefusals))
	s.skips.Add(int64(r.DeadlineSkips))
	if r.Panicked {
		s.panics.Add(1)
	}
}

// Snapshot returns the counts so far. Counters are read one by one, so a
// snapshot taken while calls finish may be off by the calls in flight.
func (s *Stats) Snapshot() Snapshot {
	snap := Snapshot{
		Calls:          s.calls.Load(),
		Attempts:       s.attempts.Load(),
		Hedged:         s.hedged.Load(),
		Failed:         s.failed.Load(),
		BudgetRefusals: s.refusals.Load(),
		DeadlineSkips:  s.skips.Load(),
		Panics:         s.panics.Load(),
	}
	for i := range s.wins {
		snap.Wins[i] = s.wins[i].Load()
	}
	return snap
}

// Snapshot is a copy of a Stats' counters.
type Snapshot struct {
	Calls    int64 // calls observed
	Attempts int64 // attempts started, primaries included
	Hedged   int64 // calls that started more than one attempt
	// Wins[k] counts calls that returned an accepted result of attempt k.
	Wins           [MaxAttemptsLimit]int64
	Failed         int64 // calls that returned no accepted result
	BudgetRefusals int64 // extra attempts the budget refused
	DeadlineSkips  int64 // extra attempts skipped for lack of time
	Panics         int64 // calls that re-raised a panic or Goexit
}

// HedgeRate is the fraction of calls that started a hedge.
func (s Snapshot) HedgeRate() float64 { return ratio(s.Hedged, s.Calls) }

// WinRate is the fraction of hedged calls that a hedge won.
func (s Snapshot) WinRate() float64 {
	var hedgeWins int64
	for _, w := range s.Wins[1:] {
		hedgeWins += w
	}
	return ratio(hedgeWins, s.Hedged)
}

// Amplification is attempts per call: 1 means no extra load.
func (s Snapshot) Amplification() float64 { return ratio(s.Attempts, s.Calls) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
