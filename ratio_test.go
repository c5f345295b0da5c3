package hedge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// ratioModel is the bound RatioBudget promises, kept from its definition
// by brute force: an extra attempt in second now is granted if, in the
// window that ends now, the extra attempts granted stay within ratio ×
// calls + reserve. Amounts are in thousandths of an attempt.
type ratioModel struct {
	ratio, reserve int64
	window         int64 // in seconds
	calls, extras  map[int64]int64
}

// startNow uses b, without spending, so that its seconds count from now.
func startNow(t *testing.T, b hedge.Budget) {
	t.Helper()
	if err := (hedge.Policy[int]{Budget: b}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// newRatioModel models a RatioBudget with these fields, set as they are
// set on the budget: a Ratio of 0 means 0.1, as the budget's does.
func newRatioModel(ratio, minPerSecond float64, window time.Duration) *ratioModel {
	if ratio == 0 {
		ratio = 0.1
	}
	w := int64(window / time.Second)
	return &ratioModel{
		ratio: int64(ratio * 1000), reserve: int64(minPerSecond*1000) * w, window: w,
		calls: map[int64]int64{}, extras: map[int64]int64{},
	}
}

func (m *ratioModel) allow(now int64) bool {
	var calls, extras int64
	for s := now; s > now-m.window; s-- {
		calls += m.calls[s]
		extras += m.extras[s]
	}
	if 1000*(extras+1) > m.ratio*calls+m.reserve {
		return false
	}
	m.extras[now]++
	return true
}

// violation returns a window that ends in a second with grants and whose
// extra attempts exceed the bound, or "" if none does. A window that ends
// in a second without grants may hold more: attempts granted on the credit
// of seconds before it.
func (m *ratioModel) violation() string {
	for end, n := range m.extras {
		if n == 0 {
			continue
		}
		from := end - m.window + 1
		var calls, extras int64
		for s := from; s < from+m.window; s++ {
			calls += m.calls[s]
			extras += m.extras[s]
		}
		if 1000*extras > m.ratio*calls+m.reserve {
			return fmt.Sprintf("seconds %d..%d: %d extra attempts for %d calls", from, from+m.window-1, extras, calls)
		}
	}
	return ""
}

// askHedges counts the grants of up to n Allow calls.
func askHedges(b hedge.Budget, n int) int {
	granted := 0
	for range n {
		if b.Allow(context.Background(), 1) {
			granted++
		}
	}
	return granted
}

func TestRatioBudget(t *testing.T) {
	type step struct {
		wait  time.Duration // advance the clock first
		calls int           // then deposit this many calls
		ask   int           // then ask for this many hedges
		want  int           // of which this many are granted
	}
	tests := []struct {
		name          string
		ratio, perSec float64
		window        time.Duration
		steps         []step
	}{{
		name: "calls fund a ratio of an attempt", ratio: 0.5, window: 10 * time.Second,
		steps: []step{{calls: 3, ask: 5, want: 1}, {calls: 1, ask: 5, want: 1}, {calls: 1, ask: 5, want: 0}},
	}, {
		name: "the reserve alone: spent, remembered for a window, then back", perSec: 1, window: 3 * time.Second,
		steps: []step{
			{ask: 5, want: 3},
			{wait: time.Second, ask: 5, want: 0},
			{wait: time.Second, ask: 5, want: 0},
			{wait: time.Second, ask: 5, want: 3},
		},
	}, {
		name: "a second's surplus carries over within the window", ratio: 0.5, window: 3 * time.Second,
		steps: []step{
			{calls: 10}, {wait: time.Second, ask: 3, want: 3}, {wait: time.Second, ask: 3, want: 2},
			{wait: time.Second, ask: 3, want: 0}, // the calls of second 0 left the window
		},
	}, {
		name: "calls after a spent reserve first pay it back", ratio: 0.5, perSec: 1, window: 2 * time.Second,
		steps: []step{
			// Second 0 spends the reserve of 2. Seconds 0..1 then allow 3
			// hedges: the reserve and 2 calls at 0.5. Seconds 1..2 allow 3
			// too, of which second 1 took 1.
			{ask: 5, want: 2},
			{wait: time.Second, calls: 2, ask: 5, want: 1},
			{wait: time.Second, ask: 5, want: 2},
		},
	}, {
		name: "an hour of quiet forgets everything", ratio: 0.1, perSec: 0.5, window: 4 * time.Second,
		steps: []step{{ask: 5, want: 2}, {wait: time.Hour, ask: 5, want: 2}},
	}, {
		name: "a one-second window", perSec: 2, window: time.Second,
		steps: []step{{ask: 5, want: 2}, {wait: 999 * time.Millisecond, ask: 5, want: 0}, {wait: time.Millisecond, ask: 5, want: 2}},
	}, {
		name: "1.001 is read as 1001 thousandths, though 1.001*1000 < 1001 in float64", ratio: 1.001, window: time.Second,
		steps: []step{{calls: 1000, ask: 1100, want: 1001}},
	}, {
		name: "beyond three decimals, rounded down", ratio: 0.0009, window: time.Second,
		steps: []step{{calls: 1000, ask: 5, want: 0}, {calls: 1000, ask: 5, want: 0}},
	}, {
		name: "ratio 0 means 0.1", window: time.Second,
		steps: []step{{calls: 1000, ask: 200, want: 100}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { // Mock.Add yields with a sleep
				mock := clock.NewMock()
				b := &hedge.RatioBudget{Ratio: tt.ratio, MinPerSecond: tt.perSec, Window: tt.window, Clock: mock}
				startNow(t, b)
				var want, got []int
				for _, s := range tt.steps {
					mock.Add(s.wait)
					for range s.calls {
						b.Allow(context.Background(), 0)
					}
					want, got = append(want, s.want), append(got, askHedges(b, s.ask))
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("hedges granted per step (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// Only a call's primary deposits, whatever its outcome, and only extra
// attempts withdraw.
func TestRatioBudgetCountsCallsNotAttempts(t *testing.T) {
	b := &hedge.RatioBudget{Ratio: 0.5, Window: time.Second, Clock: clock.NewMock()}
	for _, o := range []hedge.Outcome{hedge.Accept, hedge.Retryable, hedge.Terminal, hedge.Canceled} {
		b.Done(context.Background(), 1, o) // a hedge's return neither deposits nor refunds
	}
	if b.Allow(context.Background(), 1) {
		t.Fatal("with nothing deposited, a hedge was granted")
	}
	b.Done(context.Background(), 0, hedge.Terminal) // a primary's return neither
	if !b.Allow(context.Background(), 0) || b.Allow(context.Background(), 1) {
		t.Fatal("want the primary granted and, with half an attempt deposited, a hedge refused")
	}
	b.Allow(context.Background(), 0)
	if !b.Allow(context.Background(), 1) || b.Allow(context.Background(), 1) {
		t.Error("two calls at 0.5, failed or not, should fund exactly one hedge")
	}
}

// Random traces of calls, hedges and clock jumps: every Allow must answer
// exactly as the brute-force model does.
func TestRatioBudgetMatchesModel(t *testing.T) {
	params := []struct {
		ratio, perSec float64
		window        time.Duration
	}{
		{0.1, 0.5, 10 * time.Second},
		{0.25, 1, 3 * time.Second},
		{1.5, 0, time.Second},
		{0, 2, 5 * time.Second},
		{0.333, 0.001, time.Minute},
	}
	for _, p := range params {
		t.Run(fmt.Sprintf("%v,%v,%v", p.ratio, p.perSec, p.window), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mock := clock.NewMock()
				b := &hedge.RatioBudget{Ratio: p.ratio, MinPerSecond: p.perSec, Window: p.window, Clock: mock}
				startNow(t, b)
				m := newRatioModel(p.ratio, p.perSec, p.window)
				rng := rand.New(rand.NewPCG(1, uint64(p.window)))
				start := mock.Now()
				for i := range 20000 {
					switch r := rng.IntN(100); {
					case r < 3:
						mock.Add(time.Duration(rng.Int64N(int64(2500 * time.Millisecond))))
					case r < 4:
						mock.Add(time.Duration(rng.Int64N(int64(3 * p.window))))
					case r < 60:
						b.Allow(context.Background(), 0)
						m.calls[int64(mock.Since(start)/time.Second)]++
					default:
						now := int64(mock.Since(start) / time.Second)
						if got, want := b.Allow(context.Background(), 1), m.allow(now); got != want {
							t.Fatalf("event %d, second %d: Allow = %t, the model says %t", i, now, got, want)
						}
					}
				}
				if v := m.violation(); v != "" {
					t.Errorf("bound broken: %s", v)
				}
			})
		})
	}
}

// 64 goroutines wake together at the start of each second and race to open
// its slot, deposit and hedge. Every second must grant exactly what the
// model grants, which keeps the bound over every window that ends in it.
func TestRatioBudgetContentionAcrossSeconds(t *testing.T) {
	const (
		ratio, perSec = 0.25, 0.5
		window        = 3 * time.Second
		seconds       = 12
	)
	synctest.Test(t, func(t *testing.T) {
		b := &hedge.RatioBudget{Ratio: ratio, MinPerSecond: perSec, Window: window} // real time: the bubble's
		start := time.Now()
		startNow(t, b)
		var mu sync.Mutex
		got := map[int64]int64{}
		calls := func(g, s int) int { return (g * s) % 3 } // none at all in some seconds
		budgetRace(budgetRacers, func(g int) {
			for s := range seconds {
				// Deposits come first; a second without any opens on Allow.
				time.Sleep(time.Until(start.Add(time.Duration(s) * time.Second)))
				for range calls(g, s) {
					b.Allow(context.Background(), 0)
				}
				time.Sleep(time.Until(start.Add(time.Duration(s)*time.Second + 500*time.Millisecond)))
				n := askHedges(b, 8)
				mu.Lock()
				got[int64(s)] += int64(n)
				mu.Unlock()
			}
		})
		m := newRatioModel(ratio, perSec, window)
		want := map[int64]int64{}
		for s := range int64(seconds) {
			for g := range budgetRacers {
				m.calls[s] += int64(calls(g, int(s)))
			}
			n := int64(0)
			for m.allow(s) {
				n++
			}
			want[s] = n
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("hedges granted per second (-want +got)\n%s", diff)
		}
		m.extras = got
		if v := m.violation(); v != "" {
			t.Errorf("bound broken: %s", v)
		}
	})
}

// pausingClock runs pause once, inside the next Now, after reading the
// time: the caller is then in the middle of a budget call, holding a
// reading of a second that pause may end.
type pausingClock struct {
	*clock.Mock
	pause func()
}

func (c *pausingClock) Now() time.Time {
	t := c.Mock.Now()
	if p := c.pause; p != nil {
		c.pause = nil
		p()
	}
	return t
}

// A call that straddles the end of a second must not land in the second
// that was already closed and accounted for: it counts in the new one.
func TestRatioBudgetStraddlingCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &pausingClock{Mock: clock.NewMock()}
		b := &hedge.RatioBudget{MinPerSecond: 1, Window: 2 * time.Second, Clock: clk} // 2 hedges per 2s: no call deposits
		if !b.Allow(context.Background(), 1) {
			t.Fatal("second 0: the first hedge was refused")
		}
		clk.pause = func() {
			clk.Add(time.Second)
			if !b.Allow(context.Background(), 1) {
				t.Error("second 1: the second hedge was refused")
			}
		}
		if b.Allow(context.Background(), 1) {
			t.Error("a third hedge within 2s was granted")
		}
	})
}

// slowingUpstream answers each attempt after a latency drawn from a fixed
// seeded sequence, 10 to 30 ms, or three times that once slow is set.
type slowingUpstream struct {
	mu   sync.Mutex
	rng  *rand.Rand
	slow bool
}

func (u *slowingUpstream) fn(ctx context.Context) (int, error) {
	u.mu.Lock()
	d := time.Duration(10+u.rng.IntN(21)) * time.Millisecond
	if u.slow {
		d *= 3
	}
	u.mu.Unlock()
	if err := lab.Wait(ctx, d); err != nil {
		return 0, err
	}
	return 1, nil
}

// When every attempt of an upstream turns three times slower, a hedge delay
// tuned for the healthy upstream hedges nearly every call: exactly when the
// upstream can least afford it. A RatioBudget holds the extra load of the
// slow phase to its bound, plus what the healthy window before it left
// unspent; without one, it nearly doubles.
func TestRatioBudgetOverload(t *testing.T) {
	const (
		ratio, perSec = 0.1, 0.1 // one hedge per 10 calls, one per window besides
		window        = 10 * time.Second
		slowCalls     = 400
	)
	// overload returns the slow phase's calls and attempts, and how long it
	// took. The phase starts on a second, so the budget's seconds hold it
	// and nothing else.
	var saved hedge.Snapshot // the healthy phase, whose unspent credit the slow one may use
	overload := func(t *testing.T, budget func() hedge.Budget) (calls, attempts int64, took time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			var stats hedge.Stats
			p := hedge.Policy[int]{Delay: hedge.Fixed(40 * time.Millisecond), Budget: budget(), Observer: &stats}
			u := &slowingUpstream{rng: rand.New(rand.NewPCG(3, 3))}
			call := func() {
				if _, err := hedge.Do(t.Context(), p, u.fn); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the loser has returned, and with it its Done
			}
			for time.Since(start) < 9*time.Second {
				call()
			}
			saved = stats.Snapshot()
			time.Sleep(time.Until(start.Add(window)))
			u.mu.Lock()
			u.slow = true
			u.mu.Unlock()
			before, begin := stats.Snapshot(), time.Now()
			for range slowCalls {
				call()
			}
			after := stats.Snapshot()
			calls, attempts, took = after.Calls-before.Calls, after.Attempts-before.Attempts, time.Since(begin)
		})
		return calls, attempts, took
	}

	calls, attempts, _ := overload(t, func() hedge.Budget { return nil })
	if amp := float64(attempts) / float64(calls); amp < 1.5 {
		t.Errorf("without a budget, amplification %.3f; want the slow upstream hedged on most calls", amp)
	}
	t.Logf("without a budget: %d attempts for %d calls", attempts, calls)

	calls, attempts, took := overload(t, func() hedge.Budget {
		b := &hedge.RatioBudget{Ratio: ratio, MinPerSecond: perSec, Window: window}
		startNow(t, b)
		return b
	})
	// Each window the phase touches adds perSec × 10 s = 1 hedge to
	// ratio × calls, and the healthy window before it may leave credit
	// unspent: in integers, 10 × extras ≤ calls + unspent + 10 × windows,
	// where unspent is the healthy phase's calls less 10 × its extras.
	windows := int64((took+window-1)/window) + 1
	extras := attempts - calls
	unspent := saved.Calls - 10*(saved.Attempts-saved.Calls)
	if extras == 0 {
		t.Error("the budget refused every hedge")
	}
	if bound := calls + unspent + 10*windows; calls != slowCalls || 10*extras > bound {
		t.Errorf("with RatioBudget(%v, %v, %v): %d extra attempts for %d calls in %v, want at most %d",
			ratio, perSec, window, extras, calls, took, bound/10)
	}
	t.Logf("with a budget: %d attempts for %d calls in %v after %d healthy calls, amplification %.3f",
		attempts, calls, took, saved.Calls, float64(attempts)/float64(calls))
}

// Release gives back exactly what a granted hedge withdrew, as if it had
// never been asked for: random traces of calls, hedges and hedges released
// within their second must grant exactly what the model grants without
// those hedges. A primary's Release changes nothing.
func TestRatioBudgetRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mock := clock.NewMock()
		b := &hedge.RatioBudget{Ratio: 0.25, MinPerSecond: 0.5, Window: 3 * time.Second, Clock: mock}
		startNow(t, b)
		m := newRatioModel(0.25, 0.5, 3*time.Second)
		rng := rand.New(rand.NewPCG(7, 7))
		start := mock.Now()
		for i := range 20000 {
			now := int64(mock.Since(start) / time.Second)
			switch r := rng.IntN(100); {
			case r < 3:
				mock.Add(time.Duration(rng.Int64N(int64(2500 * time.Millisecond))))
			case r < 50:
				b.Allow(ctx, 0)
				m.calls[now]++
			case r < 70:
				if b.Allow(ctx, 1) {
					b.Release(ctx, 1)
				}
				b.Release(ctx, 0)
			default:
				if got, want := b.Allow(ctx, 1), m.allow(now); got != want {
					t.Fatalf("event %d, second %d: Allow = %t, the model says %t", i, now, got, want)
				}
			}
		}
		if v := m.violation(); v != "" {
			t.Errorf("bound broken: %s", v)
		}
	})
	bad := &hedge.RatioBudget{Window: time.Millisecond}
	bad.Release(context.Background(), 1)
	if bad.Allow(context.Background(), 1) {
		t.Error("a Release made a budget whose fields are out of range grant a hedge")
	}
}
