package hedge_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// logBudget writes every call it gets to log, and grants hedges if grant
// is set. It has no Release: AllOf returns its grants with Done.
type logBudget struct {
	name  string
	grant bool
	log   *[]string
}

func (l logBudget) Allow(_ context.Context, k int) bool {
	*l.log = append(*l.log, fmt.Sprintf("%s.Allow(%d)", l.name, k))
	return k < 1 || l.grant
}

func (l logBudget) Done(_ context.Context, k int, o hedge.Outcome) {
	*l.log = append(*l.log, fmt.Sprintf("%s.Done(%d, %v)", l.name, k, o))
}

// releasingLog is a logBudget with a Release.
type releasingLog struct{ logBudget }

func (l releasingLog) Release(_ context.Context, k int) {
	*l.log = append(*l.log, fmt.Sprintf("%s.Release(%d)", l.name, k))
}

// AllOf asks the primary of every budget, asks for a hedge in order until
// one refuses, gives the grants back, and reports Done to every budget.
func TestAllOfCalls(t *testing.T) {
	var log []string
	a, b := releasingLog{logBudget{"a", true, &log}}, logBudget{"b", true, &log}
	no, c := logBudget{"no", false, &log}, logBudget{"c", true, &log}
	ctx := context.Background()
	tests := []struct {
		name    string
		budget  hedge.Budget
		k       int
		granted bool
		want    []string
	}{
		{"the primary goes to every budget, granted or not", hedge.AllOf(a, no, c), 0, true,
			[]string{"a.Allow(0)", "no.Allow(0)", "c.Allow(0)", "a.Done(0, Accept)", "no.Done(0, Accept)", "c.Done(0, Accept)"}},
		{"a hedge that all grant, and its Done", hedge.AllOf(a, b, c), 1, true,
			[]string{"a.Allow(1)", "b.Allow(1)", "c.Allow(1)", "a.Done(1, Accept)", "b.Done(1, Accept)", "c.Done(1, Accept)"}},
		{"a refusal stops the asking and returns the grants: Release, else Done(Canceled)", hedge.AllOf(a, b, no, c), 2, false,
			[]string{"a.Allow(2)", "b.Allow(2)", "no.Allow(2)", "a.Release(2)", "b.Done(2, Canceled)"}},
		{"the first refuses: nothing to return", hedge.AllOf(no, a), 1, false,
			[]string{"no.Allow(1)"}},
		{"nested: the outer refusal returns the inner composition's grants", hedge.AllOf(hedge.AllOf(a, b), no), 1, false,
			[]string{"a.Allow(1)", "b.Allow(1)", "no.Allow(1)", "a.Release(1)", "b.Done(1, Canceled)"}},
		{"nil budgets are left out", hedge.AllOf(nil, a, nil), 1, true,
			[]string{"a.Allow(1)", "a.Done(1, Accept)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log = nil
			granted := tt.budget.Allow(ctx, tt.k)
			if granted {
				tt.budget.Done(ctx, tt.k, hedge.Accept)
			}
			if granted != tt.granted {
				t.Errorf("Allow(%d) = %t, want %t", tt.k, granted, tt.granted)
			}
			if diff := cmp.Diff(tt.want, log); diff != "" {
				t.Errorf("calls (-want +got)\n%s", diff)
			}
		})
	}

	for _, empty := range []hedge.Budget{hedge.AllOf(), hedge.AllOf(nil, nil)} {
		if !empty.Allow(ctx, 0) || !empty.Allow(ctx, 1) {
			t.Error("AllOf with no budgets refused an attempt, want everything granted")
		}
		empty.Done(ctx, 1, hedge.Accept)
		empty.(interface{ Release(context.Context, int) }).Release(ctx, 1)
	}
}

// Each stock budget, first in a composition whose second refuses, is left
// exactly as it was.
func TestAllOfRefusedLeavesFirstUnchanged(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// first returns a budget and a function that reads its state.
		first func(t *testing.T) (hedge.Budget, func() string)
		want  string
	}{
		{"RatioBudget", func(t *testing.T) (hedge.Budget, func() string) {
			b := &hedge.RatioBudget{Ratio: 0.5, Window: time.Second, Clock: clock.NewMock()}
			for range 6 {
				b.Allow(ctx, 0)
			}
			return b, func() string { return fmt.Sprint(askHedges(b, 10), " hedges") }
		}, "3 hedges"},
		{"InflightLimit", func(t *testing.T) (hedge.Budget, func() string) {
			l := &hedge.InflightLimit{Max: 2}
			l.Allow(ctx, 1)
			return l, func() string { return fmt.Sprint(l.InFlight(), " in flight") }
		}, "1 in flight"},
		{"TokenBucket", func(t *testing.T) (hedge.Budget, func() string) {
			b := &hedge.TokenBucket{MaxTokens: 10, TokenRatio: 0.5}
			b.Done(ctx, 0, hedge.Retryable)
			return b, func() string { return fmt.Sprint(b.Tokens(), " tokens") }
		}, "9 tokens"},
		{"Breaker, half-open", func(t *testing.T) (hedge.Budget, func() string) {
			mock := clock.NewMock()
			b := &hedge.Breaker{Samples: 1, Cooldown: time.Second, Trials: 2, Clock: mock}
			b.Done(ctx, 0, hedge.Retryable)
			mock.Set(mock.Now().Add(time.Second))
			b.Allow(ctx, 1) // one trial out, one left
			return b, func() string { return fmt.Sprint(askHedges(b, 5), " trials, ", b.State(ctx)) }
		}, "1 trials, half-open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, state := tt.first(t)
			all := hedge.AllOf(first, noHedges{})
			for range 10 {
				if all.Allow(ctx, 1) {
					t.Fatal("the composition granted a hedge its second budget refuses")
				}
			}
			if got := state(); got != tt.want {
				t.Errorf("after 10 refused hedges: %s, want %s as before", got, tt.want)
			}
		})
	}
}

// Done and Release reach every budget even when one of them panics, and a
// panic or runtime.Goexit in a later budget's Allow returns the grants of
// the earlier ones.
func TestAllOfPanics(t *testing.T) {
	ctx := context.Background()
	recovered := func(f func()) (v any) {
		defer func() { v = recover() }()
		f()
		return nil
	}
	l1 := &hedge.InflightLimit{Max: 1}
	l2 := &hedge.InflightLimit{Max: 1}

	all := hedge.AllOf(l1, faultyBudget{inAllow: true}, l2)
	if v := recovered(func() { all.Allow(ctx, 1) }); v == nil || l1.InFlight() != 0 || l2.InFlight() != 0 {
		t.Errorf("Allow panicked: %v; permits %d and %d; want the panic and no permit kept", v, l1.InFlight(), l2.InFlight())
	}

	all = hedge.AllOf(l1, faultyBudget{inDone: true}, l2)
	if !all.Allow(ctx, 1) {
		t.Fatal("want the hedge granted")
	}
	if v := recovered(func() { all.Done(ctx, 1, hedge.Accept) }); v == nil || l1.InFlight() != 0 || l2.InFlight() != 0 {
		t.Errorf("Done panicked: %v; permits %d and %d; want the panic and both permits back", v, l1.InFlight(), l2.InFlight())
	}
	if !all.Allow(ctx, 1) {
		t.Fatal("want the hedge granted")
	}
	if v := recovered(func() { all.(interface{ Release(context.Context, int) }).Release(ctx, 1) }); v == nil || l1.InFlight() != 0 || l2.InFlight() != 0 {
		t.Errorf("Release panicked: %v; permits %d and %d; want the panic and both permits back", v, l1.InFlight(), l2.InFlight())
	}

	all = hedge.AllOf(l1, goexitBudget{}, l2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		all.Allow(ctx, 1)
	}()
	<-done
	if l1.InFlight() != 0 || l2.InFlight() != 0 {
		t.Errorf("Allow called runtime.Goexit: permits %d and %d, want none kept", l1.InFlight(), l2.InFlight())
	}
}

// faultyBudget grants everything, but panics in a hedge's Allow or in
// Done (and so in AllOf's Release, which falls back to Done).
type faultyBudget struct{ inAllow, inDone bool }

func (f faultyBudget) Allow(_ context.Context, k int) bool {
	if f.inAllow && k > 0 {
		panic("allow")
	}
	return true
}

func (f faultyBudget) Done(context.Context, int, hedge.Outcome) {
	if f.inDone {
		panic("done")
	}
}

// goexitBudget calls runtime.Goexit in Allow.
type goexitBudget struct{}

func (goexitBudget) Allow(context.Context, int) bool          { runtime.Goexit(); return false }
func (goexitBudget) Done(context.Context, int, hedge.Outcome) {}

// Under contention the composition grants only what every budget grants,
// and its first budget keeps exactly the composition's grants.
func TestBudgetContentionAllOf(t *testing.T) {
	ctx := context.Background()
	t.Run("RatioBudget before a refusing budget: 64 goroutines keep its 64 credits", func(t *testing.T) {
		for round := range 50 {
			ratio := &hedge.RatioBudget{Ratio: 0.1, Window: 10 * time.Second, Clock: clock.NewMock()}
			for range 640 {
				ratio.Allow(ctx, 0)
			}
			all := hedge.AllOf(ratio, noHedges{})
			var granted atomic.Int64
			budgetRace(budgetRacers, func(int) {
				for range 4 {
					if all.Allow(ctx, 1) {
						granted.Add(1)
					}
				}
			})
			if g, left := granted.Load(), askHedges(ratio, 100); g != 0 || left != 64 {
				t.Fatalf("round %d: %d granted, %d credits left; want 0 and 64", round, g, left)
			}
		}
	})
	t.Run("2 permits before 1: 64 goroutines, exactly 1 granted and 1 permit of 2 taken", func(t *testing.T) {
		for round := range 200 {
			two := &hedge.InflightLimit{Max: 2}
			one := &hedge.InflightLimit{Max: 1}
			all := hedge.AllOf(two, one)
			var granted atomic.Int64
			budgetRace(budgetRacers, func(int) {
				if all.Allow(ctx, 1) {
					granted.Add(1)
				}
			})
			if g, t2, t1 := granted.Load(), two.InFlight(), one.InFlight(); g != 1 || t2 != 1 || t1 != 1 {
				t.Fatalf("round %d: %d granted, permits taken %d of 2 and %d of 1; want 1, 1, 1", round, g, t2, t1)
			}
		}
	})
	t.Run("RatioBudget before 8 permits: 64 goroutines, 8 granted, 56 credits left", func(t *testing.T) {
		for round := range 50 {
			ratio := &hedge.RatioBudget{Ratio: 0.1, Window: 10 * time.Second, Clock: clock.NewMock()}
			for range 640 {
				ratio.Allow(ctx, 0)
			}
			l := &hedge.InflightLimit{Max: 8}
			all := hedge.AllOf(ratio, l)
			var granted atomic.Int64
			budgetRace(budgetRacers, func(int) {
				if all.Allow(ctx, 1) {
					granted.Add(1)
				}
			})
			if g, left := granted.Load(), askHedges(ratio, 100); g != 8 || left != 56 {
				t.Fatalf("round %d: %d granted, %d credits left; want 8 and 56", round, g, left)
			}
		}
	})
}

// A composition of the stock budgets allocates nothing, refusing or not.
func TestAllOfAllocations(t *testing.T) {
	ratio := &hedge.RatioBudget{Ratio: 0.5, MinPerSecond: 10, Window: 10 * time.Second}
	bucket := &hedge.TokenBucket{MaxTokens: 10, TokenRatio: 0.5}
	inflight := &hedge.InflightLimit{Max: 1}
	breaker := &hedge.Breaker{}
	full := &hedge.InflightLimit{Max: 1}
	full.Allow(context.Background(), 1) // its one permit taken: it refuses every hedge
	for name, b := range map[string]hedge.Budget{
		"granting": hedge.AllOf(breaker, ratio, bucket, inflight),
		"refusing": hedge.AllOf(breaker, ratio, bucket, full),
	} {
		n := testing.AllocsPerRun(1000, func() { budgetCall(b) })
		if n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

// Through Do: a RatioBudget behind an open breaker. Without AllOf's
// Release, every hedge the breaker refused would still spend the ratio's
// credit; with it, the credit waits for the route to heal.
func TestAllOfThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ratio := &hedge.RatioBudget{Ratio: 0.001, MinPerSecond: 1, Window: 10 * time.Second} // 10 hedges per 10s, and 20 calls fund none
		breaker := &hedge.Breaker{Samples: 1, Cooldown: time.Minute}
		breaker.Done(t.Context(), 0, hedge.Retryable) // open
		var stats hedge.Stats
		p := hedge.Policy[int]{Budget: hedge.AllOf(ratio, breaker), Delay: hedge.Fixed(ms), Observer: &stats}
		slowPrimary := func(ctx context.Context) (int, error) {
			if hedge.Attempt(ctx) == 0 {
				time.Sleep(5 * ms)
			}
			return hedge.Attempt(ctx), nil
		}
		for range 20 {
			hedge.Do(t.Context(), p, slowPrimary)
		}
		synctest.Wait()
		if s := stats.Snapshot(); s.Attempts != 20 || s.BudgetRefusals != 20 {
			t.Errorf("%+v, want 20 calls without a hedge, each refused", s)
		}
		if n := askHedges(ratio, 20); n != 10 {
			t.Errorf("the ratio budget has %d hedges left, want all 10", n)
		}
	})
}
