package lab

// The ties and the admission of RunPlan's sim, as tiequeue.go plays them
// for RunLoad, and what Do does with a hedge that fails at once: it
// starts the next attempt then.

// admitFull is cluster.admitFullLocked.
func (s *sim) admitFull(r *simReplica) bool {
	a := s.l.Admit
	return a.On && a.Queue > 0 && r.busy == s.l.Workers && s.waitingAt(r) >= a.Queue
}

// waitingAt counts the jobs still queued at r. The sim keeps no count per
// replica, which only a bounded queue needs.
func (s *sim) waitingAt(r *simReplica) int {
	n := 0
	for _, q := range [...][]int32{r.queue, r.hedges} {
		for _, id := range q {
			if s.jobs[id].state == queued {
				n++
			}
		}
	}
	return n
}

// queue is cluster.queueLocked.
func (s *sim) queue(id int) {
	h := s.p.Hedges + 1
	r := &s.replicas[s.jobs[id].replica]
	full := s.admitFull(r)
	s.wait(+1)
	if id%h == 0 || !s.l.Admit.On {
		r.queue = append(r.queue, int32(id))
		if full {
			s.evict(r)
		}
		return
	}
	r.hedges = append(r.hedges, int32(id))
	if w := s.l.Admit.HedgeWait; w > 0 {
		s.events.push(event{at: s.now + w, kind: turnAway, id: int32(id)})
	}
}

// evict is cluster.evictLocked: the hedge leaves the queue now, and its
// call hears of it a nanosecond later.
func (s *sim) evict(r *simReplica) {
	for _, id := range r.hedges {
		if j := &s.jobs[id]; j.state == queued {
			j.state = dropped
			s.wait(-1)
			s.events.push(event{at: s.now + 1, kind: evicted, id: id})
			return
		}
	}
}

// next is cluster.nextLocked: the job a freed worker of r takes, or -1.
func (s *sim) next(r *simReplica) int {
	for _, q := range [...]*[]int32{&r.queue, &r.hedges} {
		for len(*q) > 0 {
			next := int((*q)[0])
			*q = (*q)[1:]
			if s.jobs[next].state == queued {
				return next
			}
		}
	}
	return -1
}

// turnAway turns hedge id away if it still waits.
func (s *sim) turnAway(id int) {
	if j := &s.jobs[id]; j.state == queued {
		j.state = dropped
		s.wait(-1)
		s.refused(id / (s.p.Hedges + 1))
	}
}

// refused is a hedge of call i failing at once as retryable: Do starts
// the next attempt at once if the call may have one.
func (s *sim) refused(i int) {
	s.calls[i].shed.Add(1)
	if !s.decided[i] && int(s.started[i]) <= s.p.Hedges {
		s.attempt(i, int(s.started[i]))
	}
}

// started1 sends the start signal of job id, as cluster.startedLocked.
func (s *sim) started1(id int) {
	switch t := s.l.Tie; {
	case !t.On:
	case t.Signal == 0:
		s.signal(id)
	default:
		s.events.push(event{at: s.now + t.signalAfter(id%(s.p.Hedges+1)), kind: signal, id: int32(id)})
	}
}

// signal is cluster.tieLocked.
func (s *sim) signal(id int) {
	h := s.p.Hedges + 1
	call, j := id/h, &s.jobs[id]
	if j.state != running || j.cut || s.decided[call] {
		return
	}
	j.reported = true
	for k := range int(s.started[call]) {
		o := call*h + k
		oj := &s.jobs[o]
		if o == id || oj.reported || oj.cut {
			continue
		}
		switch oj.state {
		case queued:
			oj.cut = true
			s.calls[call].queuedCut++
			oj.state = dropped
			s.wait(-1)
		case running:
			oj.cut = true
			s.calls[call].crossed = true
			if s.l.Cancel == CancelRunning {
				s.end(o, dropped)
			}
		}
	}
}
