package hedge_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// slowPrimaryBudget takes a while to answer the primary's Allow(0), as a
// remote budget would, and logs what it hears.
type slowPrimaryBudget struct {
	wait time.Duration
	mu   sync.Mutex
	log  []string
}

func (b *slowPrimaryBudget) Allow(_ context.Context, k int) bool {
	if k == 0 {
		time.Sleep(b.wait)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log = append(b.log, "allow "+itoa(k))
	return true
}

func (b *slowPrimaryBudget) Done(_ context.Context, k int, o hedge.Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log = append(b.log, "done "+itoa(k)+" "+o.String())
}

// The primary's hooks are under the call's one deadline too (rule 5): a
// Budget.Allow(0) or a Delay.Next(0) that takes 300ms, with a deadline at
// 100ms from the Timeout or from ctx, has Do return DeadlineExceeded at
// 100ms. fn, which would answer at once, never runs, and the budget gets
// the primary's grant back.
func TestSlowPrimaryHooksKeepTheDeadline(t *testing.T) {
	const hook, deadline = 300 * ms, 100 * ms
	hooks := []struct {
		name   string
		policy func(b *slowPrimaryBudget) hedge.Policy[int]
		log    []string
	}{
		{"Budget.Allow(0)", func(b *slowPrimaryBudget) hedge.Policy[int] {
			b.wait = hook
			return hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Budget: b}
		}, []string{"allow 0", "done 0 Canceled"}},
		{"Delay.Next(0)", func(b *slowPrimaryBudget) hedge.Policy[int] {
			next := hedge.DelayFunc(func(context.Context, int) time.Duration { time.Sleep(hook); return time.Hour })
			return hedge.Policy[int]{Delay: next, Budget: b}
		}, []string{"allow 0", "done 0 Canceled"}},
	}
	deadlines := []struct {
		name string
		set  func(context.Context, *hedge.Policy[int]) (context.Context, context.CancelFunc)
	}{
		{"Timeout", func(ctx context.Context, p *hedge.Policy[int]) (context.Context, context.CancelFunc) {
			p.Timeout = deadline
			return ctx, func() {}
		}},
		{"ctx deadline", func(ctx context.Context, _ *hedge.Policy[int]) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, deadline)
		}},
	}
	for _, h := range hooks {
		for _, dl := range deadlines {
			t.Run(h.name+", "+dl.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := &slowPrimaryBudget{}
					p := h.policy(b)
					ctx, cancel := dl.set(t.Context(), &p)
					defer cancel()
					start := time.Now()
					var ran atomic.Bool
					v, err := hedge.Do(ctx, p, func(context.Context) (int, error) { ran.Store(true); return 7, nil })
					if at := time.Since(start); err != context.DeadlineExceeded || at != deadline {
						t.Errorf("Do = %v, %v at %v; want context.DeadlineExceeded at %v", v, err, at, deadline)
					}
					time.Sleep(time.Second) // the hook returns, and the call lets go of the primary
					if ran.Load() {
						t.Error("fn ran after the call's deadline")
					}
					b.mu.Lock()
					defer b.mu.Unlock()
					if diff := cmp.Diff(h.log, b.log); diff != "" {
						t.Errorf("the budget heard (-want +got):\n%s", diff)
					}
				})
			})
		}
	}
}
