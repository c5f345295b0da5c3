package hedge

import "time"

// How a key of an Adaptive learns: as a Planner does, from the primaries'
// latencies in generations of adaptiveSamples, replanning every half
// generation; and, unlike a Planner, it watches for the latencies to
// leave what its plan was made from.
//
// A plan is made from the last 500 to 1,000 primaries. When the upstream
// changes (an overload fills every queue, a new build halves every
// latency, an overload drains), those samples describe an upstream that
// is gone: a plan made from them hedges too early, adding load where
// queues grow, or too late, or not at all, until the old samples have
// left. So each key keeps the share of recent primaries slower than the
// plan's p75, a moving average over about 64 of them, which sits near
// 0.25 while the plan's picture holds.
//
// When it leaves [changeLow, changeHigh], the key sends no hedge and
// makes no plan from what it sees: above, most calls are slower than the
// plan expects, as when queues grow, and hedges would deepen them. A
// burst of slow calls passes within a few dozen calls. When the share
// stays out for strayLimit primaries in a row, the upstream has changed:
// the key forgets what it learned and plans again from the primaries that
// come after. Either way, hedges go out again only once calmCalls
// primaries in a row have matched the plan: while latencies keep drifting
// (a queue that keeps growing), each new plan finds them changed again,
// and the key stays unhedged.
//
// A slowdown of one replica of four moves a quarter of the calls: the
// share stays near 0.44, and the plan goes on hedging around it.

// The moving share of primaries slower than the plan's p75, in units of
// 1/shareOne: its weight per sample is 1/2^shareShift.
const (
	shareOne    = 1 << 20
	shareShift  = 6
	shareStart  = shareOne / 4
	changeHigh  = shareOne * 7 / 10
	changeLow   = shareOne / 20
	strayLimit  = 150
	calmCalls   = 250
	planQuarter = 0.25 // the share of the plan's samples above its p75
)

// learn records how long a primary ran. Every Window/2 samples it plans
// again, unless recent primaries have left the plan's picture; when they
// stay out of it for long, it forgets and starts over.
func (k *adaptiveKey) learn(primary time.Duration, complete bool) {
	s := k.plan
	if k.stray(primary, complete) && s.mu.TryLock() {
		k.forget()
		s.mu.Unlock()
		return
	}
	i := s.n.Add(1) - 1
	gen, fresh := generation(i, s.window)
	if fresh {
		s.done[(gen+1)%gens].reset()
		s.cut[(gen+1)%gens].reset()
	}
	if complete {
		s.done[gen].add(primary)
	} else {
		s.cut[gen].add(primary)
	}
	if (i+1)%s.every == 0 && k.strays.Load() == 0 && s.mu.TryLock() {
		k.replan()
		s.mu.Unlock()
	}
}

// stray moves the share of primaries slower than the plan's p75 by one
// sample, and reports whether it has been out of [changeLow, changeHigh]
// for strayLimit samples. A primary cut off before the p75 says nothing
// either way.
func (k *adaptiveKey) stray(primary time.Duration, complete bool) bool {
	p75 := time.Duration(k.p75.Load())
	if p75 <= 0 || (!complete && primary < p75) {
		return false // no plan yet, or nothing to tell
	}
	var x int64
	if primary >= p75 {
		x = shareOne
	}
	for {
		v := k.share.Load()
		n := v + (x-v)>>shareShift
		if !k.share.CompareAndSwap(v, n) {
			continue
		}
		if n <= changeHigh && n >= changeLow {
			k.strays.Store(0)
			k.calm.Add(1)
			return false
		}
		k.calm.Store(0)
		return k.strays.Add(1) >= strayLimit
	}
}

// unsettled reports whether the recent primaries have not matched the
// plan's picture for long enough to hedge: for calmCalls in a row since
// they last strayed from it, or since the plan.
func (k *adaptiveKey) unsettled() bool {
	return k.calm.Load() < calmCalls
}

// replan plans from what the key has learned since it last forgot. The
// first plan after it forgot starts the watch afresh; later ones move the
// p75 it watches by, but not the share, which tells whether they still
// hold. Called with k.plan.mu held.
func (k *adaptiveKey) replan() {
	surv := k.plan.survival()
	budget := k.budget()
	plan := k.plan.replanWithin(surv, budget, planTie, k.s.hedges)
	if more := k.unspent(*k.plan.plan.Load()); more > 0 && plan.Hedges == 1 {
		if p := k.plan.replanWithin(surv, budget+more, planTie, 1); float64(p.Delay) >= nudge*float64(plan.Delay) {
			plan = p
		}
	}
	p75 := int64(surv.quantileAt(1 - planQuarter))
	old := k.p75.Swap(p75)
	if old == 0 {
		k.share.Store(shareStart)
		k.strays.Store(0)
		k.calm.Store(0)
	} else if (4*p75 > 5*old || 5*p75 < 4*old) && !k.winsClearly() {
		k.calm.Store(0) // the picture moved, and hedges do not clearly pay
	}
	k.plan.plan.Store(&plan)
}

// budget is the extra attempts per call that a new plan may spend:
// Load while the bound holds at least half of what it may save, and down
// to 0.8 × Load as it empties, so that the bound fills again after a
// disturbance drew on it. A plan that spent all of Load would leave it
// empty, and then every burst of slow calls would find their hedges
// refused.
func (k *adaptiveKey) budget() float64 {
	return k.s.load * (0.8 + 0.4*min(k.fill(), 0.5))
}

// fill is the share of what it may save that the bound holds, in [0, 1].
func (k *adaptiveKey) fill() float64 {
	return min(float64(k.bound.Load())/float64(k.s.boundMax), 1)
}

// unspent is what a plan of one hedge may spend on top of budget, in
// extra attempts per call: Load × the share of the bound it holds past
// three quarters full (up to 0.25 × Load), while hedges win at least 9/10
// as often as the plan expects of them. A plan's count of what it will
// spend is an estimate: off by the resolution of its histograms, by
// hedges that start later than their delay (a busy machine's timers fire
// late, and fewer calls are still running by then), by the spread of a
// few hundred calls. The bound counts what was spent; while it holds more
// than three quarters, what earlier plans left unspent buys an earlier
// hedge, until the plans spend about Load, and a quarter of the bound is
// kept for the next burst of slow calls. Where hedges win less often than
// planned (attempts queue alike, or the slowness belongs to the request),
// an earlier one would pay for less still. A plan of two hedges gets
// nothing more: the bound's swings must not buy a plan that Load cannot
// keep up.
func (k *adaptiveKey) unspent(plan Plan) float64 {
	fill := k.fill()
	if fill <= 0.75 || plan.Hedges != 1 {
		return 0
	}
	n := min(k.win.judged.Load(), uint64(k.s.win.samples))
	if n < k.s.win.first || float64(k.win.wins.Load()) < 0.9*plan.WinRate*float64(n) {
		return 0
	}
	return k.s.load * (fill - 0.75)
}

// nudge is the least share of a plan's delay that what is unspent may move
// its hedge to. Where the latencies are smooth, spending a fifth more
// moves the delay by a few percent; where a gap separates fast calls from
// slow ones, a little more to spend moves it across the gap, to a hedge
// of every slow call whose p99 is decided by how many calls draw two slow
// attempts: luck, not an estimate's bias.
const nudge = 0.8

// forget drops what the key has learned, and sends no hedge until it has
// planned again. What the bound saved was saved on an upstream that is
// gone: when the calls turned slower (an overload, a slower build), it
// is set aside, as hedges into growing queues are what it must not pay
// for. When they turned faster (a brownout or an overload has passed),
// the upstream has room again, and the key keeps up to keptCalls calls'
// worth of what it holds or set aside. Hedges wait twice the plan's
// delay until the bound holds a tenth of what it may (see scarce), and
// plans spend less than Load, from 0.8 × Load when it is empty, until it
// holds half (see budget): starting from nothing, the key's hedges come
// late for some 500 calls, and the bound stays near that tenth for
// thousands, where an undisturbed key's holds half. What it keeps is
// never more than the bound would hold had it never been emptied, so the
// bound's limit over any n calls stands.
// Called with k.plan.mu held.
func (k *adaptiveKey) forget() {
	faster := k.share.Load() < changeLow
	s := k.plan
	for g := range gens {
		s.done[g].reset()
		s.cut[g].reset()
	}
	s.n.Store(0)
	k.p75.Store(0)
	k.share.Store(shareStart)
	k.strays.Store(0)
	k.calm.Store(0)
	if faster {
		if v := k.aside.Swap(0); v > k.bound.Load() {
			k.bound.Store(v) // the concurrent saves of a few calls are lost
		}
		k.keep(k.s.loadMilli * keptCalls)
	} else {
		k.aside.Store(max(k.aside.Load(), k.bound.Swap(0)))
	}
	k.plan.plan.Store(&noPlan)
}

// keptCalls is how many calls' worth of Load a key keeps when it forgets
// because its calls turned faster: half of what the bound must hold
// before hedges go out at the plan's delay again (see scarce).
const keptCalls = boundCalls / 20

// keep lowers the bound to at most most thousandths of an attempt.
func (k *adaptiveKey) keep(most int64) {
	for {
		v := k.bound.Load()
		if v <= most || k.bound.CompareAndSwap(v, most) {
			return
		}
	}
}

// noPlan is the plan of a key that is learning afresh: no hedge.
var noPlan = Plan{Delay: -1}

// quantileAt returns the least bucket edge beyond which at most 1−q of the
// latencies lie: the q-quantile of the distribution s estimates.
func (s survival) quantileAt(q float64) time.Duration {
	for i, p := range s {
		if p <= 1-q {
			return bucketHi(i)
		}
	}
	return bucketHi(numBuckets - 1)
}

// winsClearly reports whether at least half of the judged hedges won, out
// of enough of them to tell.
func (k *adaptiveKey) winsClearly() bool {
	n := min(k.win.judged.Load(), uint64(k.s.win.samples))
	return n >= k.s.win.first && 2*uint64(k.win.wins.Load()) >= n
}
