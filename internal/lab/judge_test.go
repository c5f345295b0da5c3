package lab

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// A grid starts with no hedging, runs each plan as RunPlan does, spans
// 0.8× the median to 1.25× the largest p99 without hedging for the last
// hedge, and is run once per process.
func TestRunGrid(t *testing.T) {
	l := Load{Rho: 0.5, Warm: 200, Calls: 600, Block: 200, Seed: 5}
	g := Grid{Step: 1.5, Hedges: 2}
	rows, err := RunGrid(l, g)
	if err != nil {
		t.Fatal(err)
	}
	none, _ := RunPlan(l, FixedPlan{})
	if diff := cmp.Diff(PlanRow{FixedPlan{}, none}, rows[0]); diff != "" {
		t.Errorf("the first row is not no hedging (-want +got):\n%s", diff)
	}
	hi := none.P99
	for _, b := range none.Blocks {
		hi = max(hi, b.P99)
	}
	perHedges := map[int]int{}
	for _, r := range rows[1:] {
		perHedges[r.Plan.Hedges]++
		d := float64(r.Plan.Delay)
		if d < 0.8*float64(none.P50)-1 || d*float64(r.Plan.Hedges) > 1.25*float64(hi) {
			t.Errorf("%v: delay outside [0.8 × %v, 1.25 × %v / hedges]", r.Plan, none.P50, hi)
		}
	}
	if len(perHedges) != 2 || perHedges[1] <= perHedges[2] || perHedges[2] < 3 {
		t.Errorf("plans by hedges: %v, want more of 1 than of 2, and at least 3 of 2", perHedges)
	}
	for _, i := range []int{1, len(rows) / 2, len(rows) - 1} {
		want, _ := RunPlan(l, rows[i].Plan)
		if diff := cmp.Diff(want, rows[i].LoadRow); diff != "" {
			t.Errorf("%v differs from RunPlan's (-RunPlan +grid):\n%s", rows[i].Plan, diff)
		}
	}
	again, _ := RunGrid(l, g)
	if &again[0] != &rows[0] {
		t.Error("the same grid on the same Load ran twice")
	}
	for _, bad := range []Grid{{Step: 1, Hedges: 1}, {Step: 1.1, Hedges: 4}, {Step: math.NaN(), Hedges: 1}} {
		if _, err := RunGrid(l, bad); !errors.Is(err, errBadPlan) {
			t.Errorf("grid %+v: %v, want an error wrapping errBadPlan", bad, err)
		}
	}
}

// Best takes the least p99 among the rows within the budget, by the
// measure given: the whole run's or a block's.
func TestBest(t *testing.T) {
	row := func(h int, p99, amp, blockP99, blockAmp float64) PlanRow {
		return PlanRow{FixedPlan{Delay: ms, Hedges: h}, LoadRow{P99: msec(p99), Amp: amp,
			Blocks: []Block{{}, {P99: msec(blockP99), Amp: blockAmp}}}}
	}
	rows := []PlanRow{row(0, 500, 1, 900, 1), row(1, 300, 1.08, 400, 1.3), row(2, 100, 1.15, 800, 1.15), row(3, 100, 1.1, 700, 1.25)}
	for _, tc := range []struct {
		name   string
		budget float64
		m      Measure
		want   int
	}{
		{"whole run, a budget for all", 0.2, Whole, 2},
		{"whole run, the first of equals", 0.15, Whole, 2},
		{"whole run, a tight budget", 0.1, Whole, 3},
		{"whole run, no budget", 0, Whole, 0},
		{"block 2", 0.35, InBlock(1), 1},
		{"block 2, less budget", 0.27, InBlock(1), 3},
		{"block 2, less again", 0.2, InBlock(1), 2},
	} {
		got, ok := Best(rows, tc.budget, tc.m)
		if !ok || got.Plan.Hedges != tc.want {
			t.Errorf("%s: %v (%v), want the plan of %d hedges", tc.name, got.Plan, ok, tc.want)
		}
	}
	if _, ok := Best(rows, 0.2, InBlock(5)); ok {
		t.Error("Best found a row with a block it does not have")
	}
}

// msec is x milliseconds.
func msec(x float64) time.Duration { return time.Duration(x * float64(ms)) }

// The figures of the criteria that take more than a ratio: recovery
// takes the worst block from the one it must have recovered by, the
// overload's queue the worse of its block and the next.
func TestJudgingFigures(t *testing.T) {
	j := &judging{runs: map[string]LoadRow{}, nones: map[string]LoadRow{}, grids: map[string][]PlanRow{}}
	blocks := func(p99s ...float64) []Block {
		var bs []Block
		for i, p := range p99s {
			bs = append(bs, Block{P99: msec(p), Queue: p / 10, Amp: 1 + float64(i)/100})
		}
		return bs
	}
	s := brownout(FastSlow, CancelRunning)
	j.runs[j.key(s.load)] = LoadRow{Blocks: blocks(100, 900, 300, 130, 120)}
	j.runs[j.key(*s.ref)] = LoadRow{Blocks: blocks(100, 100, 100, 100, 100)}
	j.grids[j.key(s.load)] = []PlanRow{{FixedPlan{}, LoadRow{Blocks: blocks(100, 900, 200, 100, 100)}}}
	o := overload(Stragglers, CancelQueued)
	j.runs[j.key(o.load)] = LoadRow{Blocks: blocks(100, 300, 220, 100, 100)}
	j.nones[j.key(o.load)] = LoadRow{Blocks: blocks(100, 200, 200, 100, 100)}
	for _, tc := range []struct {
		criterion string
		s         scenario
		want      Verdict
	}{
		{"recovery", s, Verdict{Contender: "120ms in block 5", Reference: "undisturbed: 100ms", Figure: 1.2}},
		{"overload amp", o, Verdict{Contender: "1.010", Reference: "-", Figure: 1.01}},
		{"overload p99", o, Verdict{Contender: "300ms", Reference: "no hedging: 200ms", Figure: 1.5}},
		{"overload queue", o, Verdict{Contender: "30.0 in block 2", Reference: "no hedging: 20.0", Figure: 1.5}},
	} {
		for _, c := range criteria {
			if c.Name != tc.criterion {
				continue
			}
			got := c.judge(j, tc.s)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Verdict{}, "Feasible"), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.criterion, diff)
			}
		}
	}
}

func TestDescribeLoad(t *testing.T) {
	for _, tc := range []struct {
		l    Load
		want string
	}{
		{Load{Rho: 0.3}, "90/10 ρ0.3, cancel running"},
		{brownout(Stragglers, CancelQueued).load, "stragglers ρ0.5, replica 0 ×5 in block 2, cancel queued only"},
		{overload(FastSlow, CancelRunning).load, "90/10 ρ0.5, ρ1.1 in block 2, cancel running"},
		{shift(0.5, CancelRunning).load, "90/10 ρ0.3, ×0.5 from block 2, cancel running"},
		{Load{Rho: 0.9, Correlated: true, Shed: true, Seed: 3, Service: HeavyTail}, "heavy tail ρ0.9 correlated shedding, seed 3, cancel running"},
		{Load{Rho: 0.5, Overload: Overload{Rho: 1.2, Period: Period{3000, 5000}}}, "90/10 ρ0.5, ρ1.2 in blocks 2–3, cancel running"},
		{Load{Rho: 0.5, Overload: Overload{Rho: 1.2, Period: Period{2500, 3000}}}, "90/10 ρ0.5, ρ1.2 in calls 2500–2999, cancel running"},
	} {
		if got := describeLoad(tc.l); got != tc.want {
			t.Errorf("describeLoad(%+v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}
