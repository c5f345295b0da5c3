package hedge

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
)

// Defaults of WinRateConfig's zero fields.
const (
	defaultMinWinRate  = 0.1
	defaultProbe       = 0.01
	defaultBurst       = 20
	defaultWinRateKeys = 64
)

// maxWinRateBurst bounds WinRateConfig.Burst, in hedges, far below where a
// sum of thousandths could overflow.
const maxWinRateBurst = 1_000_000

// WinRateConfig sets up a WinRateBudget. Each zero field takes the default
// its doc names, so WinRateConfig{} is a valid configuration. It is a plain
// value: NewWinRateBudget copies it.
type WinRateConfig struct {
	// Key names the route of a call from the caller's context (the one
	// passed to Do): one route's hedges can stop winning while another's
	// still win. hedgehttp.Route and a gRPC call's full method are natural
	// keys. Nil puts every call under one key.
	Key func(ctx context.Context) string
	// MinWinRate is the share of hedges, in (0, 1], that must win for
	// hedging to go on unchecked: a hedge that wins earns 1/MinWinRate
	// hedges of credit. It is used to three decimals, rounded up, so that
	// the budget never asks less than it was told. 0 means 0.1: a hedge
	// must win one time in ten to pay for itself.
	MinWinRate float64
	// Probe is the credit each call adds, in hedges, in (0, 1]: the rate
	// at which hedges go on once they have stopped winning, so that the
	// budget learns when they win again. It is used to three decimals,
	// rounded down, and must not round to 0. 0 means 0.01: one hedge per
	// hundred calls.
	Probe float64
	// Burst is the most credit a key holds, in hedges, from 1 to 1e6, and
	// the credit it starts with: how many hedges in a row may go unpaid
	// before the budget refuses one. 0 means 20.
	Burst int
	// MaxKeys bounds how many keys get a credit of their own; keys past
	// it share one overflow credit. 0 means 64.
	MaxKeys int
}

// WinRateBudget is a Budget that backs off, per route, when hedges stop
// winning. Hedging turns spare capacity into lower latency only while a
// duplicate can answer first. When the slowness belongs to the request, so
// that every attempt of a slow call is slow, or when the upstream is
// saturated and a duplicate queues behind the same work, hedges lose, and
// each one is pure extra load. WinRateBudget keeps a credit of hedges per
// key of Key, counted in thousandths:
//
//   - it starts at Burst hedges and never holds more;
//   - each call adds Probe of a hedge (Allow(ctx, 0));
//   - each granted hedge takes one (Allow(ctx, k ≥ 1)), and with less than
//     one left it refuses;
//   - each hedge that wins (Done(ctx, k ≥ 1, Accept)) adds 1/MinWinRate;
//   - a grant whose attempt never ran comes back (Release).
//
// A hedge that lost (Canceled), failed or was cut off earns nothing, and
// primaries' outcomes change nothing. A retry, which Do and retry loops
// ask for with Allow(ctx, k ≥ 1) too, is judged as a hedge: it wins when it
// is accepted.
//
// So while a key's hedges win at a rate w ≥ MinWinRate, each hedge pays
// for itself on average and the credit stays near Burst. The budget then
// refuses a hedge only after about Burst hedges in a row have gone unpaid,
// which a win rate well above MinWinRate makes rare: where nine hedges in
// ten win, a policy behaves exactly as it would without the budget. (Size
// Burst above the hedges one key may send before any of them answers, as
// many calls at once after a cold start do.) When w falls below
// MinWinRate, the credit runs out within about Burst / (h·(1 −
// w/MinWinRate) − Probe) calls, h being the share of calls that ask for a
// hedge, and the hedges granted then settle at
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
// The zero value refuses every hedge, as every budget's does; make a
// WinRateBudget with NewWinRateBudget. A WinRateBudget is safe for
// concurrent use and must not be copied after first use. After the key
// lookup (a sync.Map load), Allow(ctx, 0) is an atomic load while the
// credit is full and a compare-and-swap otherwise; a hedge's Allow, a
// win's Done and Release are a compare-and-swap each, and other Dones
// cost nothing.
type WinRateBudget struct {
	probe   int64 // thousandths of a hedge each call adds
	reward  int64 // thousandths of a hedge each win adds: 1/MinWinRate
	burst   int64 // thousandths of a hedge: the most a key holds
	credits perKey[winCredit]
}

// winCredit is one key's credit, in thousandths of a hedge, alone on its
// cache line: two busy keys must not slow each other's compare-and-swaps.
type winCredit struct {
	v atomic.Int64
	_ [56]byte
}

// NewWinRateBudget returns a WinRateBudget with the settings of c, its
// zero fields taking their defaults. For a field out of range it returns
// nil and an error wrapping ErrInvalidBudget.
func NewWinRateBudget(c WinRateConfig) (*WinRateBudget, error) {
	switch {
	case !(c.MinWinRate >= 0 && c.MinWinRate <= 1): // and not NaN
		return nil, fmt.Errorf("%w: MinWinRate %v is outside (0, 1]", ErrInvalidBudget, c.MinWinRate)
	case !(c.Probe >= 0 && c.Probe <= 1):
		return nil, fmt.Errorf("%w: Probe %v is outside (0, 1]", ErrInvalidBudget, c.Probe)
	case c.Probe > 0 && thousandthsDown(c.Probe) == 0:
		return nil, fmt.Errorf("%w: Probe %v rounds down to 0 in thousandths", ErrInvalidBudget, c.Probe)
	case c.Burst < 0 || c.Burst > maxWinRateBurst:
		return nil, fmt.Errorf("%w: Burst %d is outside [1, %d]", ErrInvalidBudget, c.Burst, maxWinRateBurst)
	case c.MaxKeys < 0:
		return nil, fmt.Errorf("%w: negative MaxKeys %d", ErrInvalidBudget, c.MaxKeys)
	}
	m := thousandthsUp(orDefault(c.MinWinRate, defaultMinWinRate)) // ≥ 1: it is above 0
	b := &WinRateBudget{
		probe:  thousandthsDown(orDefault(c.Probe, defaultProbe)),
		reward: milli * milli / m, // rounded down: a win never earns more than 1/MinWinRate
		burst:  int64(orDefault(c.Burst, defaultBurst)) * milli,
	}
	b.credits.init(c.Key, orDefault(c.MaxKeys, defaultWinRateKeys), b.newCredit)
	return b, nil
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
// the attempt and takes one hedge of credit if a whole one is left.
func (b *WinRateBudget) Allow(ctx context.Context, k int) bool {
	if !b.credits.ready() { // the zero value
		return primary(k)
	}
	c := b.credits.of(ctx)
	if primary(k) {
		b.add(c, b.probe)
		return true
	}
	for {
		v := c.v.Load()
		if v < milli {
			return false
		}
		if c.v.CompareAndSwap(v, v-milli) {
			return true
		}
	}
}

// Done adds 1/MinWinRate hedges to the credit of ctx's key when extra
// attempt k (k ≥ 1) won: o is Accept. It ignores every other outcome, and
// every primary's.
func (b *WinRateBudget) Done(ctx context.Context, k int, o Outcome) {
	if primary(k) || o != Accept || !b.credits.ready() {
		return
	}
	b.add(b.credits.of(ctx), b.reward)
}

// Release gives back the hedge that a granted Allow(ctx, k), k ≥ 1, took,
// for an attempt that never started. It does nothing for the primary
// (k < 1), whose call stays counted.
func (b *WinRateBudget) Release(ctx context.Context, k int) {
	if primary(k) || !b.credits.ready() {
		return
	}
	b.add(b.credits.of(ctx), milli)
}

// Credit returns how many hedges the credit of ctx's key holds, to three
// decimals, without adding the key if it is new: a key not seen yet holds
// Burst, or shares the overflow credit if MaxKeys are taken. The zero
// value holds none.
func (b *WinRateBudget) Credit(ctx context.Context) float64 {
	if !b.credits.ready() {
		return 0
	}
	c := b.credits.peek(ctx)
	if c == nil {
		return float64(b.burst) / milli
	}
	return float64(c.v.Load()) / milli
}

// add adds d > 0 thousandths to c, up to Burst. A full credit costs only
// the load: every call of a key whose hedges win finds it full.
func (b *WinRateBudget) add(c *winCredit, d int64) {
	for {
		v := c.v.Load()
		n := min(v+d, b.burst)
		if n <= v || c.v.CompareAndSwap(v, n) {
			return
		}
	}
}

func (b *WinRateBudget) newCredit() *winCredit {
	c := &winCredit{}
	c.v.Store(b.burst)
	return c
}
