package hedge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// BreakerState is where a Breaker stands for one key.
type BreakerState int

const (
	// BreakerClosed grants every hedge and measures the primaries.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses every hedge until its cooldown is over.
	BreakerOpen
	// BreakerHalfOpen grants a few trial hedges: if they all succeed the
	// breaker closes, and if one fails it opens again.
	BreakerHalfOpen
)

// String returns the state's name.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "BreakerState(?)"
}

// Defaults of a Breaker's zero fields: the window and threshold of
// resilience4j's count-based breaker, the cooldown of Hystrix, and one
// trial, as both of them and gobreaker use.
const (
	defaultBreakerThreshold = 0.5
	defaultBreakerSamples   = 100
	defaultBreakerWindow    = 10 * time.Second
	defaultBreakerCooldown  = 5 * time.Second
	defaultBreakerTrials    = 1
	defaultBreakerMaxKeys   = 64
)

// Bounds of a Breaker's fields. A ring of a thousand samples per key is
// 8 KB; a breaker that remembers or sleeps for more than an hour is no
// longer about the health of the calls at hand.
const (
	maxBreakerSamples  = 1000
	maxBreakerDuration = time.Hour
	maxBreakerTrials   = 1000
)

// Breaker is a Budget that stops hedging a route whose calls fail, in the
// manner of a circuit breaker that guards only the extra attempts: while
// an upstream fails, duplicates of its requests add load and rarely help.
// It never refuses a primary (Allow(ctx, 0) is always true), and the
// primaries are what it measures, per key of Key:
//
//   - Closed, it grants every hedge and keeps the outcomes of the key's
//     last Samples primaries. Accept is a success; Retryable, Failed,
//     Terminal (a panic included) and TimedOut (a primary that the
//     call's deadline cut off: a hung upstream) are failures; Canceled (a
//     primary that lost the race, or whose caller gave up) says nothing
//     of the upstream and is not counted. When all of them lie within Window and
//     at least Threshold failed, it opens. So once every primary fails, it
//     opens within Samples of them (if they come within a Window), and
//     after ⌈Threshold × Samples⌉ of them if the ring held recent
//     successes.
//   - Open, it refuses every hedge. After Cooldown it turns half-open.
//   - Half-open, it grants up to Trials trial hedges. A trial that is
//     accepted counts toward closing; when Trials have been accepted, it
//     closes and starts a fresh count. A trial that fails opens it again
//     for another Cooldown, as does one the deadline cut off. A trial
//     that was cancelled (it lost the race, or never started: see
//     Budget's Release) gives its slot back.
//
// Hedges' outcomes do not count while it is closed, for three reasons.
// Hedges are sent only for calls whose primary was slow or failed, so
// they are a biased sample, and counting a retried failure again would
// count one bad call twice. They are sent only while the breaker is
// closed, so their share of the sample would depend on the breaker's own
// decisions. And with one primary per call, the error rate is the share
// of calls that failed at first try whatever the hedging policy, which is
// what Threshold means. A half-open breaker judges its trials, the only
// hedges it sends, because they are the question it asks: would a hedge
// help again?
//
// A Done cannot say which Allow it answers, so a half-open breaker takes
// the outcome of any hedge that returns while trials are out as a trial's.
// A hedge granted before the breaker opened is still out after Cooldown
// only if it ran for longer than Cooldown; a Cooldown longer than the
// calls' Timeout rules that out.
//
// A Terminal outcome counts as a failure. A classifier that marks answers
// which say nothing about the upstream's health (not found, invalid
// argument) as Accept keeps them out of the failures; Do returns them the
// same way.
//
// The zero value is ready: every call under one key, with the defaults
// each field names. The fields are read once, on first use, under the
// breaker's lock; set them before. A field out of range is an error
// wrapping ErrInvalidBudget, which Policy.Validate and Do report; such a
// breaker refuses every hedge. A Breaker is safe for concurrent use and
// must not be copied after first use. After the key lookup (a sync.Map load),
// a closed breaker's Allow is one atomic load, and Done records a primary
// with a clock reading, a swap and two atomic adds; a failure also loads
// the failure count, and scans the ring under a mutex only when that count
// reaches Threshold. A half-open breaker takes a mutex per hedge.
type Breaker struct {
	// Key names the route of a call from the caller's context (the one
	// passed to Do): a breaker opens for one route while the others keep
	// their hedges. hedgehttp.Route and a gRPC call's full method are
	// natural keys. Nil puts every call under one breaker.
	Key func(ctx context.Context) string
	// Threshold is the share of failed primaries, in (0, 1], at or above
	// which the breaker opens. It is used to three decimals, rounded
	// down. 0 means 0.5.
	Threshold float64
	// Samples is how many of a key's latest primaries the breaker judges,
	// from 1 to 1000: it opens when the last Samples outcomes all fall
	// within Window and at least Threshold of them are failures. A smaller
	// ring opens sooner after an upstream starts failing, and more often
	// on bad luck. 0 means 100.
	Samples int
	// Window is how recent the judged outcomes must be, up to an hour: a
	// key with fewer than Samples primaries in the last Window never
	// opens. 0 means 10s.
	Window time.Duration
	// Cooldown is how long the breaker stays open before it turns
	// half-open, up to an hour. 0 means 5s.
	Cooldown time.Duration
	// Trials is how many trial hedges a half-open breaker grants, from 1
	// to 1000; when that many have succeeded it closes. 0 means 1.
	Trials int
	// MaxKeys bounds how many keys get a breaker of their own; keys past
	// it share one overflow breaker. 0 means 64.
	MaxKeys int
	// OnOpen, if not nil, is called exactly once each time a key's
	// breaker opens, with the key of the call whose outcome opened it
	// (for the shared overflow breaker, one of its keys). It runs on the
	// goroutine that reported that outcome, in its Done, after the
	// breaker's state has changed and with no lock held; it delays that
	// attempt's return, so it should be quick.
	OnOpen func(key string)
	// Clock is the time source. Nil means real time; tests inject
	// clock.NewMock() from benbjohnson/clock.
	Clock clock.Clock

	settings settings[breakerState]
}

// breakerState is what a Breaker reads from its fields, and its keys'
// circuits.
type breakerState struct {
	err      error
	rule     breakerRule
	circuits perKey[circuit]
}

// breakerRule is a Breaker's settings, which apply to every key's
// circuit: an Adaptive keeps one too.
type breakerRule struct {
	threshold int64 // thousandths of the judged primaries
	samples   int
	window    time.Duration
	cooldown  time.Duration
	trials    int
	onOpen    func(string)
	clk       clock.Clock // nil: real time
	origin    time.Time
}

// circuit is the breaker of one key.
type circuit struct {
	phase  atomic.Int32 // a BreakerState
	reopen atomic.Int64 // when open: the time since origin at which it turns half-open

	// The last samples primaries, a ring written at next. A word is
	// t<<2 | filled<<1 | failed, t the time since origin: the ring holds
	// no more than 146 years. failed counts the failed words; writers
	// update it right after their swap, so it may lag, and it is only a
	// hint for when to scan the ring.
	ring   []atomic.Uint64
	next   atomic.Uint64
	failed atomic.Int64

	mu     sync.Mutex // held to change phase, and to count trials
	out    int        // trial hedges granted and not back; guarded by mu
	passed int        // trial hedges accepted; guarded by mu
}

const (
	sampleFailed = 1
	sampleFilled = 2
)

// load returns the breaker's state, reading its fields on first use.
func (b *Breaker) load() *breakerState { return b.settings.load(b.read) }

func (b *Breaker) read() *breakerState {
	s := &breakerState{}
	if s.err = newBreakerRule(b, &s.rule); s.err != nil {
		return s
	}
	if b.MaxKeys < 0 {
		s.err = fieldError("Breaker.MaxKeys", "%d is negative", b.MaxKeys)
		return s
	}
	s.circuits.init(b.Key, orDefault(b.MaxKeys, defaultBreakerMaxKeys), s.rule.newCircuit)
	return s
}

func (b *Breaker) check() error { return b.load().err }

// newBreakerRule checks the settings of c (but for Key and MaxKeys) and
// puts them in r: a Breaker keeps its rule with a table of circuits, an
// Adaptive keeps one circuit in each key's state.
func newBreakerRule(c *Breaker, r *breakerRule) error {
	switch {
	case !(c.Threshold >= 0 && c.Threshold <= 1): // and not NaN
		return fieldError("Breaker.Threshold", "%v is outside (0, 1]", c.Threshold)
	case c.Threshold > 0 && thousandthsDown(c.Threshold) == 0:
		return fieldError("Breaker.Threshold", "%v rounds down to 0 in thousandths", c.Threshold)
	case c.Samples < 0 || c.Samples > maxBreakerSamples:
		return fieldError("Breaker.Samples", "%d is outside [1, %d]", c.Samples, maxBreakerSamples)
	case c.Window < 0 || c.Window > maxBreakerDuration:
		return fieldError("Breaker.Window", "%v is outside (0, %v]", c.Window, maxBreakerDuration)
	case c.Cooldown < 0 || c.Cooldown > maxBreakerDuration:
		return fieldError("Breaker.Cooldown", "%v is outside (0, %v]", c.Cooldown, maxBreakerDuration)
	case c.Trials < 0 || c.Trials > maxBreakerTrials:
		return fieldError("Breaker.Trials", "%d is outside [1, %d]", c.Trials, maxBreakerTrials)
	}
	*r = breakerRule{
		threshold: thousandthsDown(orDefault(c.Threshold, defaultBreakerThreshold)),
		samples:   orDefault(c.Samples, defaultBreakerSamples),
		window:    orDefault(c.Window, defaultBreakerWindow),
		cooldown:  orDefault(c.Cooldown, defaultBreakerCooldown),
		trials:    orDefault(c.Trials, defaultBreakerTrials),
		onOpen:    c.OnOpen,
		clk:       c.Clock,
	}
	r.origin = r.now()
	return nil
}

func orDefault[N int | float64 | time.Duration](v, def N) N {
	if v == 0 {
		return def
	}
	return v
}

// Allow grants the primary (k < 1) always. It grants extra attempt k
// (k ≥ 1) if the breaker of ctx's key is closed, or is half-open with a
// trial slot free, which the grant takes.
func (b *Breaker) Allow(ctx context.Context, k int) bool {
	if primary(k) {
		return true
	}
	s := b.load()
	if s.err != nil {
		return false
	}
	return s.rule.allow(s.circuits.of(ctx))
}

// allow grants a hedge of c: always while closed, and a trial slot while
// half-open.
func (b *breakerRule) allow(c *circuit) bool {
	phase := BreakerState(c.phase.Load())
	if phase == BreakerClosed {
		return true
	}
	now := b.since()
	if phase == BreakerOpen && now < c.reopen.Load() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch BreakerState(c.phase.Load()) {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if now < c.reopen.Load() {
			return false
		}
		c.phase.Store(int32(BreakerHalfOpen))
		c.out, c.passed = 0, 0
	}
	if c.out+c.passed >= b.trials {
		return false
	}
	c.out++
	return true
}

// Done records a primary's outcome (k < 1) while the breaker of ctx's key
// is closed, and opens it if the failures reach Threshold. While it is
// half-open, it judges a trial hedge's outcome (k ≥ 1). It ignores the
// rest.
func (b *Breaker) Done(ctx context.Context, k int, o Outcome) {
	if primary(k) && o == Canceled {
		return
	}
	s := b.load()
	if s.err != nil {
		return
	}
	key := s.circuits.keyOf(ctx)
	s.rule.done(s.circuits.get(key), key, k, o)
}

// done takes attempt k's outcome into c, the circuit of key.
func (b *breakerRule) done(c *circuit, key string, k int, o Outcome) {
	switch {
	case primary(k) && o != Canceled:
		b.measure(c, key, o != Accept)
	case !primary(k) && BreakerState(c.phase.Load()) == BreakerHalfOpen:
		b.judge(c, key, o)
	}
}

// Release gives back the trial slot that a granted Allow(k), k ≥ 1, took
// from a half-open breaker, for an attempt that never started. It does
// nothing otherwise: a closed breaker's grants take nothing.
func (b *Breaker) Release(ctx context.Context, k int) {
	if primary(k) {
		return
	}
	s := b.load()
	if s.err != nil {
		return
	}
	key := s.circuits.keyOf(ctx)
	s.rule.release(s.circuits.get(key), key)
}

// release gives back the trial slot a grant took from c, if it is
// half-open.
func (b *breakerRule) release(c *circuit, key string) {
	if BreakerState(c.phase.Load()) == BreakerHalfOpen {
		b.judge(c, key, Canceled)
	}
}

// State returns the state of the breaker of ctx's key, without adding the
// key if it is new: a key not seen yet is closed, or shares the overflow
// breaker's state if MaxKeys are taken. An open breaker whose cooldown is
// over is half-open. A breaker whose fields are out of range is open: it
// refuses every hedge.
func (b *Breaker) State(ctx context.Context) BreakerState {
	s := b.load()
	if s.err != nil {
		return BreakerOpen
	}
	c := s.circuits.peek(ctx)
	if c == nil {
		return BreakerClosed
	}
	phase := BreakerState(c.phase.Load())
	if phase == BreakerOpen && s.rule.since() >= c.reopen.Load() {
		return BreakerHalfOpen
	}
	return phase
}

// measure records a primary's outcome in a closed breaker, and opens it
// if the ring then holds Threshold of failures within Window.
func (b *breakerRule) measure(c *circuit, key string, failed bool) {
	if BreakerState(c.phase.Load()) != BreakerClosed {
		return
	}
	now := b.since()
	w := uint64(now)<<2 | sampleFilled
	if failed {
		w |= sampleFailed
	}
	i := (c.next.Add(1) - 1) % uint64(len(c.ring))
	old := c.ring[i].Swap(w)
	c.failed.Add(int64(w&sampleFailed) - int64(old&sampleFailed))
	if !failed || c.failed.Load()*milli < b.threshold*int64(b.samples) {
		return
	}
	c.mu.Lock()
	// Under the lock, exactly one of the goroutines that saw the ring
	// cross Threshold finds the breaker still closed: one opening, one
	// OnOpen. The ring, not the hint, decides.
	opened := BreakerState(c.phase.Load()) == BreakerClosed && b.tripped(c, now)
	if opened {
		b.open(c, now)
	}
	c.mu.Unlock()
	if opened && b.onOpen != nil {
		b.onOpen(key)
	}
}

// tripped reports whether every sample in c's ring is within Window of now
// and at least Threshold of them failed.
func (b *breakerRule) tripped(c *circuit, now int64) bool {
	var failed int64
	for i := range c.ring {
		w := c.ring[i].Load()
		if w&sampleFilled == 0 || now-int64(w>>2) > int64(b.window) {
			return false
		}
		failed += int64(w & sampleFailed)
	}
	return failed*milli >= b.threshold*int64(b.samples)
}

// judge takes a trial hedge's outcome in a half-open breaker: accepted
// ones close it once Trials have been, a failure opens it again, and a
// cancelled one frees its slot. An outcome while no trial is out belongs
// to a hedge granted before the breaker opened, and says nothing.
func (b *breakerRule) judge(c *circuit, key string, o Outcome) {
	now := b.since()
	reopened := false
	c.mu.Lock()
	if BreakerState(c.phase.Load()) == BreakerHalfOpen && c.out > 0 {
		c.out--
		switch o {
		case Canceled:
		case Accept:
			if c.passed++; c.passed >= b.trials {
				b.close(c)
			}
		default:
			b.open(c, now)
			reopened = true
		}
	}
	c.mu.Unlock()
	if reopened && b.onOpen != nil {
		b.onOpen(key)
	}
}

// open opens c until Cooldown after now. Called with c.mu held. reopen is
// stored first, so that whoever loads the new phase loads the new reopen.
func (b *breakerRule) open(c *circuit, now int64) {
	c.reopen.Store(now + int64(b.cooldown))
	c.phase.Store(int32(BreakerOpen))
}

// close closes c with an empty ring: the failures that opened it must not
// open it again. Called with c.mu held.
func (b *breakerRule) close(c *circuit) {
	for i := range c.ring {
		old := c.ring[i].Swap(0)
		c.failed.Add(-int64(old & sampleFailed))
	}
	c.out, c.passed = 0, 0
	c.phase.Store(int32(BreakerClosed))
}

func (b *breakerRule) newCircuit(string) *circuit {
	c := &circuit{}
	b.initCircuit(c)
	return c
}

func (b *breakerRule) initCircuit(c *circuit) { c.ring = make([]atomic.Uint64, b.samples) }

func (b *breakerRule) now() time.Time {
	if b.clk == nil {
		return time.Now()
	}
	return b.clk.Now()
}

// since returns the time since the breaker was made, in nanoseconds, never
// negative: a clock set back does not reach before the origin.
func (b *breakerRule) since() int64 {
	return max(int64(b.now().Sub(b.origin)), 0)
}
