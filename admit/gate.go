// Package admit is the server's side of tied hedges: a Gate admits
// requests to a bounded number of concurrent executions, through a
// two-class queue that serves primaries before hedges.
//
// A request enters the Gate before it executes and leaves it when it is
// done. When it enters, it starts at once if a slot is free; otherwise it
// waits. When a slot frees, the first waiting primary takes it, and a
// hedge only when no primary waits: redundant work never delays work
// that has no copy. A hedge that would wait in a full queue, or that has
// waited longer than it can be of use, is turned away at once with
// ErrShed, which a transport answers as a shed hedge (hedgehttp with 503
// and "Retry-After: 0", hedgegrpc with UNAVAILABLE and no retry). A
// request whose context ends while it waits leaves the queue.
//
// The moment Enter returns is the moment the request begins executing:
// a transport tells the client then (hedgehttp with a 1xx informational
// response, hedgegrpc with the response headers), and the client's Do
// cancels the copies that still wait elsewhere (see hedge.Started).
//
//	gate := &admit.Gate{Limit: 64}
//	pass, err := gate.Enter(ctx, isHedge)
//	if err != nil {
//		return err // ErrShed, ErrFull or the context's cause
//	}
//	defer pass.Leave()
package admit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// DefaultHedgeWait is how long a hedge may wait for a slot when a Gate's
// HedgeWait is zero. A waiting hedge costs little: primaries go first, a
// tie cancels it when a sibling starts, and it leaves when its call ends.
// Shed too soon, it is lost where an idle moment later it would have won,
// and a client that counts shed hedges as overload hedges less: in the
// load lab at ρ 0.7 a default client's tied p99 is 791 ms with a 10 ms
// wait, 684 ms with 200 ms and 843 ms with no hedging.
const DefaultHedgeWait = 200 * time.Millisecond

var (
	// ErrShed is Enter's error for a hedge turned away: the queue was
	// full, it waited past HedgeWait, or a primary took its place. The
	// client loses nothing: its primary still runs.
	ErrShed = errors.New("admit: hedge shed")
	// ErrFull is Enter's error for a primary that finds the queue full of
	// primaries: the server is overloaded.
	ErrFull = errors.New("admit: queue full")
)

// Gate admits requests to at most Limit concurrent executions, through a
// queue of at most Queue waiting requests that serves primaries first.
//
// The zero value admits everything at once: it limits nothing and queues
// nothing, and still marks when each request starts. Set Limit to what
// the service can execute at once without queueing inside (its workers,
// its connections to a database) to make the queue form at the Gate,
// where hedges can be tied and turned away.
//
// A Gate is safe for concurrent use. Set its fields before its first
// Enter, and do not copy it after.
type Gate struct {
	// Limit is how many requests may execute at once. Zero or less means
	// no limit: every request starts at once.
	Limit int

	// Queue bounds how many requests may wait, primaries and hedges
	// together. Zero means no bound: a primary waits until its context
	// ends, a hedge as long as HedgeWait. Less than zero means none may
	// wait: a request that finds no free slot is turned away at once.
	// When the queue is full, an arriving hedge is shed, and an arriving
	// primary takes the place of the hedge that has waited longest, or,
	// if none waits, fails with ErrFull.
	Queue int

	// HedgeWait is how long a hedge may wait for a slot before it is shed.
	// Zero means DefaultHedgeWait; less than zero means a hedge never
	// waits: it starts at once or is shed.
	HedgeWait time.Duration

	// Clock times HedgeWait. Nil means real time.
	Clock clock.Clock

	mu        sync.Mutex
	running   int // requests admitted and not yet left
	waiting   int // requests in primaries and hedges
	primaries queue
	hedges    queue
}

// waiter is a request waiting in a Gate's queue.
type waiter struct {
	ready      chan struct{} // closed when the waiter leaves the queue: granted a slot, or shed (err)
	err        error         // set before ready is closed: nil for a slot
	hedge      bool
	queued     bool // in its queue; guarded by the Gate's mu
	prev, next *waiter
}

// queue is a FIFO of waiters, linked through them.
type queue struct{ head, tail *waiter }

func (q *queue) push(w *waiter) {
	w.prev, w.next, w.queued = q.tail, nil, true
	if q.tail == nil {
		q.head = w
	} else {
		q.tail.next = w
	}
	q.tail = w
}

func (q *queue) remove(w *waiter) {
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
}

// Pass is a request's slot in a Gate, from Enter until Leave. The zero
// Pass holds no slot.
type Pass struct {
	g    *Gate
	left int32 // set by the first Leave
}

// Leave gives the slot back: the first waiting primary takes it, or else
// the first waiting hedge. Calls after the first do nothing, also when
// they race with it, and so does Leave on the zero Pass. Call it when the
// request's work is done, however it ended (defer it).
func (p *Pass) Leave() {
	if p.g == nil || !atomic.CompareAndSwapInt32(&p.left, 0, 1) {
		return
	}
	p.g.mu.Lock()
	p.g.handOver()
	p.g.mu.Unlock()
}

// Enter admits a request, a hedge if hedge is true, and returns its Pass
// once it may begin executing: at once if a slot is free, otherwise when
// one frees for it. It returns an error, and no slot, for a hedge turned
// away (ErrShed), for a primary that finds the queue full of primaries
// (ErrFull), and with context.Cause(ctx) when ctx ends first, before or
// while the request waits. Enter costs a lock when a slot is free, and
// allocates only for a request that waits.
func (g *Gate) Enter(ctx context.Context, hedge bool) (Pass, error) {
	if ctx.Err() != nil {
		return Pass{}, context.Cause(ctx)
	}
	g.mu.Lock()
	if g.Limit <= 0 || g.running < g.Limit {
		// A free slot means nothing waits: handOver gives every freed
		// slot to a waiter first.
		g.running++
		g.mu.Unlock()
		return Pass{g: g}, nil
	}
	if err := g.makeRoom(hedge); err != nil {
		g.mu.Unlock()
		return Pass{}, err
	}
	w := &waiter{ready: make(chan struct{}), hedge: hedge}
	g.waiting++
	g.queueOf(w).push(w)
	g.mu.Unlock()
	return g.wait(ctx, w, hedge)
}

// makeRoom decides whether a request that finds no free slot may wait,
// and makes room in a full queue for a primary by shedding the hedge
// that has waited longest. Called with g.mu held.
func (g *Gate) makeRoom(hedge bool) error {
	full := g.Queue < 0 || g.Queue > 0 && g.waiting >= g.Queue
	switch {
	case hedge && (full || g.HedgeWait < 0):
		return ErrShed
	case !full:
		return nil
	case g.Queue < 0 || g.hedges.head == nil:
		return ErrFull
	}
	g.leaveQueue(g.hedges.head, ErrShed)
	return nil
}

// wait waits until w leaves the queue, ctx ends or, for a hedge, its
// HedgeWait passes.
func (g *Gate) wait(ctx context.Context, w *waiter, hedge bool) (Pass, error) {
	var expired <-chan time.Time
	if hedge {
		d := g.HedgeWait
		if d == 0 {
			d = DefaultHedgeWait
		}
		if g.Clock != nil {
			t := g.Clock.Timer(d)
			defer t.Stop()
			expired = t.C
		} else {
			t := time.NewTimer(d)
			defer t.Stop()
			expired = t.C
		}
	}
	var err error
	select {
	case <-w.ready:
		return g.outcome(w)
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-expired:
		err = ErrShed
	}
	g.mu.Lock()
	if w.queued {
		g.leaveQueue(w, nil)
		g.mu.Unlock()
		return Pass{}, err
	}
	g.mu.Unlock()
	// It left the queue as it gave up: it was granted a slot, or shed.
	// A hedge granted as its wait ran out takes the slot; a request whose
	// context ended hands it on.
	p, werr := g.outcome(w)
	if werr == nil && err != ErrShed {
		p.Leave()
		return Pass{}, err
	}
	return p, werr
}

// outcome is what a waiter that left the queue got.
func (g *Gate) outcome(w *waiter) (Pass, error) {
	<-w.ready
	if w.err != nil {
		return Pass{}, w.err
	}
	return Pass{g: g}, nil
}

func (g *Gate) queueOf(w *waiter) *queue {
	if w.hedge {
		return &g.hedges
	}
	return &g.primaries
}

// leaveQueue takes w out of its queue and, unless err is nil (w gave up
// by itself), wakes it with err. Called with g.mu held.
func (g *Gate) leaveQueue(w *waiter, err error) {
	g.queueOf(w).remove(w)
	g.waiting--
	if err != nil {
		w.err = err
		close(w.ready)
	}
}

// handOver gives a freed slot to the first waiting primary, or else to
// the first waiting hedge, or else frees it. Called with g.mu held.
func (g *Gate) handOver() {
	w := g.primaries.head
	if w == nil {
		w = g.hedges.head
	}
	if w == nil {
		g.running--
		return
	}
	g.queueOf(w).remove(w)
	g.waiting--
	close(w.ready)
}
