package main

import (
	"container/list"
	"context"
	"net/http"
	"sync"
)

// pool is a server's fixed set of workers. A request that finds every
// worker busy waits in a FIFO queue for the next one to come free; a
// request whose context ends while it waits leaves the queue, so that a
// client that gave up (a hedge won, the deadline passed) costs the server
// no work. This is where a hedge costs what it costs a real server: a
// worker, or a place in the queue ahead of someone else's primary.
type pool struct {
	workers int

	mu      sync.Mutex
	idle    int       // workers free; 0 whenever waiting is not empty
	waiting list.List // of chan struct{}, oldest first: closed to hand over a worker

	// trace, if not nil, hears every request that joins the queue and
	// every one that leaves it unserved. It runs with no lock held, on
	// the request's goroutine; tests synchronise on it.
	trace func(poolEvent)
}

// poolEvent is what a pool's trace hears.
type poolEvent int

const (
	queued    poolEvent = iota // a request found every worker busy and waits
	abandoned                  // a waiting request's context ended: it left the queue
)

func newPool(workers int) *pool { return &pool{workers: workers, idle: workers} }

// acquire takes a worker, waiting in turn for one if none is free. It
// returns ctx's cause, and holds no worker, if ctx ends first.
func (p *pool) acquire(ctx context.Context) error {
	p.mu.Lock()
	if p.idle > 0 {
		p.idle--
		p.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	place := p.waiting.PushBack(ready)
	p.mu.Unlock()
	p.notify(queued)

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	select {
	case <-ready:
		// Handed a worker just as ctx ended: pass it on, as if it had
		// never come.
		p.releaseLocked()
	default:
		p.waiting.Remove(place)
	}
	p.mu.Unlock()
	p.notify(abandoned)
	return context.Cause(ctx)
}

// release gives back a worker that acquire took: to the request that has
// waited longest, or to the idle ones.
func (p *pool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked()
}

func (p *pool) releaseLocked() {
	if next := p.waiting.Front(); next != nil {
		p.waiting.Remove(next)
		close(next.Value.(chan struct{}))
		return
	}
	p.idle++
}

func (p *pool) notify(e poolEvent) {
	if p.trace != nil {
		p.trace(e)
	}
}

// poolHandler serves each request on a worker of its pool: the request
// waits its turn, then works for as long as work takes, and answers 200.
type poolHandler struct {
	pool *pool
	// work does one request's work. It returns ctx's error, early, if ctx
	// ends first: then the request is not answered.
	work func(ctx context.Context) error
	// stopWork says whether a request whose client has gone stops its
	// work at once and frees its worker, as a replica that watches for
	// cancellation does. If false, work runs to the end on a context that
	// is never cancelled, holding its worker all the while, as a replica
	// that cannot stop a query it has started does. A request that has
	// not reached a worker leaves the queue either way.
	stopWork bool
}

func (h *poolHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.pool.acquire(r.Context()) != nil {
		return // the client gave up while the request waited
	}
	defer h.pool.release()
	ctx := r.Context()
	if !h.stopWork {
		ctx = context.WithoutCancel(ctx)
	}
	if h.work(ctx) == nil {
		w.Write([]byte("ok\n"))
	}
}
