package lab

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// request is one request of a queue timeline: sent at At to replica 0,
// needing Service, cancelled at Cancel if that is set.
type request struct {
	At, Service, Cancel time.Duration
	Hedge               bool
}

// answer is when serve returned for a request, with what, and how much
// worker time the request used by the end.
type answer struct {
	Returned time.Duration
	Err      string
	Work     time.Duration
}

// timeline sends requests to a one-replica cluster in virtual time and
// returns their answers.
func timeline(t *testing.T, workers int, cancel Cancel, shed func(*replica) bool, reqs []request) []answer {
	t.Helper()
	got := make([]answer, len(reqs))
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(1, workers, cancel)
		c.shed = shed
		begin := time.Now()
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Go(func() {
				time.Sleep(r.At)
				ctx, stop := context.WithCancel(t.Context())
				defer stop()
				if r.Cancel > 0 {
					time.AfterFunc(r.Cancel-r.At, stop)
				}
				err := c.serve(ctx, 0, r.Hedge, r.Service, &got[i].Work)
				got[i].Returned = time.Since(begin)
				if err != nil {
					got[i].Err = err.Error()
				}
			})
		}
		wg.Wait()
		c.drain()
		if c.jobs != 0 || c.replicas[0].busy != 0 || c.replicas[0].waiting != 0 {
			t.Errorf("after drain: %d jobs, %d busy, %d waiting", c.jobs, c.replicas[0].busy, c.replicas[0].waiting)
		}
	})
	return got
}

func TestQueue(t *testing.T) {
	canceled := context.Canceled.Error()
	slotFull := func(r *replica) bool { return r.busy == 1 && r.waiting >= 1 }
	for _, tc := range []struct {
		name    string
		workers int
		cancel  Cancel
		shed    func(*replica) bool
		reqs    []request
		want    []answer
	}{{
		name: "first in, first out", workers: 1,
		reqs: []request{{At: 0, Service: 100 * ms}, {At: 10 * ms, Service: 50 * ms}, {At: 20 * ms, Service: 5 * ms}},
		want: []answer{{Returned: 100 * ms, Work: 100 * ms}, {Returned: 150 * ms, Work: 50 * ms}, {Returned: 155 * ms, Work: 5 * ms}},
	}, {
		name: "workers serve side by side", workers: 2,
		reqs: []request{{At: 0, Service: 100 * ms}, {At: 10 * ms, Service: 50 * ms}, {At: 20 * ms, Service: 5 * ms}},
		want: []answer{{Returned: 100 * ms, Work: 100 * ms}, {Returned: 60 * ms, Work: 50 * ms}, {Returned: 65 * ms, Work: 5 * ms}},
	}, {
		name: "cancel running frees the worker", workers: 1, cancel: CancelRunning,
		reqs: []request{{At: 0, Service: 100 * ms, Cancel: 30 * ms}, {At: 10 * ms, Service: 50 * ms}},
		want: []answer{{Returned: 30 * ms, Err: canceled, Work: 30 * ms}, {Returned: 80 * ms, Work: 50 * ms}},
	}, {
		name: "cancel queued only keeps the worker busy", workers: 1, cancel: CancelQueued,
		reqs: []request{{At: 0, Service: 100 * ms, Cancel: 30 * ms}, {At: 10 * ms, Service: 50 * ms}},
		want: []answer{{Returned: 30 * ms, Err: canceled, Work: 100 * ms}, {Returned: 150 * ms, Work: 50 * ms}},
	}, {
		name: "a queued request leaves the queue", workers: 1, cancel: CancelQueued,
		reqs: []request{{At: 0, Service: 100 * ms}, {At: 10 * ms, Service: 50 * ms, Cancel: 40 * ms}, {At: 20 * ms, Service: 5 * ms}},
		want: []answer{{Returned: 100 * ms, Work: 100 * ms}, {Returned: 40 * ms, Err: canceled}, {Returned: 105 * ms, Work: 5 * ms}},
	}, {
		name: "a saturated replica sheds hedges, never primaries", workers: 1, shed: slotFull,
		reqs: []request{
			{At: 0, Service: 100 * ms},
			{At: 10 * ms, Service: 50 * ms, Hedge: true}, // a worker busy, nothing waits: queued
			{At: 20 * ms, Service: 5 * ms, Hedge: true},  // one waits: shed at once
			{At: 30 * ms, Service: 5 * ms},               // a primary: queued
		},
		want: []answer{
			{Returned: 100 * ms, Work: 100 * ms}, {Returned: 150 * ms, Work: 50 * ms},
			{Returned: 20 * ms, Err: errShed.Error()}, {Returned: 155 * ms, Work: 5 * ms},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := timeline(t, tc.workers, tc.cancel, tc.shed, tc.reqs)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadLoad(t *testing.T) {
	for _, l := range []Load{
		{},
		{Rho: -1},
		{Rho: 2.5},
		{Rho: 0.5, Workers: -1},
		{Rho: 0.5, Cancel: 7},
		{Rho: 0.5, ShedQueue: -1},
		{Rho: 0.5, Calls: -1},
		{Rho: 0.5, Brownout: Brownout{Replica: 4, Factor: 3}},
		{Rho: 0.5, Brownout: Brownout{Factor: -3}},
		{Rho: 0.5, Overload: Overload{Rho: 3}},
	} {
		if _, err := l.withDefaults(); !errors.Is(err, errBadLoad) {
			t.Errorf("%+v: got %v, want an error wrapping errBadLoad", l, err)
		}
	}
}

func TestFastSlowMean(t *testing.T) {
	l := Load{Service: Upstream{Name: "a copy of FastSlow", Draw: FastSlow.Draw}}
	exact := Load{Service: FastSlow}.meanService()
	if got := l.meanService(); got < exact*99/100 || got > exact*101/100 {
		t.Errorf("the mean of 100,000 draws is %v, the exact mean %v", got, exact)
	}
}
