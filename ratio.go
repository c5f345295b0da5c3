package hedge

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// Bounds and defaults of RatioBudget's fields. A window shorter than a
// second cannot hold a one-second slot; one longer than a minute
// remembers an overload long after it is over. The other bounds keep
// every sum in an int64.
const (
	maxRatio        = 1000
	maxMinPerSecond = 1e6
	minWindow       = time.Second
	maxWindow       = time.Minute
	defaultRatio    = 0.1
	defaultWindow   = 10 * time.Second
)

// maxBalance bounds a slot's balance both ways, far from overflow. The
// cap above only ever grants less; the floor below forgives a debt of
// more than 10^15 attempts, which no service runs up.
const maxBalance = math.MaxInt64 / 4

// sealed marks a slot whose second is over: an Allow or Done that finds it
// moves on to the current slot, so nothing lands in a slot after its
// balance was read. It lies outside ±maxBalance, so no balance, debts
// included, can be taken for it.
const sealed = math.MinInt64

// RatioBudget bounds extra attempts to a fraction of calls, in the manner
// of Finagle's retry budget: every call deposits Ratio of an attempt when
// its primary starts (Allow(0)), every extra attempt withdraws a whole one
// (a granted Allow(k), k ≥ 1), and a reserve of MinPerSecond × Window lets
// a quiet service hedge now and then.
//
// Time is cut into one-second slots from the budget's first use; a window
// is a run of consecutive slots as long as Window. The bound holds in
// the window that ends at each grant: there, the extra attempts granted,
// this one included, never exceed Ratio × the calls deposited in it plus
// MinPerSecond × Window. Allow grants every attempt that keeps this true
// for the window that ends now, and no other. What a second leaves
// unspent carries over for the rest of the window, so a burst of slow
// calls may spend what the calls of the seconds before it deposited:
// hedges go to the calls that need them, not to the second that has
// credit. Hence a window that ends in a second without grants may hold
// more than its own calls fund: attempts granted early in it on the
// credit of seconds before it. A spent reserve stays spent for a whole
// window, and within one second the extra attempts may reach the
// window's whole credit.
//
// The zero value is ready: a tenth of an attempt per call over 10s, no
// reserve, real time, so that the tenth call of a window may hedge. The
// fields are read once, on first use, under the budget's lock; set them
// before. A field out of range is an error wrapping ErrInvalidBudget,
// which Policy.Validate and Do report; such a budget refuses every extra
// attempt. A RatioBudget is safe for concurrent use and must not be
// copied after first use. Allow and Done cost a clock reading and one
// compare-and-swap on a shared word; the first of them in a new second
// also takes a mutex to open its slot.
type RatioBudget struct {
	// Ratio is the share of an attempt each call deposits, in [0, 1000],
	// used to three decimals rounded down. 0 means 0.1: extra attempts
	// up to a tenth of the calls.
	Ratio float64
	// MinPerSecond is the reserve, in extra attempts per second of
	// Window granted without calls, in [0, 1e6], used to three decimals
	// rounded down. 0 means none.
	MinPerSecond float64
	// Window is how long the calls' deposits count, a whole number of
	// seconds from 1s to 60s. 0 means 10s.
	Window time.Duration
	// Clock is the time source. Nil means real time.
	Clock clock.Clock

	clk     clock.Clock // Clock, read on first use
	origin  time.Time
	credit  int64 // thousandths of an attempt each call deposits
	reserve int64 // thousandths of an attempt granted per window without calls
	cur     atomic.Pointer[ratioSlot]

	mu  sync.Mutex // held to read the fields, and to seal a slot and open the next
	err error      // the fields' error; guarded by mu, set once
	// Two slots take turns, so that opening one allocates nothing.
	slots [2]ratioSlot
	// nets holds the net deposit of the last len(nets) sealed seconds, a
	// ring whose newest entry is at head. Guarded by mu.
	nets []int64
	head int
}

// ratioSlot is the current second. Its balance is what Allow may still
// withdraw now: the reserve plus the net deposit of the window that ends
// now. Every deposit or withdrawal in this second changes it alike, so
// one atomic word tracks it exactly; only opening a slot needs the
// history.
type ratioSlot struct {
	second  atomic.Int64
	balance atomic.Int64 // thousandths of an attempt, or sealed
	opened  int64        // the balance when the slot opened; guarded by mu
}

// start reads the fields, on first use, and opens the first slot; it
// returns nil for fields out of range.
func (b *RatioBudget) start() *ratioSlot {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.cur.Load(); s != nil || b.err != nil {
		return s
	}
	ratio, perSecond, window := orDefault(b.Ratio, defaultRatio), b.MinPerSecond, orDefault(b.Window, defaultWindow)
	switch {
	case !(ratio >= 0 && ratio <= maxRatio): // and not NaN
		b.err = fieldError("RatioBudget.Ratio", "%v is outside [0, %d]", b.Ratio, maxRatio)
	case !(perSecond >= 0 && perSecond <= maxMinPerSecond):
		b.err = fieldError("RatioBudget.MinPerSecond", "%v is outside [0, %g]", perSecond, maxMinPerSecond)
	case window < minWindow || window > maxWindow || window%time.Second != 0:
		b.err = fieldError("RatioBudget.Window", "%v is not a whole number of seconds from %v to %v", b.Window, minWindow, maxWindow)
	}
	if b.err != nil {
		return nil
	}
	seconds := int64(window / time.Second)
	b.clk = b.Clock
	b.credit = thousandthsDown(ratio)
	b.reserve = thousandthsDown(perSecond) * seconds
	b.nets = make([]int64, seconds-1)
	b.origin = b.now()
	s := &b.slots[0]
	s.opened = b.reserve
	s.balance.Store(b.reserve)
	b.cur.Store(s)
	return s
}

func (b *RatioBudget) check() error {
	if b.cur.Load() != nil {
		return nil
	}
	b.start()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Allow grants extra attempt k (k ≥ 1) if withdrawing it keeps the bound,
// and withdraws it. For the primary (k < 1) it deposits the call's share
// and grants it.
func (b *RatioBudget) Allow(_ context.Context, k int) bool {
	if primary(k) {
		b.deposit()
		return true
	}
	s := b.slot()
	if s == nil { // fields out of range
		return false
	}
	for {
		v := s.balance.Load()
		switch {
		case v == sealed:
			s = b.slot()
		case v < milli:
			return false
		case s.balance.CompareAndSwap(v, v-milli):
			return true
		}
	}
}

// Done does nothing: calls deposit when they start, and extra attempts
// cost nothing on return, Allow already charged them. An attempt that
// ran and lost (Canceled) added its load, so it is not refunded.
func (b *RatioBudget) Done(_ context.Context, _ int, _ Outcome) {}

// Release refunds the attempt that a granted Allow(k), k ≥ 1, withdrew,
// for an attempt that never started: AllOf calls it when another budget
// refused the attempt. It does nothing for the primary (k < 1), whose
// call stays counted. The refund goes to the current second, so it undoes
// the withdrawal exactly when both fall in one second, as they do when
// AllOf makes them back to back. Should a second end in between, the
// refund lands in the new second, which may then grant one attempt more
// than its calls fund.
func (b *RatioBudget) Release(_ context.Context, k int) {
	if !primary(k) {
		b.add(milli)
	}
}

// deposit credits Ratio of an attempt for one call, whatever its outcome:
// every call counts, including those that fail.
func (b *RatioBudget) deposit() {
	if b.cur.Load() == nil && b.start() == nil {
		return // fields out of range
	}
	b.add(b.credit) // read once cur is set: start wrote it before
}

// add credits amount thousandths of an attempt to the current second.
func (b *RatioBudget) add(amount int64) {
	if amount == 0 {
		return
	}
	s := b.slot()
	for s != nil {
		v := s.balance.Load()
		if v == sealed {
			s = b.slot()
			continue
		}
		n := min(v+amount, maxBalance)
		if n <= v || s.balance.CompareAndSwap(v, n) {
			return
		}
	}
}

func (b *RatioBudget) now() time.Time {
	if b.clk == nil {
		return time.Now()
	}
	return b.clk.Now()
}

// slot returns the slot of the current second, opening it if need be, or
// nil for fields out of range. The slot may be sealed by the time the caller
// uses it; the caller then asks again. A slot of a later second than the
// caller's clock reading is as good: the caller is still running in that
// second.
func (b *RatioBudget) slot() *ratioSlot {
	s := b.cur.Load()
	if s == nil {
		if s = b.start(); s == nil {
			return nil
		}
	}
	sec := int64(b.now().Sub(b.origin) / time.Second)
	if s.second.Load() >= sec && s.balance.Load() != sealed {
		return s
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s = b.cur.Load()
	if s.second.Load() >= sec {
		return s
	}
	// Seal first: from here no withdrawal or deposit can land in s, so
	// its final balance is exact.
	b.push(s.balance.Swap(sealed) - s.opened)
	for range min(sec-s.second.Load()-1, int64(len(b.nets))) {
		b.push(0) // seconds without a single call
	}
	// The window that ends in the new slot holds the sealed seconds of the
	// ring and the new one, with nothing deposited yet. Its balance may be
	// below zero: attempts granted on the credit of seconds that have left
	// the window are still in it, and the new second's calls pay them back
	// before it grants more. A balance lies within ±maxBalance, so a net
	// lies within -maxBalance and 2 × maxBalance; the sum saturates at
	// ±maxBalance so that it never overflows.
	var sum int64
	for _, net := range b.nets {
		sum = clampBalance(sum + net)
	}
	balance := clampBalance(b.reserve + sum)
	n := &b.slots[0]
	if n == s {
		n = &b.slots[1]
	}
	n.second.Store(sec)
	n.opened = balance
	n.balance.Store(balance)
	b.cur.Store(n)
	return n
}

// clampBalance bounds a balance to ±maxBalance.
func clampBalance(v int64) int64 { return max(min(v, maxBalance), -maxBalance) }

// push records a sealed second's net deposit. Called with b.mu held.
func (b *RatioBudget) push(net int64) {
	if len(b.nets) == 0 {
		return
	}
	b.head = (b.head + 1) % len(b.nets)
	b.nets[b.head] = net
}
