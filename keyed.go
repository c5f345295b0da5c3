package hedge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Keyed keeps one Delay per key, so that one policy can hedge a fast
// lookup and a slow export on the same host each at its own delay. Key
// names the route of a call from its context; New makes the Delay for a
// new key. Memory is bounded: past MaxKeys distinct keys, new keys share
// one overflow Delay. It learns (see Delay) and passes what it learns to the
// key's Delay when that is one.
//
// The zero value is valid: every call shares one &Percentile{}. Keyed is
// safe for concurrent use; set its fields before first use and do not
// copy it after.
type Keyed struct {
	// Key returns the route of a call; it gets the caller's context. Nil
	// puts every call under one key.
	Key func(ctx context.Context) string
	// New returns a fresh Delay for a key. Nil means &Percentile{}.
	New func(key string) Delay
	// MaxKeys bounds how many keys get their own Delay. 0 means 64.
	MaxKeys int

	delays   sync.Map // string → Delay
	n        atomic.Int64
	overflow atomic.Pointer[Delay]
	counts   atomic.Bool // New made a Delay that counts attempts (a Planner)
}

// Next returns the delay of ctx's key.
func (k *Keyed) Next(ctx context.Context, attempt int) time.Duration {
	return k.delay(ctx).Next(ctx, attempt)
}

// began tells the delay of ctx's key that attempt k starts, if it counts
// attempts.
func (k *Keyed) began(ctx context.Context, attempt int) {
	if !k.counts.Load() {
		return // no key to look up on every call for delays that do not count
	}
	if c, ok := k.delay(ctx).(counter); ok {
		c.began(ctx, attempt)
	}
}

// gaveBack tells the delay of ctx's key that attempt k, which began,
// never ran.
func (k *Keyed) gaveBack(ctx context.Context, attempt int) {
	if !k.counts.Load() {
		return
	}
	if c, ok := k.delay(ctx).(counter); ok {
		c.gaveBack(ctx, attempt)
	}
}

// Learn passes the primary's latency to the delay of ctx's key.
func (k *Keyed) Learn(ctx context.Context, primary time.Duration, complete bool) {
	if l, ok := k.delay(ctx).(learner); ok {
		l.Learn(ctx, primary, complete)
	}
}

// Range calls f with each key that has a Delay of its own, and that
// Delay, until f returns false; then with "" and the overflow Delay
// shared by keys past MaxKeys, if one was made. A metrics adapter uses it
// to report each route's current delay (Percentile.Current,
// Planner.Current). Keys added while Range runs may or may not be seen.
func (k *Keyed) Range(f func(key string, d Delay) bool) {
	more := true
	k.delays.Range(func(key, d any) bool {
		more = f(key.(string), d.(Delay))
		return more
	})
	if d := k.overflow.Load(); more && d != nil {
		f("", *d)
	}
}

func (k *Keyed) validate(ctx context.Context, maxAttempts int) (int, error) {
	if k.MaxKeys < 0 {
		return 0, fmt.Errorf("%w: negative Keyed.MaxKeys %d", ErrInvalidPolicy, k.MaxKeys)
	}
	if v, ok := k.lookup(ctx).(validator); ok {
		return v.validate(ctx, maxAttempts)
	}
	return 0, nil
}

// lookup returns the Delay of ctx's key without adding the key: the one
// it has, or the one it would get. Checking a policy (as hedgegrpc.New
// does with a bare context) must not take one of MaxKeys.
func (k *Keyed) lookup(ctx context.Context) Delay {
	var key string
	if k.Key != nil {
		key = k.Key(ctx)
	}
	if d, ok := k.delays.Load(key); ok {
		return d.(Delay)
	}
	if k.n.Load() >= k.limit() {
		return k.spare()
	}
	return k.make(key)
}

// limit is how many keys get a Delay of their own.
func (k *Keyed) limit() int64 {
	if k.MaxKeys == 0 {
		return 64
	}
	return int64(k.MaxKeys)
}

func (k *Keyed) delay(ctx context.Context) Delay {
	var key string
	if k.Key != nil {
		key = k.Key(ctx)
	}
	if d, ok := k.delays.Load(key); ok {
		return d.(Delay)
	}
	if k.n.Add(1) > k.limit() {
		k.n.Add(-1)
		return k.spare()
	}
	d, loaded := k.delays.LoadOrStore(key, k.make(key))
	if loaded {
		k.n.Add(-1)
	}
	return d.(Delay)
}

// spare is the overflow Delay, shared by keys past MaxKeys.
func (k *Keyed) spare() Delay {
	if d := k.overflow.Load(); d != nil {
		return *d
	}
	d := k.make("")
	k.overflow.CompareAndSwap(nil, &d)
	return *k.overflow.Load()
}

func (k *Keyed) make(key string) Delay {
	if k.New == nil {
		return &Percentile{}
	}
	if d := k.New(key); d != nil {
		if _, ok := d.(counter); ok {
			k.counts.Store(true)
		}
		return d
	}
	return defaultDelay
}
