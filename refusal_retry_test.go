package hedge_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// refusesTheHedge refuses the first ask for attempt 1, the timed hedge,
// once the primary has failed retryable while it was asked, and grants
// every other ask, recording them. (A refused attempt never started, so
// the retry after it is attempt 1 too.)
type refusesTheHedge struct {
	asking chan struct{} // closed when the hedge is asked for
	mu     sync.Mutex
	asked  []int
}

func (b *refusesTheHedge) Allow(_ context.Context, k int) bool {
	b.mu.Lock()
	first := k == 1 && !slices.Contains(b.asked, 1)
	b.asked = append(b.asked, k)
	b.mu.Unlock()
	if !first {
		return true
	}
	close(b.asking)
	synctest.Wait() // the primary fails, and the call owes it a retry
	return false
}

func (b *refusesTheHedge) Done(context.Context, int, hedge.Outcome) {}

// A retryable result that comes while the Budget is asked for a timed
// hedge is owed an attempt of its own (rule 2): the Budget's refusal of
// the hedge says nothing of it, so the retry is asked for, and runs.
func TestRefusedHedgeLeavesTheRetryOwed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &refusesTheHedge{asking: make(chan struct{})}
		busy := errors.New("busy")
		var r hedge.Report
		p := hedge.Policy[int]{
			Delay: hedge.Fixed(10 * time.Millisecond), Budget: b, MaxAttempts: 3,
			Observer: hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got }),
		}
		v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			if k := hedge.Attempt(ctx); k > 0 {
				return k, nil
			}
			<-b.asking
			return 0, busy
		})
		if err != nil || v != 1 {
			t.Errorf("Do = %d, %v; want the retry's 1, nil", v, err)
		}
		if want := []int{0, 1, 1}; !slices.Equal(b.asked, want) {
			t.Errorf("the Budget was asked for attempts %v, want %v", b.asked, want)
		}
		if r.BudgetRefusals != 1 {
			t.Errorf("BudgetRefusals = %d, want 1", r.BudgetRefusals)
		}
	})
}
