package hedge

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Planner is a Delay that plans the hedging of a call from the latency it
// has learned: given an extra-load budget, it picks the delay, and how
// many hedges to send, that minimise a target quantile of the call's
// latency. It computes in-process what the best fixed delay chosen in
// hindsight would have been, assuming attempts are independent.
//
// On an upstream that answers 90 % of requests in 20–45ms and 10 % in
// 450–600ms, one hedge at any delay leaves p99 near 450ms: the 1 % of
// calls whose two attempts are both slow. Two hedges about 45ms apart
// bring it near 110ms for about 11 % more attempts. Planner finds that
// second plan by itself when Load allows it.
//
// It learns like Percentile: primaries that answered are latencies,
// primaries that lost are lower bounds, and it estimates the latency
// distribution from both (Kaplan–Meier). Beyond the longest latency it
// has seen answered, it assumes the tail stays as heavy as its last
// estimate: where it cannot see, it plans as if slow calls stay slow.
// It replans every Window/2 samples, on the goroutine of the call that
// brings the sample (about 25µs); between plans a call costs two atomic
// adds. A plan assumes attempts are independent, and after a sudden
// slowdown, or under queueing, the plan made before would spend more than
// it predicted; Next counts what is spent and holds it to about 1.2 ×
// Load in any 1,000 calls (in a test where every latency tripled, the
// first Window of calls after it ran at 1.18 attempts per call for a Load
// of 0.15, where it ran at 1.96 without the count). Pair it with a
// RatioBudget for a bound shared with retries. It learns (see Delay), and
// is safe for concurrent use; its fields are read once, on first use. A
// Policy whose MaxAttempts is 0 follows the Planner: up to 1+MaxHedges
// attempts. A MaxAttempts from 2 to MaxHedges would cut every plan of
// more hedges, so Do rejects it; 1 still turns hedging off.
//
// Do reports a bad setting as an error wrapping ErrInvalidPolicy from
// every call, without calling fn.
type Planner struct {
	// Load is the extra-load budget: the plan's expected extra attempts
	// per call stay at most Load. 0 means 0.1; at most MaxHedges.
	Load float64
	// Target is the quantile of the call's latency to minimise, in
	// (0, 1). 0 means 0.99.
	Target float64
	// MaxHedges bounds the hedges of a plan. 0 means 2; at most
	// MaxAttemptsLimit-1.
	MaxHedges int
	// Window is how many samples make one generation of what it
	// knows; it knows the last one to two. 0 means 2000.
	Window int
	// Floor and Ceiling bound the delay. 0 means 1ms and 10s.
	Floor, Ceiling time.Duration
	// Initial is the delay, with one hedge, before the first plan (after
	// Window/2 samples). 0 means Ceiling: no hedging before the upstream
	// is known, so the first plan sees its whole tail.
	Initial time.Duration

	state atomic.Pointer[plannerState]
}

// Plan is what a Planner chose: Hedges hedges, one every Delay, and what
// it expects of them under the distribution it learned.
type Plan struct {
	Delay  time.Duration
	Hedges int
	// Latency is the expected Target quantile of a call's latency, with
	// a safety margin: the quantile at which 20 % fewer calls are slower.
	Latency time.Duration
	// Load is the expected extra attempts per call.
	Load float64
	// HedgeRate is the expected share of calls that send a hedge, and
	// WinRate the share of those that a hedge wins.
	HedgeRate, WinRate float64
}

type plannerState struct {
	err           error
	load, target  float64
	maxHedges     int
	window, every uint64
	bounds

	plan atomic.Pointer[Plan] // read by every call
	_    [56]byte
	n    atomic.Uint64
	// credit is what the plans may still spend, in thousandths of an
	// attempt: every call adds Load as its primary starts, every extra
	// attempt takes one as it starts, and it never exceeds spendAhead.
	// Below one attempt, no hedge is scheduled.
	credit     atomic.Int64
	loadMilli  int64
	spendAhead int64
	done       [gens]histogram // primaries that answered, by latency
	cut        [gens]histogram // primaries that lost, by how long they had run
	mu         sync.Mutex      // one replan at a time
}

// Next returns the plan's delay for the first Hedges attempts, and -1
// (no further hedge) after them.
//
// The Planner counts the attempts Do starts: a call adds Load to what the
// plans may spend, and each extra attempt spends one. The plans assume
// attempts are independent; under queueing they are not, and a plan made
// before a burst of congestion would send more hedges than it predicted
// until the next plan. So no hedge is scheduled while the attempts
// started run more than 0.2 × Load × 1,000 calls ahead of Load per call:
// in any 1,000 calls the extra attempts stay within about 1.2 × Load per
// call.
func (p *Planner) Next(_ context.Context, k int) time.Duration {
	s := p.load()
	plan := s.plan.Load()
	if k >= plan.Hedges || s.credit.Load() < milli {
		return -1
	}
	return plan.Delay
}

// Plan returns the current plan.
func (p *Planner) Plan() Plan { return *p.load().plan.Load() }

// Current returns the delay of the current plan: -1 when it sends no
// hedge. It is what a metrics adapter reports as the route's delay.
func (p *Planner) Current() time.Duration { return p.Plan().Delay }

// Replan plans now from what the planner has learned, rather than at its
// next Window/2 samples, and returns the plan it uses from now on.
func (p *Planner) Replan() Plan {
	s := p.load()
	if s.err != nil {
		return *s.plan.Load()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	plan := s.replan(s.survival())
	s.plan.Store(&plan)
	return plan
}

// Curve returns what h hedges would do at each delay the planner weighs,
// from Floor to Ceiling, under what it has learned: the plans it chooses
// from, whatever their load. A tool shows the trade-off behind a plan with
// it; cmd/hedgeplan prints it.
func (p *Planner) Curve(h int) []Plan {
	s := p.load()
	if s.err != nil || h < 1 {
		return nil
	}
	surv := s.survival()
	q := 1 - (1-s.target)*margin
	var out []Plan
	for i := bucketOf(s.floor); i <= bucketOf(s.ceiling); i++ {
		out = append(out, s.evaluate(surv, q, s.candidate(i), h))
	}
	return out
}

// Learn records how long a primary ran, and replans every Window/2
// samples.
func (p *Planner) Learn(_ context.Context, primary time.Duration, complete bool) {
	if s := p.load(); s.err == nil {
		s.learn(primary, complete)
	}
}

// learn records a sample, and replans every Window/2 samples.
func (s *plannerState) learn(primary time.Duration, complete bool) {
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
	if (i+1)%s.every == 0 && s.mu.TryLock() {
		plan := s.replan(s.survival())
		s.plan.Store(&plan)
		s.mu.Unlock()
	}
}

func (p *Planner) validate(_ context.Context, maxAttempts int) (int, error) {
	s := p.load()
	if s.err != nil {
		return 0, s.err
	}
	if maxAttempts > 1 && maxAttempts <= s.maxHedges {
		return 0, fmt.Errorf("%w: MaxAttempts %d cuts the Planner's plans of up to %d hedges; leave it 0 to follow the Planner, or set MaxHedges", ErrInvalidPolicy, maxAttempts, s.maxHedges)
	}
	return 1 + s.maxHedges, nil
}

func (p *Planner) load() *plannerState { return loadState(&p.state, p.newState) }

func (p *Planner) newState() *plannerState {
	s := &plannerState{load: p.Load, target: p.Target, maxHedges: p.MaxHedges}
	if s.load == 0 {
		s.load = 0.1
	}
	if s.target == 0 {
		s.target = 0.99
	}
	if s.maxHedges == 0 {
		s.maxHedges = 2
	}
	window := p.Window
	if window == 0 {
		window = 2000
	}
	s.bounds, s.err = newBounds("Planner", p.Floor, p.Ceiling, p.Initial)
	switch {
	case math.IsNaN(s.target) || s.target <= 0 || s.target >= 1:
		s.err = fmt.Errorf("%w: Planner.Target %v is outside (0, 1)", ErrInvalidPolicy, p.Target)
	case s.maxHedges < 0 || s.maxHedges > MaxAttemptsLimit-1:
		s.err = fmt.Errorf("%w: Planner.MaxHedges %d is outside 0..%d", ErrInvalidPolicy, p.MaxHedges, MaxAttemptsLimit-1)
	case math.IsNaN(s.load) || s.load < 0 || s.load > float64(s.maxHedges):
		s.err = fmt.Errorf("%w: Planner.Load %v is outside [0, MaxHedges]", ErrInvalidPolicy, p.Load)
	case window < 2:
		s.err = fmt.Errorf("%w: Planner.Window %d is below 2", ErrInvalidPolicy, p.Window)
	}
	s.loadMilli = thousandthsDown(s.load)
	s.spendAhead = s.loadMilli * spendAheadCalls
	s.credit.Store(s.spendAhead)
	initial := Plan{Delay: s.initial, Hedges: 1}
	if s.err != nil {
		initial = Plan{Delay: -1}
	}
	s.plan.Store(&initial)
	s.window = uint64(max(window, 2))
	s.every = s.window / 2
	return s
}

// survival is the Kaplan–Meier estimate, from answered latencies (done)
// and lower bounds (cut), of the chance that a latency exceeds each
// bucket: surv[i] = P(latency beyond bucket i). Past the last bucket with
// samples at risk it stays at its last value.
type survival []float64

func newSurvival(done, cut []*histogram) survival {
	d, nd := snapshot(done...)
	c, nc := snapshot(cut...)
	atRisk := float64(nd + nc)
	surv := make(survival, numBuckets)
	s := 1.0
	for i := range numBuckets {
		if atRisk > 0 && d[i] > 0 {
			s *= 1 - float64(d[i])/atRisk
		}
		atRisk -= float64(d[i] + c[i])
		surv[i] = s
	}
	return surv
}

// at returns P(latency > x), spreading each bucket's share evenly over
// it: a delay inside a bucket, at the edge of a mode, must not count the
// whole bucket on one side.
func (s survival) at(x time.Duration) float64 {
	if x <= 0 {
		return 1
	}
	i := bucketOf(x)
	before := 1.0
	if i > 0 {
		before = s[i-1]
	}
	lo, hi := bucketLo(i), bucketHi(i)
	if x >= hi {
		return s[i]
	}
	return s[i] + (before-s[i])*float64(hi-x)/float64(hi-lo)
}

// quantile returns the q-quantile of a call that starts attempts at 0,
// d, 2d, … h·d: the least bucket midpoint t with
// P(every attempt still running at t) = Π S(t − j·d) ≤ 1−q, and ok false
// when no t within range gets there.
func (s survival) quantile(q float64, d time.Duration, h int) (time.Duration, bool) {
	tail := func(t time.Duration) float64 {
		p := 1.0
		for j := 0; j <= h; j++ {
			p *= s.at(t - time.Duration(j)*d)
		}
		return p
	}
	lo, hi := 0, numBuckets-1
	if tail(bucketMid(hi)) > 1-q {
		return bucketMid(hi), false
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if tail(bucketMid(mid)) <= 1-q {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return bucketMid(lo), true
}

// extra returns the expected extra attempts of a call that hedges h times
// every d: hedge j starts if no attempt has answered by j·d.
func (s survival) extra(d time.Duration, h int) float64 {
	if h == 0 {
		return 0
	}
	var sum float64
	for j := 1; j <= h; j++ {
		p := 1.0
		for i := 0; i < j; i++ {
			p *= s.at(time.Duration(j-i) * d)
		}
		sum += p
	}
	return sum
}

// margin shrinks the tail probability a plan must reach: a plan whose
// quantile sits on a step of the distribution (10 % slow calls: one hedge
// leaves exactly 1 % of calls with two slow attempts, the p99 itself) is
// decided by sampling noise, and the estimate of a tail of a few percent
// from a few thousand samples is good to about ±10 %.
const margin = 0.8

// survival estimates the latency distribution from the current and the
// previous generation.
func (st *plannerState) survival() survival {
	gen, _ := generation(max(st.n.Load(), 1)-1, st.window)
	prev := (gen + gens - 1) % gens
	return newSurvival(
		[]*histogram{&st.done[gen], &st.done[prev]},
		[]*histogram{&st.cut[gen], &st.cut[prev]})
}

// candidate is the delay a plan weighs for bucket i: its midpoint, but
// Floor and Ceiling themselves at the ends.
func (st *plannerState) candidate(i int) time.Duration {
	switch i {
	case bucketOf(st.floor):
		return st.floor
	case bucketOf(st.ceiling):
		return st.ceiling
	}
	return bucketMid(i)
}

// evaluate returns what h hedges every d do, at quantile q.
func (st *plannerState) evaluate(s survival, q float64, d time.Duration, h int) Plan {
	c := Plan{Delay: d, Hedges: h, Load: s.extra(d, h)}
	c.Latency, _ = s.quantile(q, d, h)
	c.HedgeRate, c.WinRate = s.rates(d, h)
	return c
}

// replan picks, within the load budget, the plan with the least expected
// target quantile, and among those within the buckets' resolution of it
// the cheapest. Ties are judged against the least latency, not pairwise,
// so that no chain of slightly cheaper plans walks away from it.
func (st *plannerState) replan(s survival) Plan {
	return st.replanWithin(s, st.load, planTie, st.maxHedges)
}

// planTie is how much above the least expected latency a cheaper plan may
// be and still be chosen: the buckets' resolution, about.
const planTie = 1.02

// replanWithin is replan for a budget of load extra attempts per call and
// plans of at most hedges hedges, taking the cheapest plan within tie ×
// the least latency.
func (st *plannerState) replanWithin(s survival, load, tie float64, hedges int) Plan {
	q := 1 - (1-st.target)*margin
	none := st.evaluate(s, q, -1, 0)
	least := none.Latency
	var cands []Plan
	lo, hi := bucketOf(st.floor), bucketOf(st.ceiling)
	for h := 1; h <= min(hedges, st.maxHedges); h++ {
		center, centerLat := -1, time.Duration(math.MaxInt64)
		consider := func(i int) {
			d := st.candidate(i)
			if s.extra(d, h) > load {
				return
			}
			c := Plan{Delay: d, Hedges: h, Load: s.extra(d, h)}
			c.Latency, _ = s.quantile(q, d, h)
			cands = append(cands, c)
			least = min(least, c.Latency)
			if c.Latency < centerLat {
				center, centerLat = i, c.Latency
			}
		}
		// Coarse, then fine around this hedge count's best coarse delay.
		const stride = 4
		for i := lo; i <= hi; i += stride {
			consider(i)
		}
		if center >= 0 {
			c := center
			for i := max(lo, c-stride); i <= min(hi, c+stride); i++ {
				consider(i)
			}
		}
	}
	best := none
	if float64(none.Latency) > float64(least)*tie {
		best = Plan{Load: math.Inf(1)}
	}
	for _, c := range cands {
		if float64(c.Latency) <= float64(least)*tie && c.Load < best.Load {
			best = c
		}
	}
	best.HedgeRate, best.WinRate = s.rates(best.Delay, best.Hedges)
	return best
}

// rates returns the chance that a call sends its first hedge, and the
// chance that a hedged call is won by a hedge rather than its primary.
func (s survival) rates(d time.Duration, h int) (hedgeRate, winRate float64) {
	if h < 1 {
		return 0, 0
	}
	hedged := s.at(d)
	if hedged == 0 {
		return 0, 0
	}
	// The primary wins a hedged call when it answers at some t > d before
	// every hedge started by then.
	var primaryWins float64
	for i := bucketOf(d); i < numBuckets; i++ {
		lo, hi := max(bucketLo(i), d), bucketHi(i)
		f := s.at(lo) - s.at(hi) // the chance that the primary answers in (lo, hi]
		if f <= 0 || hi <= d {
			continue
		}
		t := lo + (hi-lo)/2
		for j := 1; j <= h && time.Duration(j)*d < t; j++ {
			f *= s.at(t - time.Duration(j)*d)
		}
		primaryWins += f
	}
	return hedged, 1 - primaryWins/hedged
}
