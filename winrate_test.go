package hedge_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// winRateScript runs a script of budget calls on one key: 'c' is a call
// (Allow(0)), 'h' asks for a hedge (Allow(1)) and notes '+' if granted
// and '-' if refused, 'w' is a hedge that won (Done(1, Accept)), 'l' one
// that lost (Done(1, Canceled)), 'f' and 't' ones that failed (Retryable,
// Terminal), 'o' one that timed out, 'r' a grant released, and 'A', 'F', 'T', 'L' a primary's
// Accept, Retryable, Terminal and Canceled. A digit repeats the next
// letter that many times, ten times per digit 0 ("0h" is ten hedges).
func winRateScript(b *hedge.WinRateBudget, ctx context.Context, script string) (grants string) {
	n := 0
	for _, r := range script {
		switch {
		case r == '0':
			n += 10
			continue
		case r >= '1' && r <= '9':
			n += int(r - '0')
			continue
		}
		for range max(n, 1) {
			switch r {
			case 'c':
				b.Allow(ctx, 0)
			case 'h':
				if b.Allow(ctx, 1) {
					grants += "+"
				} else {
					grants += "-"
				}
			case 'w':
				b.Done(ctx, 1, hedge.Accept)
			case 'l':
				b.Done(ctx, 1, hedge.Canceled)
			case 'f':
				b.Done(ctx, 1, hedge.Retryable)
			case 't':
				b.Done(ctx, 1, hedge.Terminal)
			case 'o':
				b.Done(ctx, 1, hedge.TimedOut)
			case 'r':
				b.Release(ctx, 1)
			case 'A':
				b.Done(ctx, 0, hedge.Accept)
			case 'F':
				b.Done(ctx, 0, hedge.Retryable)
			case 'T':
				b.Done(ctx, 0, hedge.Terminal)
			case 'L':
				b.Done(ctx, 0, hedge.Canceled)
			default:
				panic("bad script letter " + string(r))
			}
		}
		n = 0
	}
	return grants
}

// Each case runs a script on a fresh budget and checks which hedges it
// granted and the credit left, to the thousandth: the credit starts at
// Burst, a call adds Probe, a grant takes 1, a win adds 1/MinWinRate, a
// release or a failed hedge gives the grant back, and nothing goes past
// Burst. With less than one hedge of credit, a hedge is granted while at
// least MinWinRate of the last Samples judged hedges won.
func TestWinRateBudgetArithmetic(t *testing.T) {
	tests := []struct {
		name   string
		c      *hedge.WinRateBudget
		script string
		grants string
		credit float64
	}{
		{"it starts full at Burst: 20 hedges, then none", &hedge.WinRateBudget{},
			"00h" + "h", "++++++++++++++++++++" + "-", 0},
		{"every call adds 0.01: one more hedge after 100 calls", &hedge.WinRateBudget{},
			"00h" + "000000000c" + "9c" + "h" + "c" + "h",
			"++++++++++++++++++++" + "-" + "+", 0},
		{"a win adds 10 hedges", &hedge.WinRateBudget{},
			"00h" + "9l" + "0l" + "w" + "0h" + "h",
			"++++++++++++++++++++" + "++++++++++" + "-", 0},
		{"nothing goes past Burst: calls, wins and releases at a full credit", &hedge.WinRateBudget{},
			"0c" + "w" + "r" + "h" + "r" + "r", "+", 20},
		{"a win tops up to Burst", &hedge.WinRateBudget{},
			"5h" + "w", "+++++", 20},
		{"losses and primaries' outcomes earn nothing; a failed hedge gives its grant back", &hedge.WinRateBudget{},
			"3h" + "lft" + "AFTL", "+++", 18},
		{"a hedge that timed out is a loss", &hedge.WinRateBudget{Burst: 1, Samples: 1},
			"h" + "w" + "h" + "o" + "h" + "h", "+++-", 0},
		{"a release gives the grant back", &hedge.WinRateBudget{},
			"00h" + "r" + "h" + "h",
			"++++++++++++++++++++" + "+" + "-", 0},
		{"the credit is counted in thousandths: 7 calls add 0.07", &hedge.WinRateBudget{},
			"00h" + "7c", "++++++++++++++++++++", 0.07},
		{"MinWinRate 0.3: a win adds 3.333 hedges", &hedge.WinRateBudget{MinWinRate: 0.3},
			"00h" + "9l" + "0l" + "w" + "4h",
			"++++++++++++++++++++" + "+++-", 0.333},
		{"MinWinRate 0.3339 is read as 0.334, rounded up: a win adds 2.994", &hedge.WinRateBudget{MinWinRate: 0.3339},
			"00h" + "w", "++++++++++++++++++++", 2.994},
		{"MinWinRate 1: a win only pays for itself", &hedge.WinRateBudget{MinWinRate: 1, Burst: 2},
			"h" + "w" + "h" + "l" + "h" + "l" + "h" + "h", "++++-", 0},
		{"Probe 0.0159 is read as 0.015, rounded down: 66 calls add 0.99, 67 add 1.005", &hedge.WinRateBudget{Probe: 0.0159, Burst: 2},
			"2h" + "000000c" + "6c" + "h" + "c" + "h", "++" + "-" + "+", 0.005},
		{"Burst 1: one hedge out at a time while none wins", &hedge.WinRateBudget{Burst: 1},
			"h" + "h" + "l" + "h", "+--", 0},
		{"while a tenth of the judged hedges won, it refuses none and takes no credit", &hedge.WinRateBudget{Burst: 1},
			"hw" + strings.Repeat("hl", 9) + "h" + "l" + "h" + "h", strings.Repeat("+", 12) + "-", 0},
		{"the rate is over the last Samples judged hedges", &hedge.WinRateBudget{Burst: 1},
			"hw" + strings.Repeat("hl", 5) + "h" + "h", strings.Repeat("+", 8), 1},
		{"a win drops out of a ring of Samples", &hedge.WinRateBudget{Burst: 1, Samples: 5},
			"hw" + strings.Repeat("hl", 5) + "h" + "h", strings.Repeat("+", 7) + "-", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.c
			ctx := context.Background()
			got := winRateScript(b, ctx, tt.script)
			if got != tt.grants {
				t.Errorf("grants: got %q, want %q", got, tt.grants)
			}
			if c := b.Credit(ctx); c != tt.credit {
				t.Errorf("credit: got %v, want %v", c, tt.credit)
			}
		})
	}
}

// Hedges that never win settle at Probe per call; hedges that win at half
// of MinWinRate settle at twice that: Probe / (1 − w/MinWinRate), the
// formula in the doc, over 90,000 calls that all ask for a hedge, after
// 10,000 that spend the Burst. The credit at either end of them, under
// one win's worth, is all that separates the count from the formula.
func TestWinRateBudgetEquilibrium(t *testing.T) {
	for _, tt := range []struct {
		name string
		win  int // every win-th granted hedge wins; 0: none
		want float64
	}{
		{"no hedge wins: Probe", 0, 0.01},
		{"one hedge in 20 wins, half of MinWinRate: 2 × Probe", 20, 0.02},
		{"one hedge in 40 wins, a quarter of MinWinRate: 4/3 × Probe", 40, 0.01 / 0.75},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := &hedge.WinRateBudget{}
			ctx := context.Background()
			const warm, calls = 10_000, 90_000
			granted, measured := 0, 0
			for i := range warm + calls {
				b.Allow(ctx, 0)
				if b.Allow(ctx, 1) {
					if granted++; tt.win > 0 && granted%tt.win == 0 {
						b.Done(ctx, 1, hedge.Accept)
					} else {
						b.Done(ctx, 1, hedge.Canceled)
					}
					if i >= warm {
						measured++
					}
				}
			}
			if got := float64(measured) / calls; math.Abs(got-tt.want) > 25.0/calls {
				t.Errorf("%.5f hedges per call, want %.5f", got, tt.want)
			}
		})
	}
}

// Keys have credits of their own, up to MaxKeys; keys past it share the
// overflow credit. Without Key, every call shares one.
func TestWinRateBudgetKeys(t *testing.T) {
	b := &hedge.WinRateBudget{Key: routeOf, Burst: 2, MaxKeys: 2}
	grant := func(path string) string { return winRateScript(b, onRoute(path), "h") }
	credits := func() map[string]float64 {
		m := map[string]float64{}
		for _, p := range []string{"/a", "/b", "/c", "/d", "/e"} {
			m[p] = b.Credit(onRoute(p))
		}
		return m
	}
	if diff := cmp.Diff(map[string]float64{"/a": 2, "/b": 2, "/c": 2, "/d": 2, "/e": 2}, credits()); diff != "" {
		t.Errorf("before any hedge (-want +got)\n%s", diff)
	}
	got := grant("/a") + grant("/a") + grant("/a") + grant("/b")
	if got != "++-+" {
		t.Errorf("/a three times, then /b: %q, want ++-+", got)
	}
	// /c and /d come third and fourth: they share the overflow credit,
	// as does /e, which was never asked.
	got = grant("/c") + grant("/d") + grant("/c")
	if got != "++-" {
		t.Errorf("/c, /d, /c past MaxKeys: %q, want ++-", got)
	}
	if diff := cmp.Diff(map[string]float64{"/a": 0, "/b": 1, "/c": 0, "/d": 0, "/e": 0}, credits()); diff != "" {
		t.Errorf("credits (-want +got)\n%s", diff)
	}
	b.Done(onRoute("/e"), 1, hedge.Accept)
	if c := b.Credit(onRoute("/c")); c != 2 {
		t.Errorf("a win on /e left the overflow credit at %v, want 2", c)
	}

	one := &hedge.WinRateBudget{Burst: 2} // no Key: one credit
	got = winRateScript(one, onRoute("/a"), "h") + winRateScript(one, onRoute("/b"), "h") + winRateScript(one, onRoute("/c"), "h")
	if got != "++-" {
		t.Errorf("without Key, /a, /b, /c: %q, want ++-", got)
	}
}

// A known key's Allow and Done, taken by every call, allocate nothing.
func TestWinRateBudgetAllocations(t *testing.T) {
	for name, c := range map[string]*hedge.WinRateBudget{"one key": {}, "per route": {Key: routeOf}} {
		b := c
		ctx := onRoute("/a")
		n := testing.AllocsPerRun(1000, func() {
			b.Allow(ctx, 0)
			if b.Allow(ctx, 1) {
				b.Done(ctx, 1, hedge.Accept)
			}
			if b.Allow(ctx, 1) {
				b.Done(ctx, 1, hedge.Canceled)
			}
			b.Done(ctx, 0, hedge.Accept)
		})
		if n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

// The credit is exact under contention: whatever the interleaving, the
// budget grants what a sequential run would, never one more.
func TestBudgetContentionWinRate(t *testing.T) {
	ctx := context.Background()
	t.Run("64 goroutines race for 50 hedges", func(t *testing.T) {
		for round := range 200 {
			b := &hedge.WinRateBudget{Burst: 50}
			var granted atomic.Int64
			budgetRace(budgetRacers, func(int) {
				if b.Allow(ctx, 1) {
					granted.Add(1)
				}
			})
			if g, c := granted.Load(), b.Credit(ctx); g != 50 || c != 0 {
				t.Fatalf("round %d: %d granted, %v left; want 50 and 0", round, g, c)
			}
		}
	})
	t.Run("calls, wins and releases add up exactly, then buy exactly that many hedges", func(t *testing.T) {
		for round := range 50 {
			b := &hedge.WinRateBudget{Burst: 1000}
			for range 1000 {
				b.Allow(ctx, 1)
			}
			// 64 × 100 calls at 0.01, 64 wins at 10 and 64 releases: 64 +
			// 640 + 64 hedges, below Burst, so no interleaving clips.
			budgetRace(budgetRacers, func(int) {
				for range 100 {
					b.Allow(ctx, 0)
				}
				b.Done(ctx, 1, hedge.Accept)
				b.Done(ctx, 1, hedge.Canceled)
				b.Release(ctx, 1)
			})
			if c := b.Credit(ctx); c != 768 {
				t.Fatalf("round %d: credit %v, want 768", round, c)
			}
			for range 100 { // a ring of losses: only the credit grants
				b.Done(ctx, 1, hedge.Canceled)
			}
			var granted atomic.Int64
			budgetRace(budgetRacers, func(int) {
				for range 20 { // 1280 asked for 768
					if b.Allow(ctx, 1) {
						granted.Add(1)
					}
				}
			})
			if g, c := granted.Load(), b.Credit(ctx); g != 768 || c != 0 {
				t.Fatalf("round %d: %d granted, %v left; want 768 and 0", round, g, c)
			}
		}
	})
	t.Run("AllOf gives back every grant another budget refused", func(t *testing.T) {
		b := &hedge.WinRateBudget{Burst: 10}
		all := hedge.AllOf(b, noHedges{})
		var granted atomic.Int64
		budgetRace(budgetRacers, func(int) {
			for range 10 {
				if all.Allow(ctx, 1) {
					granted.Add(1)
				}
			}
		})
		if g, c := granted.Load(), b.Credit(ctx); g != 0 || c != 10 {
			t.Fatalf("%d granted, credit %v; want 0 and still 10", g, c)
		}
	})
	t.Run("Burst caps the credit whatever the interleaving", func(t *testing.T) {
		b := &hedge.WinRateBudget{Burst: 5}
		budgetRace(budgetRacers, func(i int) {
			for range 100 {
				if b.Allow(ctx, 1) && i%2 == 0 {
					b.Done(ctx, 1, hedge.Accept)
				}
				b.Allow(ctx, 0)
			}
		})
		budgetRace(budgetRacers, func(int) { b.Done(ctx, 1, hedge.Accept) })
		if c := b.Credit(ctx); c != 5 {
			t.Fatalf("after 64 wins: credit %v, want Burst, 5", c)
		}
	})
}

// winRateCall is what one call through Do did.
type winRateCall struct {
	Attempts, Winner int
	Took             time.Duration
}

// runWinRate makes calls [from, to) one after another through Do in the
// current synctest bubble. Call i's attempt k takes latency(i, k) and
// answers k, so that the answer names the winner.
func runWinRate(p hedge.Policy[int], from, to int, latency func(i, k int) time.Duration) []winRateCall {
	var out []winRateCall
	for i := from; i < to; i++ {
		var started atomic.Int64
		start := time.Now()
		winner, err := hedge.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			started.Add(1)
			k := hedge.Attempt(ctx)
			return k, lab.Wait(ctx, latency(i, k))
		})
		took := time.Since(start)
		if err != nil {
			panic(fmt.Sprintf("call %d: %v", i, err))
		}
		synctest.Wait() // the loser has returned, and with it its Done
		out = append(out, winRateCall{int(started.Load()), winner, took})
	}
	return out
}

// winRateSummary is a block of calls: attempts per call, the share of
// calls that hedged and won with a hedge, and p99.
type winRateSummary struct {
	Amp, Hedged, Won float64
	P99              time.Duration
}

func summarizeWinRate(calls []winRateCall) winRateSummary {
	var attempts, hedged, won int
	lat := make([]time.Duration, len(calls))
	for i, c := range calls {
		attempts += c.Attempts
		if c.Attempts > 1 {
			hedged++
		}
		if c.Winner > 0 {
			won++
		}
		lat[i] = c.Took
	}
	slices.Sort(lat)
	n := float64(len(calls))
	return winRateSummary{float64(attempts) / n, float64(hedged) / n, float64(won) / n, lab.NearestRank(lat, 0.99)}
}

func (s winRateSummary) String() string {
	return fmt.Sprintf("%.4f attempts per call, %.1f%% hedged, %.1f%% won by a hedge, p99 %v",
		s.Amp, 100*s.Hedged, 100*s.Won, s.P99)
}

// correlated9010 is the 90/10 upstream with the slowness in the request:
// every attempt of call i takes what its primary takes, so a hedge never
// wins. independent9010 draws each attempt's latency on its own, so a hedge
// after 50ms wins nine times in ten.
func correlated9010(i, _ int) time.Duration  { return lab.FastSlow.Latency(i, 0) }
func independent9010(i, k int) time.Duration { return lab.FastSlow.Latency(i, k) }

// Through the real Do, on the 90/10 upstream hedged after 50ms: while
// every attempt of a slow call is slow, hedges cannot win, and after 1,000
// calls of warm-up the budget holds hedging to 1% of calls, where the same
// policy without it hedges 10%. When the upstream turns independent, just
// after a probe hedge spent the credit, the next probe hedge wins and
// hedging is back: the 2,000 calls after the 2,000 that follow the switch
// go exactly as without the budget, every call's attempts, winner and
// latency alike.
func TestWinRateBudgetThroughDo(t *testing.T) {
	const warm, block = 1000, 2000
	synctest.Test(t, func(t *testing.T) {
		budget := &hedge.WinRateBudget{}
		with := hedge.Policy[int]{Delay: hedge.Fixed(50 * ms), Budget: budget}
		without := hedge.Policy[int]{Delay: hedge.Fixed(50 * ms)}

		runWinRate(with, 0, warm, correlated9010)
		futile := summarizeWinRate(runWinRate(with, warm, warm+block, correlated9010))
		futileFree := summarizeWinRate(runWinRate(without, warm, warm+block, correlated9010))
		t.Logf("hedges cannot win, with the budget:    %v", futile)
		t.Logf("hedges cannot win, without the budget: %v", futileFree)
		if futile.Amp > 1.03 || futile.Won != 0 {
			t.Errorf("hedges cannot win: %v; want at most 1.03 attempts per call and no win", futile)
		}
		if futileFree.Amp < 1.08 {
			t.Errorf("without the budget: %v; want the policy to hedge about 10%% of calls", futileFree)
		}

		// Switch right after a probe hedge, when the credit is nearly
		// empty: the slowest start for the recovery.
		switched := warm + block
		for runWinRate(with, switched, switched+1, correlated9010)[0].Attempts == 1 {
			if switched++; switched == warm+2*block {
				t.Fatalf("no probe hedge in %d calls", block)
			}
		}
		switched++
		recovering := runWinRate(with, switched, switched+block, independent9010)
		recoveringFree := runWinRate(without, switched, switched+block, independent9010)
		first := slices.IndexFunc(recovering, func(c winRateCall) bool { return c.Winner > 0 })
		last := len(recovering) - 1
		for last >= 0 && recovering[last] == recoveringFree[last] {
			last--
		}
		t.Logf("after the switch, the first hedge won at call %d, and every call from %d on went as without the budget", first, last+1)
		if first < 0 {
			t.Fatalf("no hedge won in the %d calls after the switch", block)
		}
		after := switched + block
		got := runWinRate(with, after, after+block, independent9010)
		want := runWinRate(without, after, after+block, independent9010)
		t.Logf("hedges win, with the budget:    %v", summarizeWinRate(got))
		t.Logf("hedges win, without the budget: %v", summarizeWinRate(want))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the block after recovery, calls with the budget (-without +with)\n%s", diff)
		}
	})
}

// While hedges win, the budget changes nothing: on the independent 90/10
// upstream, one hedge after 50ms or two every 45ms, every call's attempts,
// winner and latency are those of the same policy without it.
func TestWinRateBudgetInvisibleWhileHedgesWin(t *testing.T) {
	for name, p := range map[string]hedge.Policy[int]{
		"one hedge after 50ms":  {Delay: hedge.Fixed(50 * ms)},
		"two hedges every 45ms": {Delay: hedge.Fixed(45 * ms), MaxAttempts: 3},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				want := runWinRate(p, 0, 5000, independent9010)
				p.Budget = &hedge.WinRateBudget{}
				got := runWinRate(p, 0, 5000, independent9010)
				t.Logf("with the budget: %v", summarizeWinRate(got))
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("calls with the budget (-without +with)\n%s", diff)
				}
			})
		})
	}
}
