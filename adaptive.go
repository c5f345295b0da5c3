package hedge

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// Auto returns the production Policy for one kind of call: a fresh
// Adaptive as both its Delay and its Budget, every other field zero.
// Call it once and share the Policy, as the state it learns lives in the
// Adaptive:
//
//	var profiles = hedge.Auto[Profile]()
//
//	v, err := hedge.Do(ctx, profiles, fetchProfile)
//
// A Policy made by Auto learns one plan for every call it serves; for one
// per route, make the Adaptive yourself with a Key, and set Timeout or
// Classify as usual.
func Auto[T any]() Policy[T] {
	a := &Adaptive{}
	return Policy[T]{Delay: a, Budget: a}
}

// Adaptive is the production setup for one kind of call, kept per key: a
// Delay that plans how early to hedge and how many times, and the Budget
// that keeps those hedges safe, in one object. Put it in both fields of a
// Policy, as Auto does:
//
//	a := &hedge.Adaptive{Key: hedgehttp.Route}
//	p := hedge.Policy[*http.Response]{Delay: a, Budget: a}
//
// As a Policy's Delay alone, it hears of no call until its primary
// returns: its bound stays empty, so it plans within 0.8 × Load, hedges
// at twice its plan's delay, and neither bounds, breaks nor watches the
// calls' rate. (A hedgegrpc method takes its Adaptive Delay as a budget
// too.)
//
// Per key of Key, it keeps:
//
//   - A plan, learned as a Planner learns it: from how long the last 500
//     to 1,000 primaries ran, the delay and the number of hedges (up to
//     2) that minimise the calls' p99 for at most Load extra attempts per
//     call (less while the bound below holds less than half of what it
//     may save, down to 0.8 × Load when it is empty, so that it fills
//     again). A plan of one hedge counts on its estimate of what it will
//     spend, and where hedges start later than planned (a busy machine's
//     timers) it spends less: while the bound holds more than three
//     quarters of what it may save and hedges win at least nine tenths as
//     often as planned, it may spend up to 1.25 × Load on an earlier
//     hedge (no earlier than 0.8 × its delay), until the plans spend about
//     Load. It replans every 250 primaries.
//   - A watch on the plan: a call that starts while most recent
//     primaries are slower than the plan expects (queues grow), or while
//     calls come a quarter faster than they did (an overload may be on
//     its way), gets no hedge; while the plans drift and fewer than half
//     of the hedges win, no first hedge is sent. (A hedge of a call that
//     started before the watch saw a change still goes out: refusing
//     those too helps as often as it harms in the lab's step overloads.)
//     When the latencies stay away from the plan's picture, it forgets
//     and plans afresh. It hedges only once 250 primaries in a row have
//     matched its plan. A tail that has gone does not linger in its
//     plans.
//   - A hard bound: over any n consecutive calls of the key, extra
//     attempts (hedges, and retries of failed attempts) never exceed
//     Load × n plus what it saved up: each call saves Load of an attempt
//     while the key may hedge, each extra attempt takes a whole one, and
//     at most 1,000 calls' worth is saved, so that a burst of slow calls
//     (a replica that browns out) gets its hedges; while less than a
//     tenth of that is left, hedges wait twice the plan's delay, so that
//     the slowest calls get what is left. A new key starts with
//     nothing saved. One that forgets its picture because its calls
//     turned slower sets its savings aside; one whose calls turned
//     faster (a brownout or an overload has passed) keeps up to 50 calls'
//     worth of what it saved. Over 10,000 calls that is at most 1.1 ×
//     Load per call.
//   - Hedges off when they stop winning, judged as a WinRateBudget
//     judges them, with a credit of 10 hedges: while at least a third of
//     the key's last 100 judged hedges won, and half as many as its plan
//     expects of them, it refuses none. Where the slowness belongs to
//     the request, or every replica queues alike, hedges win far less
//     often than a plan made for independent attempts expects.
//   - Hedges off when primaries fail, as a Breaker with its defaults
//     judges them: when half of the last 100 primaries within 10 s
//     failed, or were cut off by the call's deadline, it refuses hedges
//     and retries for 5 s, then tries one. OnOpen hears of it.
//   - Where servers signal starts (see Started), no hedge against started
//     work while calls queue: while its primaries spend a third or more
//     of their time waiting for a worker, a hedge due while an attempt of
//     the call has started is refused (when the Adaptive is the Policy's
//     Delay, or its Budget under a Delay that learns, as a hedgehttp
//     Transport's route's is). It would race running work, and the work
//     of whichever copy lost would be lost; a hedge of a call whose
//     attempts all wait still goes out, as a tie makes it free.
//
// A hedge that fails at once as retryable, as a server that sheds
// hedges answers (hedgehttp.Shedder, hedgegrpc's), lost no race: the
// win rate does not count it.
//
// Do looks the key up once per call when the Adaptive is the Policy's
// Delay, and asks that key's state for everything else. The zero value
// is ready to use: one key, an extra-load bound of 0.1, real time. An
// Adaptive is safe for concurrent use; its fields are read once, on
// first use, and it must not be copied after. A Policy whose MaxAttempts
// is 0 follows the plan: up to 1 + MaxHedges attempts. A MaxAttempts
// below that would cut plans made for more hedges than it lets run, so
// Do rejects it (set MaxHedges instead); 1 still turns hedging off.
// Do reports a bad setting as an error wrapping ErrInvalidPolicy from
// every call, without calling fn.
//
// Each key's state holds about 34 KB, mostly the latency histograms the
// plan is made from.
type Adaptive struct {
	// Key names the route of a call from the caller's context: each key
	// learns its own plan and has its own bound. hedgehttp.Route and a
	// gRPC call's full method are natural keys. Nil puts every call
	// under one key.
	Key func(ctx context.Context) string
	// MaxKeys bounds how many keys get a state of their own; keys past
	// it share one. 0 means 64.
	MaxKeys int
	// Load is the extra attempts per call that the plan may spend, and
	// the hard bound on them: in [0, 2]. 0 means 0.1. (Use MaxAttempts 1
	// to turn hedging off.)
	Load float64
	// MaxHedges is the most hedges a plan may send in one call: 1 or 2.
	// 0 means 2. With 1, every plan is one hedge at its best delay.
	MaxHedges int
	// Clock is the time source of the breaker and of the watch on the
	// calls' rate. Nil means real time.
	Clock clock.Clock
	// OnOpen, if not nil, is called each time a key's breaker opens, with
	// the key ("" for the state keys past MaxKeys share). It runs on the
	// goroutine of the attempt whose outcome opened it, with no lock
	// held; it should be quick.
	OnOpen func(key string)

	state atomic.Pointer[adaptiveState]
}

// Adaptive's settings past its fields: the most hedges a plan sends, and
// how many primaries make a generation of what it knows.
const (
	adaptiveMaxHedges = 2
	adaptiveSamples   = 500
	adaptiveMaxLoad   = 2
	defaultLoad       = 0.1
	adaptiveBurst     = 10 // the win rate's credit, in hedges
	adaptiveFirst     = 20 // hedges judged before their win rate counts
)

// adaptiveState is what an Adaptive reads from its fields once, and its
// keys' states.
type adaptiveState struct {
	err       error
	load      float64
	hedges    int   // MaxHedges, its default worked out
	loadMilli int64 // Load in thousandths of an attempt, rounded down
	boundMax  int64 // the most a key's bound holds: boundCalls × Load
	clk       clock.Clock
	origin    time.Time // by clk: when the state was made
	win       winRule
	breaker   breakerRule // its settings; each key keeps its own circuit
	keys      perKey[adaptiveKey]
}

// Next returns the delay of ctx's key's plan for the hedge after attempt
// k: -1 when its plan sends no more, or while its breaker is open.
func (a *Adaptive) Next(ctx context.Context, k int) time.Duration {
	if s := a.of(ctx); s != nil {
		return s.Next(ctx, k)
	}
	return -1
}

// Learn records how long the primary of a call of ctx's key ran.
func (a *Adaptive) Learn(ctx context.Context, primary time.Duration, complete bool) {
	if s := a.of(ctx); s != nil {
		s.Learn(ctx, primary, complete)
	}
}

// Allow counts a call of ctx's key for its primary (k < 1), and grants
// it. It grants extra attempt k (k ≥ 1) if the key's breaker, its win
// rate and its bound all allow it.
func (a *Adaptive) Allow(ctx context.Context, k int) bool {
	if s := a.of(ctx); s != nil {
		return s.Allow(ctx, k)
	}
	return primary(k)
}

// Done tells ctx's key how attempt k ended.
func (a *Adaptive) Done(ctx context.Context, k int, o Outcome) {
	if s := a.of(ctx); s != nil {
		s.Done(ctx, k, o)
	}
}

// Release gives back what a granted Allow(ctx, k), k ≥ 1, took, for an
// attempt that never started.
func (a *Adaptive) Release(ctx context.Context, k int) {
	if s := a.of(ctx); s != nil {
		s.Release(ctx, k)
	}
}

// Plan returns the plan of ctx's key, without adding the key if it is
// new. A key plans no hedge until it knows its upstream, nor while it
// learns it afresh; nor do bad settings.
func (a *Adaptive) Plan(ctx context.Context) Plan {
	s := a.load()
	if s.err != nil {
		return noPlan
	}
	if k := s.keys.peek(ctx); k != nil {
		return *k.plan.plan.Load()
	}
	return noPlan
}

// of returns the state of ctx's key, adding it if there is room; nil
// for bad settings, which Do reports before it asks for a key.
func (a *Adaptive) of(ctx context.Context) *adaptiveKey {
	s := a.load()
	if s.err != nil {
		return nil
	}
	return s.keys.of(ctx)
}

// bind returns the state of ctx's key, whose hooks Do then calls for the
// rest of the call.
func (a *Adaptive) bind(ctx context.Context) (*adaptiveKey, error) {
	s := a.load()
	if s.err != nil {
		return nil, s.err
	}
	return s.keys.of(ctx), nil
}

func (a *Adaptive) validate(_ context.Context, maxAttempts int) (int, error) {
	s := a.load()
	if s.err != nil {
		return 0, s.err
	}
	if maxAttempts > 1 && maxAttempts <= s.hedges {
		return 0, fmt.Errorf("%w: MaxAttempts %d cuts the Adaptive's plans of up to %d hedges; leave it 0 to follow them, or set Adaptive.MaxHedges %d", ErrInvalidPolicy, maxAttempts, s.hedges, maxAttempts-1)
	}
	return 1 + s.hedges, nil
}

func (a *Adaptive) load() *adaptiveState { return loadState(&a.state, a.newState) }

func (a *Adaptive) newState() *adaptiveState {
	s := &adaptiveState{load: orDefault(a.Load, defaultLoad), hedges: adaptiveMaxHedges, clk: a.Clock}
	if a.MaxHedges > 0 {
		s.hedges = a.MaxHedges
	}
	switch {
	case a.MaxHedges < 0 || a.MaxHedges > adaptiveMaxHedges:
		s.err = fmt.Errorf("%w: Adaptive.MaxHedges %d is outside [0, %d]", ErrInvalidPolicy, a.MaxHedges, adaptiveMaxHedges)
	case math.IsNaN(a.Load) || a.Load < 0 || a.Load > adaptiveMaxLoad:
		s.err = fmt.Errorf("%w: Adaptive.Load %v is outside [0, %d]", ErrInvalidPolicy, a.Load, adaptiveMaxLoad)
	case a.MaxKeys < 0:
		s.err = fmt.Errorf("%w: negative Adaptive.MaxKeys %d", ErrInvalidPolicy, a.MaxKeys)
	}
	if s.err != nil {
		return s
	}
	if s.clk == nil {
		s.origin = time.Now()
	} else {
		s.origin = s.clk.Now()
	}
	s.loadMilli = thousandthsDown(s.load)
	s.boundMax = s.loadMilli * boundCalls
	// The defaults cannot fail. An Adaptive sends its first hedges on
	// credit, and judges them by rate only once 20 have been: a rate of
	// a few hedges is mostly luck.
	s.win, _ = newWinRule(&WinRateBudget{Burst: adaptiveBurst})
	s.win.first = adaptiveFirst
	newBreakerRule(&Breaker{Clock: a.Clock, OnOpen: a.OnOpen}, &s.breaker)
	s.keys.init(a.Key, orDefault(a.MaxKeys, defaultWinRateKeys), s.newKey)
	return s
}
