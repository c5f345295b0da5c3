package lab

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// A run is a pure function of its Load and policy: the same scenario run
// twice gives the same row to the nanosecond. The scenarios hold
// everything that can happen at once: a learned delay, a budget,
// shedding, a brownout and an overload; and attempts of one call that
// start together on two replicas and take the same service time.
func TestRunLoadIsExact(t *testing.T) {
	planner := Contender{Name: "Planner + budget", Policy: func() hedge.Policy[int] {
		b := &hedge.RatioBudget{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}
		return hedge.Policy[int]{Delay: &hedge.Planner{Load: 0.2, Window: 400}, MaxAttempts: 3, Budget: b}
	}}
	for _, tc := range []struct {
		name string
		l    Load
	}{{
		name: "shedding, brownout, overload",
		l: Load{
			Rho: 0.9, Cancel: CancelQueued, Shed: true, ShedQueue: 1, Warm: 500, Calls: 1500, Block: 500,
			Brownout: Brownout{Replica: 2, Factor: 3, Period: Period{700, 900}},
			Overload: Overload{Rho: 1.3, Period: Period{1200, 1400}},
		},
	}, {
		name: "correlated",
		l:    Load{Rho: 0.7, Correlated: true, Warm: 500, Calls: 1500, Block: 500},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			first := RunLoad(t, tc.l, planner)
			if diff := cmp.Diff(first, RunLoad(t, tc.l, planner)); diff != "" {
				t.Errorf("the second run differs (-first +second):\n%s", diff)
			}
			if first.HedgeRate == 0 || len(first.Blocks) != 3 || (tc.l.Shed && first.Shed == 0) {
				t.Errorf("the scenario did not hedge, shed and fill three blocks: %+v", first)
			}
		})
	}
}

// When slowness belongs to the request, every attempt takes the primary's
// service time, and a nanosecond more for each later attempt: two attempts
// that start at the same instant (two workers freed by one answer) must
// not end at the same instant, or the scheduler would pick the winner.
func TestCorrelatedAttemptsNeverTie(t *testing.T) {
	l, err := Load{Rho: 0.5, Correlated: true}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		for k := range 3 {
			if got, want := l.service(i, k), l.draw(i, 0)+time.Duration(k); got != want {
				t.Fatalf("attempt %d of call %d takes %v, want %v", k, i, got, want)
			}
		}
	}
}

// Without hedging, every call is one request: one attempt, and the worker
// time of its one service time.
func TestRunLoadWithoutHedging(t *testing.T) {
	l := Load{Rho: 0.5, Warm: 100, Calls: 1000}
	row := RunLoad(t, l, Contender{Name: "no hedging", Policy: func() hedge.Policy[int] {
		return hedge.Policy[int]{MaxAttempts: 1}
	}})
	l, _ = l.withDefaults()
	var work time.Duration
	for i := l.Warm; i < l.Warm+l.Calls; i++ {
		work += l.service(i, 0)
	}
	want := LoadRow{Name: "no hedging", Rho: 0.5, Amp: 1, WorstAmp: 1, Spent: 1,
		Work: float64(work) / float64(l.meanService()) / float64(l.Calls), Blocks: []Block{{Amp: 1, Spent: 1}}}
	ignore := cmp.FilterPath(func(p cmp.Path) bool {
		switch p.Last().String() {
		case ".P50", ".P95", ".P99", ".Queue":
			return true
		}
		return false
	}, cmp.Ignore())
	if diff := cmp.Diff(want, row, ignore); diff != "" {
		t.Errorf("row (-want +got):\n%s", diff)
	}
	// A call waits at least its own service time.
	if row.P50 < 20*time.Millisecond || row.P99 < 450*time.Millisecond {
		t.Errorf("p50 %v, p99 %v: faster than the service times", row.P50, row.P99)
	}
}
