package lab

import (
	"context"
	"errors"
	"time"

	"github.com/tailcut/hedge"
)

// admitFullLocked reports whether the admission turns a hedge arriving at
// r away at once: every worker busy, and its queue full. Called with c.mu
// held.
func (c *cluster) admitFullLocked(r *replica) bool {
	return c.admit.On && c.admit.Queue > 0 && r.busy == c.workers && r.waiting >= c.admit.Queue
}

// queueLocked puts j in its replica's queue: a hedge behind the
// primaries when the admission is on, to be turned away once it has
// waited HedgeWait. Called with c.mu held.
func (c *cluster) queueLocked(j *job) {
	r := j.replica
	full := c.admitFullLocked(r)
	c.waitLocked(r, +1)
	if !j.hedge || !c.admit.On {
		r.queue = append(r.queue, j)
		if full {
			c.evictLocked(r)
		}
		return
	}
	r.hedges = append(r.hedges, j)
	if c.admit.HedgeWait > 0 {
		j.wait = time.AfterFunc(c.admit.HedgeWait, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if j.state == queued {
				j.turnedAway = true
				c.dropLocked(j)
				close(j.done)
			}
		})
	}
}

// answeredLocked cancels the other attempts of j's call, which j just
// answered, as Do will once the answer reaches it: at the same instant,
// but only after every other event of that instant that the scheduler
// runs first. Doing it here, as RunPlan does, keeps the order of one
// instant's events fixed when a tie starts a chain of them (a tie cuts a
// running attempt, whose worker takes a queued one at once, whose tie
// cuts another...). Called with c.mu held.
func (c *cluster) answeredLocked(j *job) {
	if j.call == nil || j.call.answered {
		return
	}
	for _, o := range j.call.jobs {
		switch {
		case o.state == queued:
			c.tiedLocked(o)
			c.dropLocked(o)
		case o.state == running && c.cancel == CancelRunning:
			c.tiedLocked(o)
			o.timer.Stop()
			c.endLocked(o, dropped)
		}
	}
	j.call.answered = true // after the loop: until now, a cause of ErrSuperseded meant a tie
}

// evictLocked turns away the hedge that has waited longest at r, if one
// waits: a primary takes its place in a full queue. The hedge leaves the
// queue at once, and hears of it a nanosecond later: otherwise its call's
// next attempt, which Do starts at once, and the hedges after it would be
// due at the very instants of the primary's call's hedges, in an order
// left to the scheduler. Called with c.mu held.
func (c *cluster) evictLocked(r *replica) {
	for _, h := range r.hedges {
		switch {
		case h.state != queued:
		case h.ctx.Err() != nil: // gone already; its serve has not seen it
			c.tiedLocked(h)
			c.dropLocked(h)
		default:
			h.turnedAway = true
			c.dropLocked(h)
			time.AfterFunc(time.Nanosecond, func() { close(h.done) })
			return
		}
	}
}

// startedLocked sends the start signal of j, which a worker just took,
// to Do through hedge.Started: at once, or Tie.Signal later. Do then
// cancels the call's other attempts that have not reported a start, with
// cause hedge.ErrSuperseded, and their serve takes them off the queue or
// the worker (see tiedLocked). Started calls nothing of the lab's, so it
// may run under c.mu. Called with c.mu held.
func (c *cluster) startedLocked(j *job) {
	switch {
	case !c.tie.On || j.call == nil:
	case c.tie.Signal == 0:
		hedge.Started(j.ctx)
	default:
		time.AfterFunc(c.tie.signalAfter(j.attempt), func() { hedge.Started(j.ctx) })
	}
}

// tiedLocked counts j, whose context has ended, as cut by a tie if that
// is why it ended: while queued it cost nothing, and while running the
// start signals crossed. Its answer, if it runs on, counts for nothing.
// Do cancels a loser with the same cause, hedge.ErrSuperseded, but only
// once an answer reached it, after answeredLocked. Called with c.mu held.
func (c *cluster) tiedLocked(j *job) {
	if j.call == nil || j.cut || j.call.answered || !errors.Is(context.Cause(j.ctx), hedge.ErrSuperseded) {
		return
	}
	j.cut = true
	switch j.state {
	case queued:
		j.call.queuedCut++
	case running:
		j.call.crossed = true
	}
}
