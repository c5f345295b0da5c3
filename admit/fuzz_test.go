package admit_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge/admit"
)

// decodeGate turns fuzz bytes into a Gate and the requests sent to it.
func decodeGate(data []byte) (*admit.Gate, []request) {
	at := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	g := &admit.Gate{
		Limit:     1 + int(at(0)%3),
		Queue:     []int{0, -1, 1, 2, 3}[at(1)%5],
		HedgeWait: []time.Duration{0, -1, 3 * ms, 7 * ms}[at(2)%4],
	}
	var reqs []request
	var now time.Duration
	for i := 3; i+2 < len(data) && len(reqs) < 10; i += 3 {
		gap, flags, work := data[i], data[i+1], data[i+2]
		// Odd fractions of a millisecond keep most events off each
		// other's instants, where the order is open.
		now += time.Duration(gap%8)*ms + time.Duration(gap>>3)*31*time.Microsecond
		r := request{
			at: now, hedge: flags&1 != 0,
			work: time.Duration(1+work%15)*ms + time.Duration(work>>4)*53*time.Microsecond,
		}
		if flags&2 != 0 {
			r.cancel = now + time.Duration(1+flags>>2%12)*ms + time.Duration(flags>>6)*71*time.Microsecond
		}
		reqs = append(reqs, r)
	}
	return g, reqs
}

// modelGate is the reference: a discrete-event replay of Gate's rules,
// one event at a time. ok is false when two events fall on one instant,
// where the order is open.
func modelGate(g *admit.Gate, reqs []request) (got []string, ok bool) {
	hedgeWait := g.HedgeWait
	if hedgeWait == 0 {
		hedgeWait = admit.DefaultHedgeWait
	}
	const (
		arrives = iota
		gives   // its context ends while it waits
		expires // a hedge's wait runs out
		leaves  // it is done executing
	)
	got = make([]string, len(reqs))
	var (
		running            int
		primaries, hedges  []int
		arrived            = make([]bool, len(reqs))
		queuedAt, startsAt = map[int]time.Duration{}, map[int]time.Duration{}
		left               = map[int]bool{}
	)
	start := func(i int, now time.Duration) {
		startsAt[i] = now
		got[i] = fmt.Sprintf("%v start", now)
	}
	fail := func(i int, now time.Duration, err error) { got[i] = fmt.Sprintf("%v %v", now, err) }
	unqueue := func(i int) {
		delete(queuedAt, i)
		primaries = slices.DeleteFunc(primaries, func(j int) bool { return j == i })
		hedges = slices.DeleteFunc(hedges, func(j int) bool { return j == i })
	}
	for {
		next, what, who, tie := time.Duration(-1), 0, 0, false
		consider := func(at time.Duration, e, i int) {
			switch {
			case next < 0 || at < next:
				next, what, who, tie = at, e, i, false
			case at == next:
				tie = true
			}
		}
		for i, r := range reqs {
			switch q, queued := queuedAt[i]; {
			case !arrived[i]:
				consider(r.at, arrives, i)
			case queued:
				if r.cancel > 0 {
					consider(r.cancel, gives, i)
				}
				if r.hedge {
					consider(q+hedgeWait, expires, i)
				}
			}
			if s, ok := startsAt[i]; ok && !left[i] {
				consider(s+r.work, leaves, i)
			}
		}
		switch {
		case next < 0:
			return got, true
		case tie:
			return nil, false
		}
		now, r := next, reqs[who]
		switch what {
		case arrives:
			arrived[who] = true
			waiting := len(primaries) + len(hedges)
			full := g.Queue < 0 || g.Queue > 0 && waiting >= g.Queue
			switch {
			case r.cancel > 0 && r.cancel <= now:
				fail(who, now, errCanceled)
			case running < g.Limit:
				running++
				start(who, now)
			case r.hedge && (full || hedgeWait < 0):
				fail(who, now, admit.ErrShed)
			case full && (g.Queue < 0 || len(hedges) == 0):
				fail(who, now, admit.ErrFull)
			default:
				if full {
					fail(hedges[0], now, admit.ErrShed)
					unqueue(hedges[0])
				}
				queuedAt[who] = now
				if r.hedge {
					hedges = append(hedges, who)
				} else {
					primaries = append(primaries, who)
				}
			}
		case gives:
			unqueue(who)
			fail(who, now, errCanceled)
		case expires:
			unqueue(who)
			fail(who, now, admit.ErrShed)
		case leaves:
			left[who] = true
			switch {
			case len(primaries) > 0:
				i := primaries[0]
				unqueue(i)
				start(i, now)
			case len(hedges) > 0:
				i := hedges[0]
				unqueue(i)
				start(i, now)
			default:
				running--
			}
		}
	}
}

var errCanceled = fmt.Errorf("%s", "context deadline exceeded")

func FuzzGate(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 2, 0, 0, 9, 1, 1, 9, 1, 0, 9},          // a primary overtakes a waiting hedge
		{0, 2, 0, 0, 0, 9, 1, 0, 9, 1, 1, 9, 1, 0, 9}, // a full queue: shed, then displaced
		{1, 0, 3, 0, 0, 14, 1, 2, 3, 1, 7, 3, 1, 1, 3},
		{0, 1, 0, 0, 0, 5, 1, 0, 5, 1, 1, 5}, // nothing waits
		{2, 3, 1, 0, 0, 9, 0, 0, 9, 0, 0, 9, 1, 11, 2, 1, 3, 4},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, reqs := decodeGate(data)
		want, ok := modelGate(g, reqs)
		if !ok {
			t.Skip("two events at one instant: the order is open")
		}
		got := play(t, g, reqs)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("gate {Limit %d Queue %d HedgeWait %v}, requests %+v (-model +Gate)\n%s", g.Limit, g.Queue, g.HedgeWait, reqs, diff)
		}
	})
}
