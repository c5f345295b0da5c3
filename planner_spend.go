package hedge

import "context"

// began counts attempt k, which Do is starting, against the plans' load.
func (p *Planner) began(_ context.Context, k int) {
	s := p.load()
	if s.err != nil {
		return
	}
	if k == 0 {
		s.spend(s.loadMilli)
	} else {
		s.spend(-milli)
	}
}

// gaveBack returns what began counted for extra attempt k, which never
// ran. The call stays counted.
func (p *Planner) gaveBack(_ context.Context, k int) {
	if s := p.load(); s.err == nil && k > 0 {
		s.spend(milli)
	}
}

// spendAheadCalls bounds how far ahead of Load the plans may spend, in
// calls' worth of Load: 200 calls, so that in any 1,000 calls the extra
// attempts stay within 1.2 × Load per call.
const spendAheadCalls = 200

// spend adds delta thousandths of an attempt to the plans' credit, up to
// spendAhead. The credit may go below zero: hedges scheduled before it
// ran out still start, and later calls pay them back.
func (s *plannerState) spend(delta int64) {
	for {
		v := s.credit.Load()
		n := min(v+delta, s.spendAhead)
		if n == v || s.credit.CompareAndSwap(v, n) {
			return
		}
	}
}
