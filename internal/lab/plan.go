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
// about ten times faster (and the oracles, which run many plans on one
// Load, draw its service times once for all of them), and it is safe to
// call from any goroutine.
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
	if err := l.canPlan(p); err != nil {
		return LoadRow{}, err
	}
	return runPlan(l, newDraws(l, p.Hedges), p), nil
}

// canPlan returns an error wrapping errBadPlan if RunPlan cannot run p on
// l, which has its defaults.
func (l Load) canPlan(p FixedPlan) error {
	switch {
	case p.Hedges < 0 || p.Hedges >= l.Replicas || p.Hedges >= hedge.MaxAttemptsLimit:
		return fmt.Errorf("%w: %d hedges with %d replicas", errBadPlan, p.Hedges, l.Replicas)
	case p.Hedges > 0 && p.Delay <= 0:
		return fmt.Errorf("%w: delay %v", errBadPlan, p.Delay)
	case p.Hedges > 0 && l.Shed:
		return fmt.Errorf("%w: hedges with shedding replicas", errBadPlan)
	}
	return nil
}

// draws are the draws of a run of a Load, which every plan meets alike:
// when each call arrives, its primary's replica, and the service time of
// each of its first attempts.
type draws struct {
	attempts int             // per call in service
	arrivals []time.Duration // since the run began
	primary  []int
	service  []time.Duration // of attempt k of call i at i*attempts+k
}

// newDraws draws what runLoad draws, in its order, for plans of up to
// hedges hedges. l has its defaults.
func newDraws(l Load, hedges int) *draws {
	n := l.Warm + l.Calls
	d := &draws{attempts: hedges + 1, arrivals: make([]time.Duration, n), primary: make([]int, n),
		service: make([]time.Duration, n*(hedges+1))}
	capacity := float64(l.Replicas*l.Workers) / float64(l.meanService())
	gen := rand.New(rand.NewPCG(l.Seed, 0x6c6f6164))
	var at time.Duration
	for i := range n {
		rho := l.Rho
		if l.Overload.Rho != 0 && l.Overload.holds(i) {
			rho = l.Overload.Rho
		}
		at += time.Duration(gen.ExpFloat64() / (rho * capacity))
		d.arrivals[i], d.primary[i] = at, gen.IntN(l.Replicas)
		for k := range d.attempts {
			d.service[i*d.attempts+k] = l.service(i, k)
		}
	}
	return d
}

// runPlan is RunPlan on draws made for at least p's attempts.
func runPlan(l Load, d *draws, p FixedPlan) LoadRow {
	n := len(d.arrivals)
	s := &sim{l: l, p: p, d: d,
		replicas: make([]simReplica, l.Replicas),
		calls:    make([]callTally, n),
		started:  make([]int32, n),
		decided:  make([]bool, n),
		jobs:     make([]simJob, n*(p.Hedges+1)),
		events:   eventHeap{es: make([]event, 0, 64)},
	}
	s.run()
	for i := range s.calls {
		s.calls[i].attempts.Store(s.started[i])
	}
	row := summarizeLoad(p.String(), l, s.calls, s.marks)
	if p.Hedges > 0 {
		row.Delay = p.Delay
	}
	return row
}

// sim is one run of runPlan: the cluster of RunLoad, as plain state, and
// the events still to come.
type sim struct {
	l        Load
	p        FixedPlan
	d        *draws
	now      time.Duration // since the run began
	events   eventHeap
	replicas []simReplica
	calls    []callTally // attempts is left to the end, from started
	started  []int32     // attempts of each call so far
	decided  []bool
	jobs     []simJob // attempt k of call i at i*(p.Hedges+1)+k
	arrived  int      // the last call to arrive
	marks    []queueMark

	waiting int   // requests queued on all replicas
	area    int64 // waiting's integral over time, up to now
	last    time.Duration
}

type simReplica struct {
	busy   int
	queue  []int32 // jobs, in arrival order; may hold dropped ones, skipped when they reach the head
	hedges []int32 // likewise, the hedges when the admission is on
}

type simJob struct {
	state         jobState // queued until started: a job that never started is never looked at
	replica       int32
	began         time.Duration
	reported, cut bool // as job's
}

// run plays the events in order of time, and in the order they were
// scheduled at one instant, until the last request is done.
func (s *sim) run() {
	if len(s.d.arrivals) > 0 {
		s.events.push(event{at: s.d.arrivals[0], kind: arrive})
	}
	for len(s.events.es) > 0 {
		e := s.events.pop()
		s.now = e.at
		switch e.kind {
		case arrive:
			s.arrive(int(e.id))
		case hedgeDue:
			// Stale if a retry started the attempt before its time.
			call, k := int(e.id)/(s.p.Hedges+1), int(e.id)%(s.p.Hedges+1)
			if !s.decided[call] && int(s.started[call]) == k {
				s.attempt(call, k)
			}
		case finish:
			s.finish(int(e.id))
		case signal:
			s.signal(int(e.id))
		case turnAway:
			s.turnAway(int(e.id))
		case evicted:
			s.refused(int(e.id) / (s.p.Hedges + 1))
		}
	}
}

func (s *sim) arrive(i int) {
	if s.l.blockStart(i) {
		s.mark()
	}
	s.arrived = i
	s.attempt(i, 0)
	if i+1 < len(s.d.arrivals) {
		s.events.push(event{at: s.d.arrivals[i+1], kind: arrive, id: int32(i + 1)})
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
	s.started[i]++
	id := i*(s.p.Hedges+1) + k
	if k < s.p.Hedges {
		s.events.push(event{at: s.now + s.p.Delay, kind: hedgeDue, id: int32(id + 1)})
	}
	j := &s.jobs[id]
	j.replica = int32((s.d.primary[i] + k) % s.l.Replicas)
	r := &s.replicas[j.replica]
	switch {
	case r.busy < s.l.Workers:
		s.start(id)
	case k > 0 && s.admitFull(r):
		j.state = dropped
		s.refused(i)
	default:
		s.queue(id)
	}
}

// start puts a worker on job id, as cluster.startLocked does.
func (s *sim) start(id int) {
	j := &s.jobs[id]
	s.replicas[j.replica].busy++
	j.state = running
	j.began = s.now
	h := s.p.Hedges + 1
	d := s.d.service[id/h*s.d.attempts+id%h]
	if b := s.l.Brownout; b.Factor != 0 && int(j.replica) == b.Replica && b.holds(s.arrived) {
		d = time.Duration(float64(d) * b.Factor)
	}
	s.events.push(event{at: s.now + d, kind: finish, id: int32(id)})
	s.calls[id/h].began++
	s.started1(id)
}

// finish completes job id, if it still runs: the first attempt of its
// call to complete decides the call, and the others are cancelled.
func (s *sim) finish(id int) {
	if s.jobs[id].state != running {
		return // dropped since
	}
	s.end(id, finished)
	h := s.p.Hedges + 1
	call := id / h
	if s.decided[call] || s.jobs[id].cut {
		return
	}
	s.decided[call] = true
	t := &s.calls[call]
	t.latency = s.now - s.d.arrivals[call]
	t.winner = id % h
	for k := range int(s.started[call]) {
		switch o := call*h + k; {
		case s.jobs[o].state == queued:
			s.jobs[o].state = dropped
			s.wait(-1)
		case s.jobs[o].state == running && s.l.Cancel == CancelRunning:
			s.end(o, dropped)
		}
	}
}

// end takes job id's worker off it, counts the worker's time, and gives
// the worker the next queued job, as cluster.endLocked does.
func (s *sim) end(id int, st jobState) {
	j := &s.jobs[id]
	j.state = st
	c := &s.calls[id/(s.p.Hedges+1)]
	c.work += s.now - j.began
	c.byAttempt[id%(s.p.Hedges+1)] += s.now - j.began
	r := &s.replicas[j.replica]
	r.busy--
	if next := s.next(r); next >= 0 {
		s.wait(-1)
		s.start(next)
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
	signal   // a start signal reaches its call
	turnAway // a hedge has waited Admit.HedgeWait
	evicted  // a primary took a hedge's place in a full queue
)

// event is something due at a time: a call's arrival (id is the call),
// a hedge or a request's completion (id is the job). seq orders the
// events of one instant as they were scheduled.
type event struct {
	at   time.Duration
	seq  uint64
	kind eventKind
	id   int32
}

// eventHeap is a binary min-heap of events by (at, seq), typed rather
// than through container/heap, whose interface boxes every event.
type eventHeap struct {
	es  []event
	seq uint64
}

func (h *eventHeap) less(a, b int) bool {
	x, y := &h.es[a], &h.es[b]
	return x.at < y.at || x.at == y.at && x.seq < y.seq
}

func (h *eventHeap) push(e event) {
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
