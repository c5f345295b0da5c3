package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// RunPlan plays ties and the two-class queue as RunLoad does through Do:
// the same row to the nanosecond, with the signal at once or a round trip
// later, hedges turned away by a full queue or after a wait (and the next
// attempt started at once, as Do starts it), in both cancellation modes.
func TestRunPlanMatchesRunLoadTied(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     Load
		plans []FixedPlan
	}{
		{"tied, cancel running", Load{Rho: 0.7, Tie: Tie{On: true}},
			[]FixedPlan{{Delay: 40 * ms, Hedges: 1}, {Delay: 10 * ms, Hedges: 2}}},
		{"tied, signal after 1ms, cancel queued only, ρ 0.95", Load{Rho: 0.95, Cancel: CancelQueued, Tie: Tie{On: true, Signal: ms}},
			[]FixedPlan{{Delay: 3 * ms / 2, Hedges: 1}, {Delay: 30 * ms, Hedges: 2}}},
		{"primaries first, queue 2, hedges wait 25ms", Load{Rho: 0.9, Cancel: CancelQueued, Admit: Admit{On: true, Queue: 2, HedgeWait: 25 * ms}},
			[]FixedPlan{{Delay: 40 * ms, Hedges: 1}, {Delay: 15 * ms, Hedges: 3}}},
		{"tied, primaries first, an overload", Load{Rho: 0.6, Tie: Tie{On: true, Signal: ms / 2}, Admit: Admit{On: true, Queue: 4, HedgeWait: 100 * ms},
			Overload: Overload{Rho: 1.3, Period: Period{800, 1200}}},
			[]FixedPlan{{Delay: 20 * ms, Hedges: 2}}},
	} {
		tc.l.Warm, tc.l.Calls, tc.l.Block = 500, 1500, 500
		for _, p := range tc.plans {
			t.Run(fmt.Sprintf("%s, %v", tc.name, p), func(t *testing.T) {
				got, err := RunPlan(tc.l, p)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(RunLoad(t, tc.l, p.Contender()), got); diff != "" {
					t.Errorf("RunPlan differs from RunLoad (-RunLoad +RunPlan):\n%s", diff)
				}
				if got.HedgeRate == 0 || got.WinRate == 0 {
					t.Errorf("the plan never hedged, or never won: %v", got)
				}
				if tc.l.Admit.On && got.Shed == 0 {
					t.Errorf("the admission turned no hedge away: %v", got)
				}
				t.Logf("%v wasted %.4f both %.4f", got, got.Wasted, got.Both)
			})
		}
	}
}

// tieRequest is one attempt of a tie timeline: attempt Attempt of call
// Call, sent at At to replica Replica, needing Service. The primary
// (Attempt 0) is never a hedge.
type tieRequest struct {
	Call, Attempt, Replica int
	At, Service            time.Duration
}

// tieAnswer is when an attempt's serve returned, with what, the worker
// time it used, and whether a worker took it at all.
type tieAnswer struct {
	Returned time.Duration
	Err      string
	Work     time.Duration
	Began    bool
}

// tieTimeline sends reqs to a cluster of two replicas in virtual time and
// returns their answers. With ties on, each call runs through Do, with a
// Fixed delay of its second attempt's At after its first's, so that the
// start signals reach Do through hedge.Started; otherwise each attempt is
// sent at its At, and a call's context ends when one of its attempts
// answers, as Do cancels the losers.
func tieTimeline(t *testing.T, workers int, cancel Cancel, tie Tie, admit Admit, reqs []tieRequest) []tieAnswer {
	t.Helper()
	got := make([]tieAnswer, len(reqs))
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(2, workers, cancel)
		c.tie, c.admit = tie, admit
		calls := map[int]*callTally{}
		attempts := map[int][]int{} // a call's requests, by attempt
		for i, r := range reqs {
			if calls[r.Call] == nil {
				calls[r.Call] = &callTally{}
			}
			attempts[r.Call] = append(attempts[r.Call], i)
		}
		jobs := make([]*job, len(reqs))
		for i, r := range reqs {
			jobs[i] = &job{replica: &c.replicas[r.Replica], hedge: r.Attempt > 0, service: r.Service,
				work: new(time.Duration), call: calls[r.Call], attempt: r.Attempt}
		}
		begin := time.Now()
		send := func(ctx context.Context, i int) error {
			err := c.enter(ctx, jobs[i])
			got[i].Returned = time.Since(begin)
			if err != nil {
				got[i].Err = err.Error()
			}
			return err
		}
		var wg sync.WaitGroup
		for _, is := range attempts {
			if tie.On {
				p := hedge.Policy[int]{MaxAttempts: len(is)}
				if len(is) > 1 {
					p.Delay = hedge.Fixed(reqs[is[1]].At - reqs[is[0]].At)
				}
				wg.Go(func() {
					time.Sleep(reqs[is[0]].At)
					hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
						return 0, send(ctx, is[hedge.Attempt(ctx)])
					})
				})
				continue
			}
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			for _, i := range is {
				wg.Go(func() {
					time.Sleep(reqs[i].At)
					if send(ctx, i) == nil {
						stop()
					}
				})
			}
		}
		wg.Wait()
		c.drain()
		for i, j := range jobs {
			c.mu.Lock()
			got[i].Work, got[i].Began = *j.work, !j.began.IsZero()
			c.mu.Unlock()
		}
		if c.jobs != 0 || c.waiting != 0 {
			t.Errorf("after drain: %d jobs, %d waiting", c.jobs, c.waiting)
		}
	})
	return got
}

func TestTieTimeline(t *testing.T) {
	canceled := context.Canceled.Error()
	shed := errShed.Error()
	for _, tc := range []struct {
		name    string
		workers int
		cancel  Cancel
		tie     Tie
		admit   Admit
		reqs    []tieRequest
		want    []tieAnswer
	}{{
		name: "a start cuts a sibling still queued", workers: 1, tie: Tie{On: true},
		reqs: []tieRequest{
			{Call: 9, Replica: 1, Service: 100 * ms},                          // keeps replica 1 busy
			{Call: 0, Replica: 1, At: ms, Service: 20 * ms},                   // queued behind it
			{Call: 0, Attempt: 1, Replica: 0, At: 10 * ms, Service: 200 * ms}, // starts at once: the primary leaves the queue
		},
		want: []tieAnswer{
			{Returned: 100 * ms, Work: 100 * ms, Began: true},
			{Returned: 10 * ms, Err: canceled},
			{Returned: 210 * ms, Work: 200 * ms, Began: true},
		},
	}, {
		name: "without ties, both run, and the queued one may win", workers: 1,
		reqs: []tieRequest{
			{Call: 9, Replica: 1, Service: 100 * ms},
			{Call: 0, Replica: 1, At: ms, Service: 20 * ms}, // starts at 100ms, and wins
			{Call: 0, Attempt: 1, Replica: 0, At: 10 * ms, Service: 200 * ms},
		},
		want: []tieAnswer{
			{Returned: 100 * ms, Work: 100 * ms, Began: true},
			{Returned: 120 * ms, Work: 20 * ms, Began: true},
			{Returned: 120 * ms, Err: canceled, Work: 110 * ms, Began: true},
		},
	}, {
		name: "a late signal lets both start, then cuts the one not yet reported", workers: 1, tie: Tie{On: true, Signal: ms},
		reqs: []tieRequest{
			{Call: 0, Replica: 0, At: 0, Service: 30 * ms},
			{Call: 0, Attempt: 1, Replica: 1, At: ms / 2, Service: 10 * ms}, // would win, but the primary's signal comes first
		},
		want: []tieAnswer{
			{Returned: 30 * ms, Work: 30 * ms, Began: true},
			{Returned: ms, Err: canceled, Work: ms / 2, Began: true},
		},
	}, {
		name: "a cut attempt runs on if running work cannot be cancelled", workers: 1, cancel: CancelQueued, tie: Tie{On: true, Signal: ms},
		reqs: []tieRequest{
			{Call: 0, Replica: 0, At: 0, Service: 30 * ms},
			{Call: 0, Attempt: 1, Replica: 1, At: ms / 2, Service: 10 * ms}, // its answer counts for nothing
		},
		want: []tieAnswer{
			{Returned: 30 * ms, Work: 30 * ms, Began: true},
			{Returned: ms, Err: canceled, Work: 10 * ms, Began: true},
		},
	}, {
		name: "an attempt that reported its start is never cut", workers: 1, tie: Tie{On: true, Signal: ms},
		reqs: []tieRequest{
			{Call: 0, Replica: 0, At: 0, Service: 50 * ms},
			{Call: 0, Attempt: 1, Replica: 1, At: 10 * ms, Service: 20 * ms}, // hedges against slow work, and wins
		},
		want: []tieAnswer{
			{Returned: 30 * ms, Err: canceled, Work: 30 * ms, Began: true},
			{Returned: 30 * ms, Work: 20 * ms, Began: true},
		},
	}, {
		name: "primaries first", workers: 1, admit: Admit{On: true},
		reqs: []tieRequest{
			{Call: 9, Replica: 0, Service: 100 * ms},
			{Call: 0, Attempt: 1, Replica: 0, At: 10 * ms, Service: 10 * ms}, // waits for the primary that came after it
			{Call: 1, Replica: 0, At: 20 * ms, Service: 10 * ms},
		},
		want: []tieAnswer{
			{Returned: 100 * ms, Work: 100 * ms, Began: true},
			{Returned: 120 * ms, Work: 10 * ms, Began: true},
			{Returned: 110 * ms, Work: 10 * ms, Began: true},
		},
	}, {
		name: "a full queue turns a hedge away at once, never a primary", workers: 1, admit: Admit{On: true, Queue: 1},
		reqs: []tieRequest{
			{Call: 9, Replica: 0, Service: 100 * ms},
			{Call: 1, Replica: 0, At: 10 * ms, Service: 10 * ms},
			{Call: 0, Attempt: 1, Replica: 0, At: 20 * ms, Service: 10 * ms}, // one waits: turned away
			{Call: 2, Replica: 0, At: 30 * ms, Service: 10 * ms},             // queued all the same
		},
		want: []tieAnswer{
			{Returned: 100 * ms, Work: 100 * ms, Began: true},
			{Returned: 110 * ms, Work: 10 * ms, Began: true},
			{Returned: 20 * ms, Err: shed},
			{Returned: 120 * ms, Work: 10 * ms, Began: true},
		},
	}, {
		name: "a primary takes the place of the hedge that waited longest", workers: 1, admit: Admit{On: true, Queue: 1},
		reqs: []tieRequest{
			{Call: 9, Replica: 0, Service: 100 * ms},
			{Call: 0, Attempt: 1, Replica: 0, At: 10 * ms, Service: 10 * ms}, // hears of it a nanosecond later
			{Call: 1, Replica: 0, At: 20 * ms, Service: 10 * ms},
		},
		want: []tieAnswer{
			{Returned: 100 * ms, Work: 100 * ms, Began: true},
			{Returned: 20*ms + 1, Err: shed},
			{Returned: 110 * ms, Work: 10 * ms, Began: true},
		},
	}, {
		name: "a hedge that waited too long is turned away", workers: 1, admit: Admit{On: true, HedgeWait: 50 * ms},
		reqs: []tieRequest{
			{Call: 9, Replica: 0, Service: 100 * ms},
			{Call: 0, Attempt: 1, Replica: 0, At: 10 * ms, Service: 10 * ms}, // turned away at 60ms
			{Call: 1, Attempt: 1, Replica: 0, At: 70 * ms, Service: 10 * ms}, // starts at 100ms, within its wait
		},
		want: []tieAnswer{
			{Returned: 100 * ms, Work: 100 * ms, Began: true},
			{Returned: 60 * ms, Err: shed},
			{Returned: 110 * ms, Work: 10 * ms, Began: true},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := tieTimeline(t, tc.workers, tc.cancel, tc.tie, tc.admit, tc.reqs)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadTieLoad(t *testing.T) {
	for _, l := range []Load{
		{Rho: 0.5, Tie: Tie{On: true, Signal: -ms}},
		{Rho: 0.5, Tie: Tie{Signal: ms}},
		{Rho: 0.5, Admit: Admit{On: true, Queue: -1}},
		{Rho: 0.5, Admit: Admit{On: true, HedgeWait: -ms}},
		{Rho: 0.5, Admit: Admit{Queue: 4}},
		{Rho: 0.5, Admit: Admit{HedgeWait: ms}},
	} {
		if _, err := l.withDefaults(); !errors.Is(err, errBadLoad) {
			t.Errorf("%+v: got %v, want an error wrapping errBadLoad", l, err)
		}
		if _, err := RunPlan(l, FixedPlan{}); !errors.Is(err, errBadLoad) {
			t.Errorf("RunPlan on %+v: got %v, want an error wrapping errBadLoad", l, err)
		}
	}
}
