package hedge_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/ctxtest"
)

type allowPanics struct{}

func (allowPanics) Allow(_ context.Context, k int) bool {
	if k > 0 {
		panic("allow")
	}
	return true
}
func (allowPanics) Done(_ context.Context, _ int, _ hedge.Outcome) {}

type donePanics struct{}

func (donePanics) Allow(_ context.Context, _ int) bool            { return true }
func (donePanics) Done(_ context.Context, _ int, _ hedge.Outcome) { panic("done") }

func mustPanicError(t *testing.T, f func() (int, error)) {
	t.Helper()
	defer func() {
		if _, ok := recover().(*hedge.PanicError); !ok {
			t.Errorf("want a *hedge.PanicError in the caller")
		}
	}()
	v, err := f()
	t.Errorf("Do returned %v, %v: the hook's panic was swallowed", v, err)
}

// Budget.Allow panics while the retryable primary is the last attempt in
// flight: record's tryStart catches it, then settle decides the call, and
// unlock only re-raises hook panics of undecided calls.
func TestAllowPanicWhenLastRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.Policy[int]{Delay: hedge.Fixed(-1), Budget: allowPanics{}}
		mustPanicError(t, func() (int, error) {
			return hedge.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errBusy })
		})
	})
}

// Budget.Done panics for the attempt that wins: the panic is caught,
// settle decides, the panic is dropped.
func TestDonePanicForTheWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.Policy[int]{Budget: donePanics{}}
		mustPanicError(t, func() (int, error) {
			return hedge.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		})
	})
}

// Keyed's Key panics: Next's panic is caught and becomes a *PanicError,
// but Do then calls Learn on the caller's goroutine before re-raising,
// Key panics again there, and the raw panic escapes Do, before unlink:
// the call stays registered on the long-lived ctx.
func TestLearnPanicIsRaisedAfterUnlinking(t *testing.T) {
	reg := &ctxtest.Registry{}
	k := &hedge.Keyed{Key: func(context.Context) string { panic("key") }}
	func() {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(*hedge.PanicError); !ok {
					t.Errorf("recovered %#v, want a *hedge.PanicError", v)
				}
			}
		}()
		hedge.Do(reg, hedge.Policy[int]{Delay: k}, func(context.Context) (int, error) { return 1, nil })
	}()
	if n := reg.Live(); n != 0 {
		t.Errorf("%d registrations left on the parent", n)
	}
}

// "After a shift in latency the delay follows within two Windows of
// calls." A downward shift that lands 10% into a generation at p99 is
// still at the old delay two Windows later: the generation holding the
// old samples stays in the estimate until the first recompute of the
// generation after next, Window/8 samples past its start.
func TestPercentileFollowsADropWithinTwoWindows(t *testing.T) {
	ctx := context.Background()
	const window = 1000
	p := &hedge.Percentile{Quantile: 0.99, Window: window}
	for _, d := range uniform(window+window/10, 100*ms, 200*ms) {
		p.Learn(ctx, d, true)
	}
	for _, d := range uniform(2*window, 10*ms, 20*ms) {
		p.Learn(ctx, d, true)
	}
	if got := p.Next(ctx, 0); got > 25*ms {
		t.Errorf("two Windows after latency fell tenfold: delay %v, want about 19.9ms", got)
	}
}

// A sub-millisecond upstream: only Ceiling is set, and Do rejects the
// policy for a Floor the user never set (the 1ms default).
func TestCeilingBelowDefaultFloor(t *testing.T) {
	_, err := hedge.Do(context.Background(), hedge.Policy[int]{Delay: &hedge.Percentile{Ceiling: 500 * time.Microsecond}},
		func(context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Errorf("Percentile{Ceiling: 500µs}: %v", err)
	}
}
