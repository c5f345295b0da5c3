package lab

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errShed is what a replica answers to a hedge it refuses: retryable, and
// carrying no value, as a 503 with Retry-After or UNAVAILABLE with
// pushback does.
var errShed = errors.New("lab: hedge shed by a saturated replica")

// cluster is the server side of the load lab: replicas, each with a
// number of workers and one FIFO queue. One mutex guards all of it; in
// virtual time the lock is never the bottleneck, and one lock keeps the
// model's state transitions easy to follow.
type cluster struct {
	mu       sync.Mutex
	replicas []replica
	workers  int
	cancel   Cancel
	tie      Tie
	admit    Admit
	// shed, when set, says whether a hedge arriving at r is refused.
	shed func(r *replica) bool
	// slow returns the factor a job's service time is multiplied by when
	// it starts on replica i now (a brownout), or 1.
	slow func(i int) float64

	jobs int           // queued or running; the run drains them to zero
	idle chan struct{} // closed when jobs reaches zero after drain asked

	// waiting is the requests queued on all replicas; area is its integral
	// over time, in request-nanoseconds, up to last. Their mean over a
	// span is the servers' mean queue.
	waiting int
	area    int64
	last    time.Time
}

// replica is one server: workers busy out of cluster.workers, and the
// attempts waiting for one, in arrival order: all of them in queue, or,
// with cluster.admit on, the primaries in queue and the hedges in hedges.
type replica struct {
	index   int
	busy    int
	queue   []*job // may hold dropped jobs, skipped when they reach the head
	hedges  []*job // likewise
	waiting int    // jobs in queue and hedges that are still queued
}

type jobState int

const (
	queued   jobState = iota
	running           // a worker is on it
	finished          // the worker completed it
	dropped           // cancelled while queued, or while running if the cancel mode frees the worker
)

// job is one attempt's request at a replica.
type job struct {
	state   jobState
	service time.Duration // before any brownout factor
	began   time.Time     // when a worker took it
	timer   *time.Timer   // completes it; set while running
	done    chan struct{} // closed when finished
	work    *time.Duration
	replica *replica
	hedge   bool

	// A job of a call of RunLoad, which ties and wasted work need: the
	// call (nil for a request of its own), its attempt, and ctx.
	call    *callTally
	attempt int
	ctx     context.Context
	// cut: a tie cancelled it; its answer, if it runs on, counts for
	// nothing. turnedAway: the admission turned it away after it waited,
	// or for a primary; wait is the timer of its wait.
	cut, turnedAway bool
	wait            *time.Timer
}

func newCluster(replicas, workers int, cancel Cancel) *cluster {
	c := &cluster{replicas: make([]replica, replicas), workers: workers, cancel: cancel}
	for i := range c.replicas {
		c.replicas[i].index = i
	}
	return c
}

// serve sends a request needing service to replica i and waits for a
// worker to complete it, or for ctx to end. A hedge may be refused at
// once with errShed. The worker time the request used is added to *work,
// which is guarded by c.mu; with CancelQueued it may grow after serve
// returned, until drain.
//
// A request whose ctx ends while queued leaves the queue. One whose ctx
// ends while running frees its worker at once with CancelRunning; with
// CancelQueued the worker runs it to completion, though serve returns at
// once.
func (c *cluster) serve(ctx context.Context, i int, hedge bool, service time.Duration, work *time.Duration) error {
	return c.enter(ctx, &job{service: service, work: work, replica: &c.replicas[i], hedge: hedge})
}

// enter is serve for a job that says where it goes and what it needs,
// and, if it belongs to a call, which call and attempt: a tie and the
// admission need them (see Tie and Admit). A hedge the admission turns
// away fails with errShed.
func (c *cluster) enter(ctx context.Context, j *job) error {
	c.mu.Lock()
	r := j.replica
	if j.hedge && (c.shed != nil && c.shed(r) || c.admitFullLocked(r)) {
		c.mu.Unlock()
		return errShed
	}
	j.done, j.ctx = make(chan struct{}), ctx
	if j.call != nil {
		j.call.jobs = append(j.call.jobs, j)
	}
	c.jobs++
	if r.busy < c.workers {
		c.startLocked(j)
	} else {
		c.queueLocked(j)
	}
	c.mu.Unlock()

	select {
	case <-j.done:
		if j.turnedAway {
			return errShed
		}
		return nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch j.state {
	case finished: // at the same instant as ctx's end: it did answer
		if !j.cut {
			return nil
		}
	case queued:
		c.tiedLocked(j)
		c.dropLocked(j)
	case running:
		c.tiedLocked(j)
		if c.cancel == CancelRunning {
			j.timer.Stop()
			c.endLocked(j, dropped)
		}
	}
	return ctx.Err()
}

// startLocked puts a worker of j's replica on j. Called with c.mu held.
func (c *cluster) startLocked(j *job) {
	r := j.replica
	r.busy++
	j.state = running
	j.began = time.Now()
	if j.wait != nil {
		j.wait.Stop()
	}
	d := j.service
	if c.slow != nil {
		d = time.Duration(float64(d) * c.slow(r.index))
	}
	j.timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if j.state == running { // not dropped since
			c.endLocked(j, finished)
			if !j.cut {
				// Before done: once its serve returns, Do may cancel the
				// others, and answeredLocked must see them as they were.
				c.answeredLocked(j)
				close(j.done)
			}
		}
	})
	if j.call != nil {
		j.call.began++
		c.startedLocked(j)
	}
}

// endLocked takes j's worker off it, counts the worker's time, and gives
// the worker the next queued job. Called with c.mu held.
func (c *cluster) endLocked(j *job, s jobState) {
	r := j.replica
	j.state = s
	d := time.Since(j.began)
	*j.work += d
	if j.call != nil {
		j.call.byAttempt[j.attempt] += d
	}
	r.busy--
	c.jobs--
	if next := c.nextLocked(r); next != nil {
		c.waitLocked(r, -1)
		c.startLocked(next)
	}
	c.checkIdleLocked()
}

// nextLocked takes the job a freed worker of r serves next off its queue,
// or returns nil if none waits: the oldest primary, else the oldest
// hedge. Without admission every job is in r.queue. A job whose call has
// cancelled it is dropped, not started, though its serve has not yet
// seen the cancellation: a tie or an answer cancels it at an instant
// whose other events may free this worker first. Called with c.mu held.
func (c *cluster) nextLocked(r *replica) *job {
	for _, q := range [...]*[]*job{&r.queue, &r.hedges} {
		for len(*q) > 0 {
			next := (*q)[0]
			(*q)[0] = nil
			*q = (*q)[1:]
			switch {
			case next.state != queued:
			case next.ctx.Err() != nil:
				c.tiedLocked(next)
				c.dropLocked(next)
			default:
				return next
			}
		}
	}
	return nil
}

// dropLocked takes queued job j out of its queue. Called with c.mu held.
func (c *cluster) dropLocked(j *job) {
	j.state = dropped
	if j.wait != nil {
		j.wait.Stop()
	}
	c.waitLocked(j.replica, -1)
	c.jobs--
	c.checkIdleLocked()
}

// waitLocked changes the requests queued on r by delta, and counts the
// queue's area up to now first. Called with c.mu held.
func (c *cluster) waitLocked(r *replica, delta int) {
	c.areaLocked()
	r.waiting += delta
	c.waiting += delta
}

// areaLocked counts the queue's area up to now and returns it. Called
// with c.mu held.
func (c *cluster) areaLocked() int64 {
	now := time.Now()
	if c.waiting > 0 {
		c.area += int64(c.waiting) * int64(now.Sub(c.last))
	}
	c.last = now
	return c.area
}

func (c *cluster) checkIdleLocked() {
	if c.jobs == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// drain waits until no job is queued or running: with CancelQueued,
// workers finish the requests of calls that have already returned. Call
// it once no more requests come.
func (c *cluster) drain() {
	c.mu.Lock()
	if c.jobs == 0 {
		c.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	c.idle = idle
	c.mu.Unlock()
	<-idle
}
