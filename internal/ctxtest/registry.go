// Package ctxtest holds test doubles for contexts, shared by the tests of
// hedge and its adapters.
package ctxtest

import (
	"sync"
	"time"
)

// Registry is a long-lived parent context that is never done and counts
// the callbacks registered on it and not yet released: what a call leaves
// behind on its caller's context. It is not built on context.WithCancel,
// so the context package registers through its AfterFunc method. The zero
// value is ready; a Registry is safe for concurrent use.
type Registry struct {
	mu   sync.Mutex
	live int
}

// Deadline reports no deadline.
func (r *Registry) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns a channel that never closes.
func (r *Registry) Done() <-chan struct{} { return make(chan struct{}) }

// Err returns nil: a Registry is never done.
func (r *Registry) Err() error { return nil }

// Value returns nil for every key.
func (r *Registry) Value(any) any { return nil }

// AfterFunc registers f, which never runs, until stop releases it.
func (r *Registry) AfterFunc(func()) (stop func() bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live++
	released := false
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if released {
			return false
		}
		released = true
		r.live--
		return true
	}
}

// Live returns how many registrations are not yet released.
func (r *Registry) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live
}
