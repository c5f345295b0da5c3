package hedge

import (
	"context"
	"math"
	"sync/atomic"
)

// Defaults of a WinRateBudget's zero fields.
const (
	defaultMinWinRate  = 0.1
	defaultProbe       = 0.01
	defaultBurst       = 20
	defaultWinSamples  = 100
	defaultWinRateKeys = 64
)

// Bounds of a WinRateBudget's fields: Burst far below where a sum of
// thousandths could overflow, Samples as a Breaker's.
const (
	maxWinRateBurst   = 1_000_000
	maxWinRateSamples = 1000
)

// WinRateBudget is a Budget that backs off, per route, when hedges stop
// winning. Hedging turns spare capacity into lower latency only while a
// duplicate can answer first. When the slowness belongs to the request, so
// that every attempt of a slow call is slow, or when the upstream is
// saturated and a duplicate queues behind the same work, hedges lose, and
// each one is pure extra load.
//
// It judges each hedge by how it ended: Accept is a win; Canceled (it
// lost the race), TimedOut and Terminal are losses. A hedge that failed
// (Retryable or Failed, as a server that sheds hedges answers them) ran
// no race, so it is not judged, and its credit comes back. A retry, which
// Do and retry loops ask for with Allow(ctx, k ≥ 1) too, is judged as a
// hedge. Primaries' outcomes change nothing. Per key of Key, it keeps the
// outcomes of the last Samples judged hedges, and a credit of hedges,
// counted in thousandths:
//
//   - the credit starts at Burst hedges and never holds more;
//   - each call adds Probe of a hedge (Allow(ctx, 0));
//   - each hedge that wins adds 1/MinWinRate;
//   - a grant whose attempt never ran (Release), or whose attempt
//     failed, adds one hedge.
//
// Allow(ctx, k ≥ 1) grants a hedge while at least MinWinRate of the
// key's judged hedges won, and takes nothing for it. Otherwise it grants
// the hedge if a whole hedge of credit is left, and takes it.
//
// So while a key's hedges win at a rate of at least MinWinRate, measured
// over its last Samples hedges, the budget refuses none: where hedges
// win one time in five, a run of forty losses changes nothing. The credit
// stays full meanwhile, so a rate that dips below MinWinRate by bad luck
// has Burst hedges to come back before any is refused. Near MinWinRate,
// wins at random dip below it often, and a dip that empties the credit
// leaves only the probe hedges to judge the rate again: at 1.5 ×
// MinWinRate the defaults refuse 1.7 % of hedges where one call in ten
// asks for one, and 24 % where every call does; at MinWinRate itself,
// which no count of the last hedges tells from a rate just below it,
// 40 % and 90 %. A larger Burst refuses fewer there (50: 0.06 % and
// 1.2 % at 1.5 × MinWinRate), and grants more where hedges win less
// often than MinWinRate. (Until the first hedges are judged, the credit alone decides: size Burst above the
// hedges one key may send before any of them answers, as many calls at
// once after a cold start do.) When hedges win at a rate w below
// MinWinRate, the credit runs out and the hedges granted then settle at
//
//	Probe / (1 − w/MinWinRate) per call,
//
// 0.01 at the defaults when no hedge wins, 0.02 when hedges win at half of
// MinWinRate. Once hedges win again at w > MinWinRate, the probe hedges
// find out: with one probe hedge every 1/Probe calls, the first win comes
// after about 1/(Probe·w) calls (111 at the defaults and w = 0.9), and
// from then on each granted hedge adds w/MinWinRate − 1 hedges of credit
// on average (8 at the defaults), so the credit grows back geometrically,
// to Burst within a few dozen hedges.
//
// A win is what Do reports: Accept for a hedge means its answer was taken.
// The budget cannot tell by how much a hedge won, so MinWinRate is the
// price of a win: at 0.1, every ten hedges must answer at least one call
// sooner. A higher MinWinRate backs off sooner where hedges win only now
// and then, as on a saturated upstream where a hedge sometimes wins by
// skipping a queue that it lengthens for every other call.
//
// The zero value is ready: every call under one key, with the defaults
// each field names. The fields are read once, on first use, under the
// budget's lock; set them before. A field out of range is an error
// wrapping ErrInvalidBudget, which Policy.Validate and Do report; such a
// budget refuses every hedge. A WinRateBudget is safe for concurrent use
// and must not be copied after first use. After the key
// lookup (a sync.Map load), Allow(ctx, 0) is an atomic load while the
// credit is full and a compare-and-swap otherwise; a hedge's Allow is two
// atomic loads while hedges win, and a compare-and-swap more when they do
// not; a judged hedge's Done is two atomic adds and an atomic and/or on
// the key's ring, a win's also a compare-and-swap, as is Release.
type WinRateBudget struct {
	// Key names the route of a call from the caller's context (the one
	// passed to Do): one route's hedges can stop winning while another's
	// still win. hedgehttp.Route and a gRPC call's full method are natural
	// keys. Nil puts every call under one key.
	Key func(ctx context.Context) string
	// MinWinRate is the share of hedges, in (0, 1], that must win for
	// hedging to go on unchecked: while at least this share of a key's
	// last Samples judged hedges won, the budget refuses none, and a
	// hedge that wins earns 1/MinWinRate hedges of credit. It is used to
	// three decimals, rounded up, so that the budget never asks less
	// than it was told. 0 means 0.1: a hedge must win one time in ten to
	// pay for itself.
	MinWinRate float64
	// Probe is the credit each call adds, in hedges, in (0, 1]: the rate
	// at which hedges go on once they have stopped winning, so that the
	// budget learns when they win again. It is used to three decimals,
	// rounded down, and must not round to 0. 0 means 0.01: one hedge per
	// hundred calls.
	Probe float64
	// Burst is the most credit a key holds, in hedges, from 1 to 1e6, and
	// the credit it starts with: how many hedges may go out before any
	// has been judged, and how many in a row may go unpaid once the win
	// rate is below MinWinRate. 0 means 20.
	Burst int
	// Samples is how many of a key's latest judged hedges the win rate is
	// measured over, from 1 to 1000. A longer memory refuses less often
	// by bad luck while hedges win, and takes longer to notice that they
	// stopped: after a run of wins, about (1 − MinWinRate) × Samples
	// hedges must lose before the budget refuses one. 0 means 100.
	Samples int
	// MaxKeys bounds how many keys get a credit of their own; keys past
	// it share one overflow credit. 0 means 64.
	MaxKeys int

	settings settings[winRateState]
}

// winRateState is what a WinRateBudget reads from its fields, and its
// keys' credits.
type winRateState struct {
	err     error
	rule    winRule
	credits perKey[winCredit]
}

// winRule is a WinRateBudget's settings, which apply to every key's
// credit: an Adaptive keeps one too.
type winRule struct {
	probe   int64  // thousandths of a hedge each call adds
	reward  int64  // thousandths of a hedge each win adds: 1/MinWinRate
	burst   int64  // thousandths of a hedge: the most a key holds
	min     int64  // MinWinRate in thousandths, rounded up
	samples int    // judged hedges a key remembers
	first   uint64 // judged hedges before their rate counts: at least 1
}

// winCredit is one key's credit, in thousandths of a hedge, alone on its
// cache line, and the outcomes of its last judged hedges.
type winCredit struct {
	v atomic.Int64
	_ [56]byte // two busy keys must not slow each other's compare-and-swaps

	// The ring of the last samples judged hedges, one bit each (1: won),
	// written at judged mod samples. wins counts the ring's set bits;
	// writers update it right after their bit, so it may lag, and a
	// decision that reads it may be off by the hedges being judged.
	ring   []atomic.Uint64
	judged atomic.Uint64
	wins   atomic.Int64
}

// load returns the budget's state, reading its fields on first use.
func (b *WinRateBudget) load() *winRateState { return b.settings.load(b.read) }

func (b *WinRateBudget) read() *winRateState {
	s := &winRateState{}
	if b.MaxKeys < 0 {
		s.err = fieldError("WinRateBudget.MaxKeys", "%d is negative", b.MaxKeys)
		return s
	}
	if s.rule, s.err = newWinRule(b); s.err != nil {
		return s
	}
	s.credits.init(b.Key, orDefault(b.MaxKeys, defaultWinRateKeys), s.rule.newCredit)
	return s
}

func (b *WinRateBudget) check() error { return b.load().err }

// newWinRule checks and reads c's settings, but for Key and MaxKeys: a
// WinRateBudget keeps its rule with a table of credits, an Adaptive keeps
// one credit in each key's state.
func newWinRule(c *WinRateBudget) (winRule, error) {
	switch {
	case !(c.MinWinRate >= 0 && c.MinWinRate <= 1): // and not NaN
		return winRule{}, fieldError("WinRateBudget.MinWinRate", "%v is outside (0, 1]", c.MinWinRate)
	case !(c.Probe >= 0 && c.Probe <= 1):
		return winRule{}, fieldError("WinRateBudget.Probe", "%v is outside (0, 1]", c.Probe)
	case c.Probe > 0 && thousandthsDown(c.Probe) == 0:
		return winRule{}, fieldError("WinRateBudget.Probe", "%v rounds down to 0 in thousandths", c.Probe)
	case c.Burst < 0 || c.Burst > maxWinRateBurst:
		return winRule{}, fieldError("WinRateBudget.Burst", "%d is outside [1, %d]", c.Burst, maxWinRateBurst)
	case c.Samples < 0 || c.Samples > maxWinRateSamples:
		return winRule{}, fieldError("WinRateBudget.Samples", "%d is outside [1, %d]", c.Samples, maxWinRateSamples)
	}
	m := thousandthsUp(orDefault(c.MinWinRate, defaultMinWinRate)) // ≥ 1: it is above 0
	return winRule{
		probe:   thousandthsDown(orDefault(c.Probe, defaultProbe)),
		reward:  milli * milli / m, // rounded down: a win never earns more than 1/MinWinRate
		burst:   int64(orDefault(c.Burst, defaultBurst)) * milli,
		min:     m,
		samples: orDefault(c.Samples, defaultWinSamples),
		first:   1,
	}, nil
}

// thousandthsUp returns x in thousandths, rounded up, for a parameter that
// a budget must never loosen. x must be finite, non-negative and small.
func thousandthsUp(x float64) int64 {
	m := math.Round(x * milli)
	if m/milli < x {
		m++
	}
	return int64(m)
}

// Allow adds Probe of a hedge to the credit of ctx's key for a call's
// primary (k < 1), and grants it. For extra attempt k (k ≥ 1), it grants
// the attempt while at least MinWinRate of the key's judged hedges won,
// and otherwise if a whole hedge of credit is left, which it takes.
func (b *WinRateBudget) Allow(ctx context.Context, k int) bool {
	s := b.load()
	if s.err != nil {
		return primary(k)
	}
	c := s.credits.of(ctx)
	if primary(k) {
		s.rule.add(c, s.rule.probe)
		return true
	}
	return s.rule.allow(c)
}

// Done judges extra attempt k (k ≥ 1) of ctx's key: Accept is a win and
// adds 1/MinWinRate hedges to the credit; Canceled, TimedOut and Terminal
// are losses; Retryable and Failed are not judged, and give the hedge
// back. It ignores every primary's outcome.
func (b *WinRateBudget) Done(ctx context.Context, k int, o Outcome) {
	if primary(k) {
		return
	}
	if s := b.load(); s.err == nil {
		s.rule.done(s.credits.of(ctx), o, s.rule.reward)
	}
}

// Release gives back the hedge that a granted Allow(ctx, k), k ≥ 1, took,
// for an attempt that never started. It does nothing for the primary
// (k < 1), whose call stays counted.
func (b *WinRateBudget) Release(ctx context.Context, k int) {
	if primary(k) {
		return
	}
	if s := b.load(); s.err == nil {
		s.rule.add(s.credits.of(ctx), milli)
	}
}

// Credit returns how many hedges the credit of ctx's key holds, to three
// decimals, without adding the key if it is new: a key not seen yet holds
// Burst, or shares the overflow credit if MaxKeys are taken. A budget
// whose fields are out of range holds none.
func (b *WinRateBudget) Credit(ctx context.Context) float64 {
	s := b.load()
	if s.err != nil {
		return 0
	}
	c := s.credits.peek(ctx)
	if c == nil {
		return float64(s.rule.burst) / milli
	}
	return float64(c.v.Load()) / milli
}

// allow grants a hedge of c: for nothing while c's hedges win often
// enough, otherwise for one hedge of credit, if a whole one is left.
func (r *winRule) allow(c *winCredit) bool {
	ok, _ := r.take(c, r.min)
	return ok
}

// take is allow for a win rate of need thousandths, that also says
// whether the grant took a hedge of credit.
func (r *winRule) take(c *winCredit, need int64) (ok, took bool) {
	if r.winning(c, need) {
		return true, false
	}
	for {
		v := c.v.Load()
		if v < milli {
			return false, false
		}
		if c.v.CompareAndSwap(v, v-milli) {
			return true, true
		}
	}
}

// winning reports whether at least need thousandths of c's judged hedges
// won. Before the rule has judged enough hedges, there is no rate to go
// by.
func (r *winRule) winning(c *winCredit, need int64) bool {
	n := min(c.judged.Load(), uint64(r.samples))
	return n >= r.first && c.wins.Load()*milli >= need*int64(n)
}

// done judges a hedge of c by its outcome; a win earns reward.
func (r *winRule) done(c *winCredit, o Outcome, reward int64) {
	switch o {
	case Accept:
		r.judge(c, true)
		r.add(c, reward)
	case Retryable, Failed:
		r.add(c, milli) // it ran no race: as if never granted
	default:
		r.judge(c, false)
	}
}

// judge writes a judged hedge into c's ring.
func (r *winRule) judge(c *winCredit, won bool) {
	i := (c.judged.Add(1) - 1) % uint64(r.samples)
	w, bit := &c.ring[i/64], uint64(1)<<(i%64)
	var was bool
	if won {
		was = w.Or(bit)&bit != 0
	} else {
		was = w.And(^bit)&bit != 0
	}
	switch {
	case won && !was:
		c.wins.Add(1)
	case !won && was:
		c.wins.Add(-1)
	}
}

// add adds d > 0 thousandths to c, up to Burst. A full credit costs only
// the load: every call of a key whose hedges win finds it full.
func (r *winRule) add(c *winCredit, d int64) {
	for {
		v := c.v.Load()
		n := min(v+d, r.burst)
		if n <= v || c.v.CompareAndSwap(v, n) {
			return
		}
	}
}

func (r *winRule) newCredit(string) *winCredit {
	c := &winCredit{}
	r.initCredit(c)
	return c
}

func (r *winRule) initCredit(c *winCredit) {
	c.ring = make([]atomic.Uint64, (r.samples+63)/64)
	c.v.Store(r.burst)
}
