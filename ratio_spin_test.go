package hedge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
)

// countingClock is a Mock that panics with errSpin when one budget call
// reads it more than spinReads times: on a Mock, a call that spins never
// returns, and each turn of its loop reads the clock.
type countingClock struct {
	*clock.Mock
	reads int
}

const spinReads = 100

var errSpin = fmt.Errorf("the budget read the clock %d times in one call: it spins", spinReads)

func (c *countingClock) Now() time.Time {
	c.reads++
	if c.reads > spinReads {
		panic(errSpin)
	}
	return c.Mock.Now()
}

// ratioPlay drives a RatioBudget of ratio and minPerSecond, both in
// thousandths, beside the model of its bound, one call at a time; every
// answer must be the model's, and no call may spin.
type ratioPlay struct {
	t     *testing.T
	clk   *countingClock
	b     *hedge.RatioBudget
	m     *ratioModel
	start time.Time
	name  string // the parameters
}

func newRatioPlay(t *testing.T, ratio, perSec int64, window time.Duration) *ratioPlay {
	t.Helper()
	clk := &countingClock{Mock: clock.NewMock()}
	b := &hedge.RatioBudget{Ratio: float64(ratio) / 1000, MinPerSecond: float64(perSec) / 1000, Window: window, Clock: clk}
	w := int64(window / time.Second)
	if ratio == 0 {
		ratio = 100 // a Ratio of 0 means 0.1
	}
	m := &ratioModel{ratio: ratio, reserve: perSec * w, window: w, calls: map[int64]int64{}, extras: map[int64]int64{}}
	startNow(t, b)
	name := fmt.Sprintf("RatioBudget(%d/1000, %d/1000, %v)", ratio, perSec, window)
	return &ratioPlay{t: t, clk: clk, b: b, m: m, start: clk.Mock.Now(), name: name}
}

func (p *ratioPlay) second() int64 { return int64(p.clk.Mock.Now().Sub(p.start) / time.Second) }

func (p *ratioPlay) wait(d time.Duration) { p.clk.Mock.Add(d) }

// bounded runs one call of the budget, failing the test if it spins.
func (p *ratioPlay) bounded(what string, f func()) (ok bool) {
	p.t.Helper()
	p.clk.reads = 0
	defer func() {
		if v := recover(); v != nil {
			if v != errSpin {
				panic(v)
			}
			p.t.Errorf("%s, second %d, %s: %v", p.name, p.second(), what, v)
		}
	}()
	f()
	return true
}

func (p *ratioPlay) call() bool {
	p.t.Helper()
	return p.bounded("Allow(0)", func() {
		p.b.Allow(context.Background(), 0)
		p.b.Done(context.Background(), 0, hedge.Accept)
	}) && p.countCall()
}

func (p *ratioPlay) countCall() bool { p.m.calls[p.second()]++; return true }

// hedge asks for a hedge and, if release, gives a granted one back at
// once. It reports whether the budget granted it, and false after a
// failure.
func (p *ratioPlay) hedge(release bool) (granted bool) {
	p.t.Helper()
	now := p.second()
	if !p.bounded("Allow(1)", func() { granted = p.b.Allow(context.Background(), 1) }) {
		return false
	}
	if want := p.m.allow(now); granted != want {
		p.t.Errorf("%s, second %d: Allow(1) = %t, the model says %t", p.name, now, granted, want)
		return false
	}
	switch {
	case granted && release:
		p.m.extras[now]--
		p.bounded("Release(1)", func() { p.b.Release(context.Background(), 1) })
	case granted:
		p.bounded("Done(1)", func() { p.b.Done(context.Background(), 1, hedge.Canceled) })
	}
	return granted && !p.t.Failed()
}

// owe plays a two-second window into owing exactly one thousandth of an
// attempt when it opens second 2, when the parameters allow it: one call
// in second 0; n1 calls in second 1, then hedges until refused, which
// spend the call of second 0 too; then second 0 leaves the window. That
// debt was the marker of a sealed slot, and every later call spun on it.
// It reports whether the debt was reachable.
func (p *ratioPlay) owe() (reachable bool) {
	p.t.Helper()
	reserve := p.m.reserve
	n1 := int64(1000)
	for n := int64(1); n <= 1000; n++ {
		if (reserve+n*p.m.ratio)%1000 == 999 {
			n1, reachable = n, true
			break
		}
	}
	p.call()
	p.wait(time.Second)
	for range n1 {
		p.call()
	}
	for p.hedge(false) {
	}
	for range 3 { // the debt, then the seconds after it
		p.wait(time.Second)
		if !p.call() {
			return reachable
		}
		p.hedge(false)
	}
	return reachable
}

// Every ratio and every minimum in steps of 0.001 up to 1: no balance a
// slot can reach stops the budget, and it grants what its bound says.
func TestRatioBudgetNeverSpins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // Mock.Add yields with a sleep
		reached := 0
		for ratio := int64(1); ratio <= 1000 && !t.Failed(); ratio++ {
			if newRatioPlay(t, ratio, 0, 2*time.Second).owe() {
				reached++
			}
		}
		for perSec := int64(1); perSec <= 1000 && !t.Failed(); perSec++ {
			if newRatioPlay(t, 1, perSec, 2*time.Second).owe() {
				reached++
			}
		}
		// Ratios that share no factor with 1000 reach the debt with no
		// reserve; every minimum reaches it at a ratio of 0.001.
		if want := 400 + 1000; reached != want && !t.Failed() {
			t.Errorf("%d parameters reached a debt of 0.001, want %d", reached, want)
		}
	})
}

// playRatio plays data as a sequence of calls, hedges, released hedges
// and clock steps against the model, on parameters it takes from the
// first bytes.
func playRatio(t *testing.T, data []byte) {
	at := func(i int) int64 {
		if i < len(data) {
			return int64(data[i])
		}
		return 0
	}
	ratio := (at(0)<<8 | at(1)) % 1201 // up to 1.2, past 1 too
	perSec := (at(2)<<8 | at(3)) % 1201
	window := time.Duration(1+at(4)%4) * time.Second
	p := newRatioPlay(t, ratio, perSec, window)
	for _, op := range data[min(5, len(data)):] {
		if t.Failed() {
			return
		}
		switch arg := time.Duration(op >> 3); op & 7 {
		case 0:
			p.wait(arg * 40 * time.Millisecond) // up to 1.24s
		case 1:
			p.wait(arg * window / 8) // up to four windows
		case 2, 3, 4:
			p.call()
		case 5, 6:
			p.hedge(false)
		case 7:
			p.hedge(true)
		}
	}
}

// Random sequences of calls, hedges and released hedges, on parameters of
// every step of 0.001 up to 1.2, answer as the model does.
func TestRatioBudgetRandomSequences(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(17, 3))
		for ratio := range 1201 {
			data := []byte{byte(ratio >> 8), byte(ratio), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(4))}
			for range 300 {
				data = append(data, byte(rng.IntN(256)))
			}
			if playRatio(t, data); t.Failed() {
				t.Fatalf("sequence %x", data)
			}
		}
	})
}

func FuzzRatioBudget(f *testing.F) {
	// Ratio 1/3, no minimum, a two-second window: a call, then three calls
	// and a hedge in the next second, owe 0.001 when the first leaves.
	f.Add([]byte{1, 77, 0, 0, 1, 2, 200, 2, 2, 2, 5, 200, 2, 5})
	f.Add([]byte{0, 1, 0, 7, 3, 2, 2, 5, 7, 8, 2, 5, 5, 200, 2, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) { playRatio(t, data) })
	})
}
