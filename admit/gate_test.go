package admit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tailcut/hedge/admit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// request is one request a test sends through a Gate.
type request struct {
	at     time.Duration // when it enters, from the start
	hedge  bool
	work   time.Duration // how long it executes once admitted
	cancel time.Duration // when its context ends, from the start; 0: never
}

// play sends reqs through g in a synctest bubble and returns, per
// request, when Enter returned and with what: "start" or the error.
func play(t *testing.T, g *admit.Gate, reqs []request) []string {
	t.Helper()
	got := make([]string, len(reqs))
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Go(func() {
				time.Sleep(r.at)
				ctx := t.Context()
				if r.cancel > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, r.cancel-r.at)
					defer cancel()
				}
				pass, err := g.Enter(ctx, r.hedge)
				what := "start"
				if err != nil {
					what = err.Error()
				}
				got[i] = fmt.Sprintf("%v %s", time.Since(t0), what)
				if err == nil {
					time.Sleep(r.work)
					pass.Leave()
				}
			})
		}
		wg.Wait()
		// Every slot is back: Limit requests start at once.
		if g.Limit > 0 {
			passes := make([]admit.Pass, g.Limit)
			for i := range passes {
				// A request that would wait gives up a nanosecond later.
				ctx, cancel := context.WithTimeout(t.Context(), time.Nanosecond)
				defer cancel()
				var err error
				if passes[i], err = g.Enter(ctx, false); err != nil {
					t.Fatalf("slot %d after every request left: %v", i, err)
				}
			}
			for i := range passes {
				passes[i].Leave()
			}
		}
	})
	return got
}

func TestGate(t *testing.T) {
	shed, full := admit.ErrShed.Error(), admit.ErrFull.Error()
	canceled := context.DeadlineExceeded.Error()
	tests := []struct {
		name string
		gate *admit.Gate
		reqs []request
		want []string
	}{{
		name: "a slot freed goes to the waiting primary, though a hedge came first",
		gate: &admit.Gate{Limit: 1, HedgeWait: 100 * ms},
		reqs: []request{
			{at: 0, work: 10 * ms},
			{at: 1 * ms, hedge: true, work: 10 * ms},
			{at: 2 * ms, work: 10 * ms},
		},
		want: []string{"0s start", "20ms start", "10ms start"},
	}, {
		name: "primaries in the order they came",
		gate: &admit.Gate{Limit: 1},
		reqs: []request{
			{at: 0, work: 10 * ms},
			{at: 2 * ms, work: 10 * ms},
			{at: 1 * ms, work: 10 * ms},
		},
		want: []string{"0s start", "20ms start", "10ms start"},
	}, {
		name: "a hedge waits no longer than HedgeWait",
		gate: &admit.Gate{Limit: 1, HedgeWait: 5 * ms},
		reqs: []request{
			{at: 0, work: 10 * ms},
			{at: 1 * ms, hedge: true, work: 10 * ms},
			{at: 2 * ms, hedge: true, work: 10 * ms},
		},
		want: []string{"0s start", "6ms " + shed, "7ms " + shed},
	}, {
		name: "the default HedgeWait",
		gate: &admit.Gate{Limit: 1},
		reqs: []request{{at: 0, work: 2 * admit.DefaultHedgeWait}, {at: 1 * ms, hedge: true}},
		want: []string{"0s start", fmt.Sprint(ms+admit.DefaultHedgeWait, " ", shed)},
	}, {
		name: "a hedge never waits with a negative HedgeWait",
		gate: &admit.Gate{Limit: 1, HedgeWait: -1},
		reqs: []request{{at: 0, work: 10 * ms}, {at: 1 * ms, hedge: true}, {at: 2 * ms, work: 1 * ms}},
		want: []string{"0s start", "1ms " + shed, "10ms start"},
	}, {
		name: "a hedge that finds the queue full is shed at once",
		gate: &admit.Gate{Limit: 1, Queue: 1},
		reqs: []request{{at: 0, work: 10 * ms}, {at: 1 * ms, work: 1 * ms}, {at: 2 * ms, hedge: true}},
		want: []string{"0s start", "10ms start", "2ms " + shed},
	}, {
		name: "a primary that finds the queue full takes the place of the oldest hedge",
		gate: &admit.Gate{Limit: 1, Queue: 2, HedgeWait: 100 * ms},
		reqs: []request{
			{at: 0, work: 10 * ms},
			{at: 1 * ms, hedge: true, work: 1 * ms},
			{at: 2 * ms, hedge: true, work: 1 * ms},
			{at: 3 * ms, work: 1 * ms},
		},
		want: []string{"0s start", "3ms " + shed, "11ms start", "10ms start"},
	}, {
		name: "a primary that finds the queue full of primaries fails",
		gate: &admit.Gate{Limit: 1, Queue: 1},
		reqs: []request{{at: 0, work: 10 * ms}, {at: 1 * ms, work: 1 * ms}, {at: 2 * ms}},
		want: []string{"0s start", "10ms start", "2ms " + full},
	}, {
		name: "nothing waits with a negative Queue",
		gate: &admit.Gate{Limit: 1, Queue: -1},
		reqs: []request{{at: 0, work: 10 * ms}, {at: 1 * ms, hedge: true}, {at: 2 * ms}, {at: 11 * ms}},
		want: []string{"0s start", "1ms " + shed, "2ms " + full, "11ms start"},
	}, {
		name: "a waiter whose context ends leaves the queue",
		gate: &admit.Gate{Limit: 1},
		reqs: []request{
			{at: 0, work: 10 * ms},
			{at: 1 * ms, work: 1 * ms, cancel: 5 * ms},
			{at: 2 * ms, hedge: true, work: 1 * ms, cancel: 4 * ms},
			{at: 3 * ms, work: 1 * ms},
		},
		want: []string{"0s start", "5ms " + canceled, "4ms " + canceled, "10ms start"},
	}, {
		name: "a request whose context ended does not enter",
		gate: &admit.Gate{},
		reqs: []request{{at: 2 * ms, cancel: 1 * ms}},
		want: []string{"2ms " + canceled},
	}, {
		name: "the zero Gate admits everything at once",
		gate: &admit.Gate{},
		reqs: []request{{at: 0, work: 10 * ms}, {at: 1 * ms, hedge: true, work: 10 * ms}, {at: 2 * ms, work: 10 * ms}},
		want: []string{"0s start", "1ms start", "2ms start"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := play(t, tt.gate, tt.reqs)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Enter returned (-want +got)\n%s", diff)
			}
		})
	}
}

// Leave gives one slot back however often it is called, and from however
// many goroutines at once.
func TestLeaveIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &admit.Gate{Limit: 1, Queue: -1}
		pass, err := g.Enter(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(pass.Leave)
		}
		wg.Wait()
		pass.Leave()
		var zero admit.Pass
		zero.Leave()
		first, err := g.Enter(t.Context(), false)
		if err != nil {
			t.Fatalf("the slot given back: %v", err)
		}
		if _, err := g.Enter(t.Context(), false); !errors.Is(err, admit.ErrFull) {
			t.Fatalf("a second request with the one slot taken: %v, want ErrFull", err)
		}
		first.Leave()
	})
}

// A Gate with a Clock times HedgeWait by it.
func TestGateClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := clock.NewMock()
		g := &admit.Gate{Limit: 1, HedgeWait: 5 * ms, Clock: mock}
		running, err := g.Enter(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		defer running.Leave()
		errc := make(chan error, 1)
		go func() {
			_, err := g.Enter(t.Context(), true)
			errc <- err
		}()
		synctest.Wait()
		mock.Add(4 * ms)
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("the hedge left after 4ms of the mock's: %v", err)
		default:
		}
		mock.Add(1 * ms)
		if err := <-errc; !errors.Is(err, admit.ErrShed) {
			t.Errorf("the hedge after 5ms of the mock's: %v, want ErrShed", err)
		}
	})
}

// Enter admits a request for which a slot is free without allocating.
func TestEnterAllocations(t *testing.T) {
	g := &admit.Gate{Limit: 4}
	ctx := context.Background()
	n := testing.AllocsPerRun(1000, func() {
		pass, err := g.Enter(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		pass.Leave()
	})
	if n != 0 {
		t.Errorf("Enter and Leave with a free slot: %v allocations, want 0", n)
	}
}

// A waiter granted a slot in the instant its context ends either takes
// the slot or hands it on to the next waiter: it is never lost. Which
// one is open; run with -count to see both.
func TestGrantedAsItGivesUp(t *testing.T) {
	for range 20 {
		got := play(t, &admit.Gate{Limit: 1}, []request{
			{at: 0, work: 10 * ms},
			{at: 1 * ms, work: 1 * ms, cancel: 10 * ms},
			{at: 2 * ms, work: 1 * ms},
		})
		took := []string{"0s start", "10ms start", "11ms start"}
		handed := []string{"0s start", "10ms " + context.DeadlineExceeded.Error(), "10ms start"}
		if !slices.Equal(got, took) && !slices.Equal(got, handed) {
			t.Fatalf("Enter returned %q, want %q or %q", got, took, handed)
		}
	}
}

// Many requests at once, some of them hedges that give up early: never
// more than Limit execute together, and every slot comes back.
func TestGateUnderContention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &admit.Gate{Limit: 3, Queue: 5, HedgeWait: 2 * ms}
		var running, most atomic.Int32
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				time.Sleep(time.Duration(i%17) * 100 * time.Microsecond)
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(1+i%5)*ms)
				defer cancel()
				pass, err := g.Enter(ctx, i%3 == 0)
				if err != nil {
					return
				}
				defer pass.Leave()
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Duration(1+i%4) * 100 * time.Microsecond)
				running.Add(-1)
			})
		}
		wg.Wait()
		if m := most.Load(); m != 3 {
			t.Errorf("at most %d executed at once, want 3", m)
		}
		for range 3 {
			pass, err := g.Enter(t.Context(), true)
			if err != nil {
				t.Fatalf("a slot after every request left: %v", err)
			}
			defer pass.Leave()
		}
	})
}
