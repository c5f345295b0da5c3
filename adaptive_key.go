package hedge

import (
	"context"
	"sync/atomic"
	"time"
)

// adaptiveKey is the state of one key of an Adaptive: its plan, its
// bound, its win rate and its breaker, all reached with one lookup. Its
// methods are the Adaptive's hooks for a call of that key; Do calls them
// directly once it has looked the key up.
type adaptiveKey struct {
	s    *adaptiveState
	key  string
	plan *plannerState
	// bound is what extra attempts may still take, in thousandths of an
	// attempt: every call adds Load while the key may hedge, every extra
	// attempt takes one whole attempt or is refused, and it holds at most
	// boundCalls calls' worth.
	bound   atomic.Int64
	win     winCredit
	circuit circuit
	// The watch on the plan (see adaptive_learn.go): p75 is the p75 of
	// the samples of the current plan, in ns, 0 before the first; share
	// is the moving share of recent primaries slower than it, in
	// 1/shareOne; strays counts the primaries it has been out of bounds
	// for, and calm those it has matched the plan for, in a row.
	p75, share, strays, calm atomic.Int64
	// The calls' arrivals: when the last came, in ns since the state was
	// made, how many have, and the moving averages of the gaps between
	// them (see adaptive_surge.go).
	arrived, calls, gapShort, gapLong atomic.Int64
	// asked is the moving share of recent calls that asked for a hedge
	// (see stale).
	asked atomic.Int64
	// aside is what the bound held when the key last forgot because its
	// calls turned slower, in thousandths of an attempt (see forget).
	aside atomic.Int64
	// waitShare is the moving share of their time that recent primaries
	// spent waiting for a worker (see adaptive_tie.go).
	waitShare atomic.Int64
	// waitFloor is the least time to their start signal of recent
	// primaries, in ns (see adaptive_tie.go).
	waitFloor atomic.Int64
}

// boundCalls is how many calls' worth of Load a key may save up: over any
// n consecutive calls of a key, its extra attempts stay within Load × (n
// + boundCalls). When a replica browns out, the calls stuck on it want
// more hedges than Load per call; what quiet calls saved pays for them.
// Over 10,000 calls the bound is 1.1 × Load.
const boundCalls = 1000

func (s *adaptiveState) newKey(key string) *adaptiveKey {
	k := &adaptiveKey{s: s, key: key}
	// The settings are valid: newState checked Load.
	k.plan = (&Planner{Load: s.load, MaxHedges: s.hedges, Window: adaptiveSamples}).newState()
	k.plan.plan.Store(&noPlan) // no hedge before the upstream is known
	// The bound starts empty: the first hedges are paid for by the first calls.
	s.win.initCredit(&k.win)
	s.breaker.initCircuit(&k.circuit)
	return k
}

// Next returns the plan's delay for the first Hedges attempts, and -1
// after them, while the key's watch holds hedges back (see
// adaptive_learn.go and adaptive_surge.go), or while the breaker is
// open. While the bound is low (see scarce), it returns twice the plan's
// delay.
func (k *adaptiveKey) Next(_ context.Context, n int) time.Duration {
	plan := k.plan.plan.Load()
	if n >= plan.Hedges || k.unsettled() || k.quickening() || k.open() {
		return -1
	}
	if k.scarce() {
		return 2 * plan.Delay
	}
	return plan.Delay
}

// scarce reports whether the bound holds less than a tenth of what it
// may save: 100 calls' worth of Load. When a replica browns out, the
// calls stuck on it ask for hedges faster than Load pays for them, and
// each is granted while the bound lasts, in the order the calls reach
// the delay; once it runs dry, the calls that will be slowest of all
// find nothing left. Past twice the delay, the few hedges the bound can
// still pay for go to the calls that need them most, and the bound fills
// again meanwhile. (The plan learns of the brownout too, but only every
// 250 primaries, from samples of which the brownout is a part.)
func (k *adaptiveKey) scarce() bool {
	return k.bound.Load() < k.s.boundMax/10
}

// open reports whether the breaker is open and its cooldown not over: no
// hedge would be granted, so none is scheduled.
func (k *adaptiveKey) open() bool {
	return BreakerState(k.circuit.phase.Load()) == BreakerOpen && k.s.breaker.since() < k.circuit.reopen.Load()
}

// Learn records how long a primary ran, and replans every 250 samples,
// half a generation, or starts over when the upstream has changed.
func (k *adaptiveKey) Learn(_ context.Context, primary time.Duration, complete bool) {
	k.learn(primary, complete)
}

// Allow counts the call for its primary (n < 1): Load of an attempt for
// the bound, Probe of a hedge for the win rate. Extra attempt n (n ≥ 1)
// must pass the breaker, the win rate and the bound, in that order, the
// cheapest first; a grant that a later one refuses is given back.
func (k *adaptiveKey) Allow(_ context.Context, n int) bool {
	if primary(n) {
		if !k.unsettled() {
			k.save(k.s.loadMilli)
		}
		k.s.win.add(&k.win, k.s.win.probe)
		k.arrive()
		// Load and Store: a lost update moves an average by one call's weight.
		k.asked.Store(k.asked.Load() - k.asked.Load()>>askShift)
		return true
	}
	if n == 1 && k.stale() {
		return false
	}
	if !k.s.breaker.allow(&k.circuit) {
		return false
	}
	ok, took := k.s.win.take(&k.win, k.need())
	if ok && k.spend() {
		return true
	}
	if took {
		k.s.win.add(&k.win, milli)
	}
	k.s.breaker.release(&k.circuit, k.key)
	return false
}

// Done tells the breaker how attempt n ended, and the win rate how a
// hedge did. An extra attempt that failed at once, as a server that
// sheds hedges answers them, ran no race, but says the server has no
// room: the key holds its hedges back until 250 primaries in a row have
// matched its plan again.
func (k *adaptiveKey) Done(_ context.Context, n int, o Outcome) {
	k.s.breaker.done(&k.circuit, k.key, n, o)
	if primary(n) {
		return
	}
	k.s.win.done(&k.win, o, milli*milli/k.need())
	if o == Retryable || o == Failed {
		k.calm.Store(0)
	}
}

// minNeed is the least win rate, in thousandths, that need asks of
// hedges. Where every replica queues alike, hedges that win one time in
// four or five mostly win by cutting in line, and each one that runs to
// the end lengthens the queue for every call.
const minNeed = milli / 3

// need is the win rate, in thousandths, that hedges must keep up to go
// on unchecked: half of what the plan expects of them, and at least
// minNeed. The plan assumes attempts are independent; when the slowness
// belongs to the request, or every replica queues alike, a hedge wins
// far less often than planned, and pays for far less than the plan
// counted on.
func (k *adaptiveKey) need() int64 {
	return max(minNeed, int64(k.plan.plan.Load().WinRate*milli/2))
}

// Release gives back what a granted Allow(n), n ≥ 1, took.
func (k *adaptiveKey) Release(_ context.Context, n int) {
	if primary(n) {
		return
	}
	k.save(milli)
	k.s.win.add(&k.win, milli)
	k.s.breaker.release(&k.circuit, k.key)
}

// spend takes one attempt from the bound, if a whole one is left.
func (k *adaptiveKey) spend() bool {
	for {
		v := k.bound.Load()
		if v < milli {
			return false
		}
		if k.bound.CompareAndSwap(v, v-milli) {
			return true
		}
	}
}

// save adds d thousandths of an attempt to the bound, up to its most.
func (k *adaptiveKey) save(d int64) { add(&k.bound, d, k.s.boundMax) }

// add adds d to *v within [0, most], and returns the new value. A full or
// empty *v that d would push further costs only the load.
func add(v *atomic.Int64, d, most int64) int64 {
	for {
		o := v.Load()
		n := min(max(o+d, 0), most)
		if n == o || v.CompareAndSwap(o, n) {
			return n
		}
	}
}

// stale reports whether the plan no longer pays as it expected: recent
// calls ask for hedges more than half as often again as it expects, and
// fewer than half of its hedges win. A plan made while queues grow lags
// behind them: more calls outlast its delay every minute, and their
// hedges queue too. (A replica that browns out also sends more calls past
// the delay, but their hedges win.) Called for each first hedge asked
// for.
func (k *adaptiveKey) stale() bool {
	r := k.asked.Load()
	r += (askOne - r) >> askShift
	k.asked.Store(r)
	plan := k.plan.plan.Load()
	if float64(r) <= (1.5*plan.HedgeRate+0.01)*askOne {
		return false
	}
	n := min(k.win.judged.Load(), uint64(k.s.win.samples))
	return n >= k.s.win.first && 2*uint64(k.win.wins.Load()) < n
}

// asked is the moving share of calls that asked for a hedge, in units of
// 1/askOne, with a weight of 1/2^askShift per call.
const (
	askOne   = 1 << 20
	askShift = 6
)
