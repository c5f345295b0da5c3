package hedge

import (
	"context"
	"sync"
)

// perKey keeps one *S per key of a call's context, for the budgets that
// judge each route on its own. Memory is bounded: past max keys, new keys
// share one overflow S, as they do when key is nil. The zero perKey holds
// nothing and hands out nil; init readies it.
type perKey[S any] struct {
	key      func(context.Context) string // nil: every call under one key
	max      int
	fresh    func(key string) *S
	mu       sync.Mutex // held to add a key
	m        sync.Map   // string → *S, at most max of them
	n        int        // keys in m; guarded by mu
	overflow *S
}

// init readies p. fresh makes the S of a key; the overflow S is made
// with the key "".
func (p *perKey[S]) init(key func(context.Context) string, max int, fresh func(key string) *S) {
	p.key, p.max, p.fresh = key, max, fresh
	p.overflow = fresh("")
}

func (p *perKey[S]) keyOf(ctx context.Context) string {
	if p.key == nil {
		return ""
	}
	return p.key(ctx)
}

// get returns the S of key, adding a fresh one if there is room.
func (p *perKey[S]) get(key string) *S {
	if p.key == nil {
		return p.overflow
	}
	if s, ok := p.m.Load(key); ok {
		return s.(*S)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.m.Load(key); ok {
		return s.(*S)
	}
	if p.n >= p.max {
		return p.overflow
	}
	s := p.fresh(key)
	p.m.Store(key, s)
	p.n++
	return s
}

// of returns the S of ctx's key, adding it if there is room.
func (p *perKey[S]) of(ctx context.Context) *S { return p.get(p.keyOf(ctx)) }

// peek returns the S of ctx's key without adding it: nil for a key not
// seen yet that would get an S of its own, the overflow S when there is
// no room left for it.
func (p *perKey[S]) peek(ctx context.Context) *S {
	if p.key == nil {
		return p.overflow
	}
	if s, ok := p.m.Load(p.key(ctx)); ok {
		return s.(*S)
	}
	p.mu.Lock()
	full := p.n >= p.max
	p.mu.Unlock()
	if full {
		return p.overflow
	}
	return nil
}
