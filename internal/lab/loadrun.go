package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// Contender is one row of a load table: a name, and a function that makes
// its policy afresh for each run. RunLoad calls Policy inside the run's
// synctest bubble, so a budget built there reads the bubble's virtual
// clock, and a learned delay starts each run knowing nothing. A
// Contender without a Policy fails the run; one may be shared by
// concurrent runs if its Policy may be called concurrently.
type Contender struct {
	Name   string
	Policy func() hedge.Policy[int]
}

// callTally is what one call did.
type callTally struct {
	attempts atomic.Int32  // attempts that reached fn
	shed     atomic.Int32  // hedges a replica refused
	work     time.Duration // worker time its requests used; guarded by cluster.mu
	latency  time.Duration // from arrival to Do's return
	winner   int           // the attempt whose answer Do returned; -1 if none

	// Guarded by cluster.mu, like work: the worker time of each attempt,
	// the attempts a worker took, and the call's jobs, for a tie.
	byAttempt [hedge.MaxAttemptsLimit]time.Duration
	began     int32
	crossed   bool  // a tie cut a running attempt: the start signals crossed
	answered  bool  // an attempt answered: the call is decided
	queuedCut int32 // attempts a tie cut while they were queued
	jobs      []*job
}

// RunLoad runs l.Warm+l.Calls calls, arriving at l's rate, each through
// hedge.Do with c's policy and each on its own goroutine, in a synctest
// bubble, and summarizes the last l.Calls. Attempt k of a call goes to
// replica (p + k) mod Replicas, where p, the primary's replica, is drawn
// at random. Every draw (arrivals, p, service times) depends only on
// l.Seed and the call's and attempt's indices, and virtual time is exact:
// a run is a pure function of l and the policy.
//
// A Load RunLoad cannot run, or a Contender without a Policy, fails t;
// so do calls that return an error (the first is reported).
func RunLoad(t *testing.T, l Load, c Contender) LoadRow {
	t.Helper()
	l, err := l.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy == nil {
		t.Fatalf("lab: Contender %q has no Policy", c.Name)
	}
	var row LoadRow
	synctest.Test(t, func(t *testing.T) {
		p := c.Policy()
		calls, marks := runLoad(t, l, p)
		row = summarizeLoad(c.Name, l, calls, marks)
		describe(&row, p)
	})
	return row
}

// runLoad is RunLoad inside the bubble. It returns what each call did,
// and the queue's area when each block of measured calls began and when
// the last call arrived.
func runLoad(t *testing.T, l Load, p hedge.Policy[int]) ([]callTally, []queueMark) {
	cl := newCluster(l.Replicas, l.Workers, l.Cancel)
	cl.tie, cl.admit = l.Tie, l.Admit
	arrived := 0 // the last call to arrive; guarded by cl.mu
	if b := l.Brownout; b.Factor != 0 {
		cl.slow = func(i int) float64 {
			if i == b.Replica && b.holds(arrived) {
				return b.Factor
			}
			return 1
		}
	}
	if l.Shed {
		cl.shed = func(r *replica) bool { return r.busy == cl.workers && r.waiting >= l.ShedQueue }
	}
	// Calls per nanosecond at utilisation 1.
	capacity := float64(l.Replicas*l.Workers) / float64(l.meanService())
	gen := rand.New(rand.NewPCG(l.Seed, 0x6c6f6164))
	calls := make([]callTally, l.Warm+l.Calls)
	var marks []queueMark
	begin := time.Now()
	mark := func() {
		cl.mu.Lock()
		marks = append(marks, queueMark{time.Since(begin), cl.areaLocked()})
		cl.mu.Unlock()
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := range calls {
		rho := l.Rho
		if l.Overload.Rho != 0 && l.Overload.holds(i) {
			rho = l.Overload.Rho
		}
		time.Sleep(time.Duration(gen.ExpFloat64() / (rho * capacity)))
		primary := gen.IntN(l.Replicas)
		if l.blockStart(i) {
			mark()
		}
		cl.mu.Lock()
		arrived = i
		cl.mu.Unlock()
		tl := &calls[i]
		attempt := func(ctx context.Context) (int, error) {
			k := hedge.Attempt(ctx)
			tl.attempts.Add(1)
			err := cl.enter(ctx, &job{replica: &cl.replicas[(primary+k)%l.Replicas], hedge: k > 0,
				service: l.service(i, k), work: &tl.work, call: tl, attempt: k})
			if err != nil {
				if errors.Is(err, errShed) {
					tl.shed.Add(1)
				}
				return -1, err
			}
			return k, nil
		}
		wg.Go(func() {
			begin := time.Now()
			v, err := hedge.Do(t.Context(), p, attempt)
			tl.latency = time.Since(begin)
			tl.winner = v
			if err != nil {
				tl.winner = -1
				if failed.Add(1) == 1 {
					t.Errorf("call %d: %v", i, err)
				}
			}
		})
	}
	mark()
	wg.Wait()
	cl.drain()
	if n := failed.Load(); n > 1 {
		t.Errorf("%d calls failed in all", n)
	}
	return calls, marks
}

// blockStart reports whether call i, by arrival, begins a block of
// measured calls.
func (l Load) blockStart(i int) bool {
	return i >= l.Warm && (i-l.Warm)%l.Block == 0
}

// service is the service time of attempt k of call i.
func (l Load) service(i, k int) time.Duration {
	if l.Correlated {
		// Attempts of one call that start at the same instant (two
		// workers freed by one answer) must not end at the same instant,
		// or which one answers first is up to the scheduler: a
		// nanosecond per attempt decides it for the primary.
		return l.shifted(i, l.draw(i, 0)) + time.Duration(k)
	}
	return l.shifted(i, l.draw(i, k))
}

// shifted is d, a service time of call i, moved by l.Shift.
func (l Load) shifted(i int, d time.Duration) time.Duration {
	if l.Shift.Factor == 0 || i < l.Shift.From {
		return d
	}
	return time.Duration(float64(d) * l.Shift.Factor)
}

func (l Load) draw(i, k int) time.Duration {
	return l.Service.Draw(rand.New(rand.NewPCG(uint64(i), uint64(k)+1+l.Seed<<32)))
}

// describe records in row the delay p ended with: the first hedge's
// delay (negative for none), and a Planner's plan.
func describe(row *LoadRow, p hedge.Policy[int]) {
	switch {
	case p.MaxAttempts == 1:
		return
	case p.Delay == nil:
		row.Delay = hedge.DefaultDelay
		return
	}
	if pl, ok := p.Delay.(interface{ Plan() hedge.Plan }); ok {
		plan := pl.Plan()
		row.Plan = &plan
		row.Delay = plan.Delay
		if plan.Hedges == 0 {
			row.Delay = -1
		}
		return
	}
	row.Delay = p.Delay.Next(context.Background(), 0)
}

// Sweep runs every contender at every utilisation in rhos, the rest of
// the scenario as base says, and returns the rows load by load, in the
// order of cs within each load.
//
// The runs are independent, each a pure function of its Load and policy in
// a bubble of its own, so they run in parallel: each as a parallel
// subtest of a subtest named "sweep", at most -test.parallel at once
// (GOMAXPROCS by default). Subtests, not goroutines: synctest.Test fails
// its test with FailNow, which only the test's own goroutine may call. If
// any run fails, Sweep stops t once every run has ended, as a failing run
// did before the runs were parallel.
func Sweep(t *testing.T, base Load, rhos []float64, cs []Contender) []LoadRow {
	t.Helper()
	rows := make([]LoadRow, len(rhos)*len(cs))
	ok := t.Run("sweep", func(t *testing.T) {
		for i := range rows {
			l, c := base, cs[i%len(cs)]
			l.Rho = rhos[i/len(cs)]
			t.Run(fmt.Sprintf("%s at ρ=%v", c.Name, l.Rho), func(t *testing.T) {
				t.Parallel()
				rows[i] = RunLoad(t, l, c)
			})
		}
	})
	if !ok {
		t.FailNow()
	}
	return rows
}
