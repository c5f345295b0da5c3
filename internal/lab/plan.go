package lab

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tailcut/hedge"
)

// FixedPlan is a plan fixed in advance: Hedges hedges, one every Delay
// after the call starts, for as long as no attempt has answered. The zero
// FixedPlan sends no hedge. It is a plain value.
type FixedPlan struct {
	Delay  time.Duration
	Hedges int
}

// String names the plan as a row of a table.
func (p FixedPlan) String() string {
	if p.Hedges == 0 {
		return "no hedging"
	}
	return fmt.Sprintf("fixed %v ×%d", roundDelay(p.Delay), p.Hedges)
}

// Contender is the plan played by hedge.Do: a Fixed delay and MaxAttempts
// of Hedges+1.
func (p FixedPlan) Contender() Contender {
	return Contender{Name: p.String(), Policy: func() hedge.Policy[int] {
		return hedge.Policy[int]{Delay: hedge.Fixed(p.Delay), MaxAttempts: p.Hedges + 1}
	}}
}

// errBadPlan is wrapped by RunPlan's complaint about a plan it cannot run.
var errBadPlan = errors.New("lab: bad FixedPlan")

// RunPlan runs l with plan p and returns the row that RunLoad returns for
// p.Contender(): the same arrivals, routes and service times, the same
// queues, the same figures to the nanosecond. It computes the run event by
// event instead of playing every call through Do in a bubble, which is
// some hundred times faster, and it is safe to call from any goroutine:
// the oracles run hundreds of plans on the same draws.
//
// A plan of more hedges than l has replicas less one would send two
// attempts of a call to one replica, and with l.Shed a refused hedge would
// start the next at once, which RunPlan does not model: it returns an
// error for either, as for a Load RunLoad cannot run.
func RunPlan(l Load, p FixedPlan) (LoadRow, error) {
	l, err := l.withDefaults()
	if err != nil {
		return LoadRow{}, err
	}
	switch {
	case p.Hedges < 0 || p.Hedges >= l.Replicas || p.Hedges >= hedge.MaxAttemptsLimit:
		return LoadRow{}, fmt.Errorf("%w: %d hedges with %d replicas", errBadPlan, p.Hedges, l.Replicas)
	case p.Hedges > 0 && p.Delay <= 0:
		return LoadRow{}, fmt.Errorf("%w: delay %v", errBadPlan, p.Delay)
	case p.Hedges > 0 && l.Shed:
		return LoadRow{}, fmt.Errorf("%w: hedges with shedding replicas", errBadPlan)
	}
	s := newSim(l, p)
	s.run()
	row := summarizeLoad(p.String(), l, s.calls, s.marks)
	if p.Hedges > 0 {
		row.Delay = p.Delay
	}
	return row, nil
}

// sim is one run of RunPlan: the cluster of RunLoad, as plain state, and
// the events still to come.
type sim struct {
	l        Load
	p        FixedPlan
	now      time.Duration // since the run began
	events   eventHeap
	replicas []simReplica
	calls    []callTally
	state    []simCall
	arrivals []time.Duration // when call i arrives
	primary  []int           // the replica of call i's primary
	arrived  int             // the last call to arrive
	marks    []queueMark

	waiting int   // requests queued on all replicas
	area    int64 // waiting's integral over time, up to now
	last    time.Duration
}

type simReplica struct {
	busy  int
	queue []*simJob // may hold dropped jobs, skipped when they reach the head
}

// simCall is what a call has done so far; the rest is in its callTally.
type simCall struct {
	decided bool
	jobs    []*simJob // by attempt
}

type simJob struct {
	call, k, replica int
	state            jobState
	service          time.Duration // before any brownout factor
	began            time.Duration
}

func newSim(l Load, p FixedPlan) *sim {
	n := l.Warm + l.Calls
	s := &sim{
		l: l, p: p,
		replicas: make([]simReplica, l.Replicas),
		calls:    make([]callTally, n),
		state:    make([]simCall, n),
		arrivals: make([]time.Duration, n),
		primary:  make([]int, n),
	}
	// The draws of runLoad, in its order.
	capacity := float64(l.Replicas*l.Workers) / float64(l.meanService())
	gen := rand.New(rand.NewPCG(l.Seed, 0x6c6f6164))
	var at time.Duration
	for i := range n {
		rho := l.Rho
		if l.Overload.Rho != 0 && l.Overload.holds(i) {
			rho = l.Overload.Rho
		}
		at += time.Duration(gen.ExpFloat64() / (rho * capacity))
		s.arrivals[i], s.primary[i] = at, gen.IntN(l.Replicas)
	}
	return s
}

// run plays the events in order of time, and in the order they were
// scheduled at one instant, until the last request is done.
func (s *sim) run() {
	if len(s.arrivals) > 0 {
		s.events.push(event{at: s.arrivals[0], kind: arrive})
	}
	for s.events.len() > 0 {
		e := s.events.pop()
		s.now = e.at
		switch e.kind {
		case arrive:
			s.arrive(e.call)
		case hedgeDue:
			if !s.state[e.call].decided {
				s.attempt(e.call, e.k)
			}
		case finish:
			s.finish(e.job)
		}
	}
}

func (s *sim) arrive(i int) {
	if s.l.blockStart(i) {
		s.mark()
	}
	s.arrived = i
	s.attempt(i, 0)
	if i+1 < len(s.arrivals) {
		s.events.push(event{at: s.arrivals[i+1], kind: arrive, call: i + 1})
	} else {
		s.mark()
	}
}

func (s *sim) mark() {
	s.account()
	s.marks = append(s.marks, queueMark{s.now, s.area})
}

// attempt starts attempt k of call i, and schedules the next hedge.
func (s *sim) attempt(i, k int) {
	s.calls[i].attempts.Add(1)
	j := &simJob{call: i, k: k, replica: (s.primary[i] + k) % s.l.Replicas, service: s.l.service(i, k)}
	s.state[i].jobs = append(s.state[i].jobs, j)
	r := &s.replicas[j.replica]
	if r.busy < s.l.Workers {
		s.start(j)
	} else {
		r.queue = append(r.queue, j)
		s.wait(+1)
	}
	if k < s.p.Hedges {
		s.events.push(event{at: s.now + s.p.Delay, kind: hedgeDue, call: i, k: k + 1})
	}
}

// start puts a worker on j, as cluster.startLocked does.
func (s *sim) start(j *simJob) {
	s.replicas[j.replica].busy++
	j.state = running
	j.began = s.now
	d := j.service
	if b := s.l.Brownout; b.Factor != 0 && j.replica == b.Replica && b.holds(s.arrived) {
		d = time.Duration(float64(d) * b.Factor)
	}
	s.events.push(event{at: s.now + d, kind: finish, job: j})
}

// finish completes j, if it still runs: the first attempt of its call to
// complete decides the call, and the others are cancelled.
func (s *sim) finish(j *simJob) {
	if j.state != running {
		return // dropped since
	}
	s.end(j, finished)
	c := &s.state[j.call]
	if c.decided {
		return
	}
	c.decided = true
	t := &s.calls[j.call]
	t.latency = s.now - s.arrivals[j.call]
	t.winner = j.k
	for _, o := range c.jobs {
		switch {
		case o.state == queued:
			o.state = dropped
			s.wait(-1)
		case o.state == running && s.l.Cancel == CancelRunning:
			s.end(o, dropped)
		}
	}
}

// end takes j's worker off it, counts the worker's time, and gives the
// worker the next queued job, as cluster.endLocked does.
func (s *sim) end(j *simJob, st jobState) {
	j.state = st
	s.calls[j.call].work += s.now - j.began
	r := &s.replicas[j.replica]
	r.busy--
	for len(r.queue) > 0 {
		next := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		if next.state == queued {
			s.wait(-1)
			s.start(next)
			break
		}
	}
}

func (s *sim) wait(delta int) {
	s.account()
	s.waiting += delta
}

func (s *sim) account() {
	s.area += int64(s.waiting) * int64(s.now-s.last)
	s.last = s.now
}

type eventKind uint8

const (
	arrive eventKind = iota
	hedgeDue
	finish
)

// event is something due at a time: a call's arrival, a hedge, a
// request's completion. seq orders the events of one instant as they
// were scheduled.
type event struct {
	at   time.Duration
	seq  uint64
	kind eventKind
	call int
	k    int
	job  *simJob
}

// eventHeap is a binary min-heap of events by (at, seq), typed rather
// than through container/heap, whose interface boxes every event.
type eventHeap struct {
	es  []event
	seq uint64
}

func (h *eventHeap) len() int { return len(h.es) }

func (h *eventHeap) less(a, b int) bool {
	x, y := &h.es[a], &h.es[b]
	return x.at < y.at || x.at == y.at && x.seq < y.seq
}

func (h *eventHeap) push(e event) {
	if e.job != nil {
		e.call = e.job.call
	}
	e.seq = h.seq
	h.seq++
	h.es = append(h.es, e)
	for i := len(h.es) - 1; i > 0; {
		up := (i - 1) / 2
		if !h.less(i, up) {
			break
		}
		h.es[i], h.es[up] = h.es[up], h.es[i]
		i = up
	}
}

func (h *eventHeap) pop() event {
	top := h.es[0]
	last := len(h.es) - 1
	h.es[0] = h.es[last]
	h.es[last] = event{}
	h.es = h.es[:last]
	for i := 0; ; {
		l, r, least := 2*i+1, 2*i+2, i
		if l < last && h.less(l, least) {
			least = l
		}
		if r < last && h.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		h.es[i], h.es[least] = h.es[least], h.es[i]
		i = least
	}
	return top
}
