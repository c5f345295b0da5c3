package lab

import "time"

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
	c.waitLocked(r, +1)
	if !j.hedge || !c.admit.On {
		r.queue = append(r.queue, j)
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
	j.call.answered = true
	for _, o := range j.call.jobs {
		switch {
		case o.state == queued:
			c.dropLocked(o)
		case o.state == running && c.cancel == CancelRunning:
			o.timer.Stop()
			c.endLocked(o, dropped)
		}
	}
}

// startedLocked sends the start signal of j, which a worker just took,
// to its call: at once, or Tie.Signal later. Called with c.mu held.
func (c *cluster) startedLocked(j *job) {
	switch {
	case !c.tie.On:
	case c.tie.Signal == 0:
		c.tieLocked(j)
	default:
		time.AfterFunc(c.tie.signalAfter(j.attempt), func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.tieLocked(j)
		})
	}
}

// tieLocked is j's start signal reaching its call: if j still runs for an
// undecided call, every other attempt of the call that has not reported
// its own start is cut. A queued one leaves its queue, and its attempt
// waits for the call's end holding nothing; a running one is cancelled as
// c.cancel says, and its answer, if it runs on, counts for nothing.
// Called with c.mu held.
func (c *cluster) tieLocked(j *job) {
	if j.state != running || j.cut || j.call.answered || j.ctx.Err() != nil {
		return // it answered first, or the call is over
	}
	j.reported = true
	for _, o := range j.call.jobs {
		if o == j || o.reported || o.cut {
			continue
		}
		switch o.state {
		case queued:
			o.cut = true
			j.call.queuedCut++
			c.dropLocked(o)
		case running:
			o.cut = true
			j.call.crossed = true
			if c.cancel == CancelRunning {
				o.timer.Stop()
				c.endLocked(o, dropped)
			}
		}
	}
}
