package lab

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// RunPlan computes, event by event, the very row that a fixed plan played
// through Do in RunLoad gives: every figure, every block, to the
// nanosecond, in each cancellation mode and scenario, with two or three
// attempts of a call that start at one instant.
func TestRunPlanMatchesRunLoad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     Load
		plans []FixedPlan
	}{
		{"90/10, cancel running", Load{Rho: 0.5}, []FixedPlan{{}, {Delay: 45 * ms, Hedges: 2}}},
		{"90/10, cancel queued only, ρ 0.9", Load{Rho: 0.9, Cancel: CancelQueued}, []FixedPlan{{Delay: 45 * ms, Hedges: 1}}},
		{"stragglers, a brownout, an overload, a shift", Load{Rho: 0.6, Service: Stragglers, Cancel: CancelQueued,
			Brownout: Brownout{Replica: 1, Factor: 5, Period: Period{700, 900}},
			Overload: Overload{Rho: 1.2, Period: Period{1100, 1300}},
			Shift:    Shift{Factor: 1.5, From: 1500}},
			[]FixedPlan{{Delay: 8 * ms, Hedges: 1}, {Delay: 4 * ms, Hedges: 3}}},
		{"correlated", Load{Rho: 0.7, Correlated: true}, []FixedPlan{{Delay: 30 * ms, Hedges: 2}}},
		{"heavy tail, seed 3", Load{Rho: 0.4, Service: HeavyTail, Seed: 3}, []FixedPlan{{Delay: 20 * ms, Hedges: 1}}},
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
				if p.Hedges > 0 && (got.HedgeRate == 0 || got.WinRate == 0) {
					t.Errorf("the plan never hedged, or never won: %v", got)
				}
			})
		}
	}
}

func TestRunPlanRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Load
		p    FixedPlan
		want error
	}{
		{"a bad Load", Load{Rho: 3}, FixedPlan{}, errBadLoad},
		{"negative hedges", Load{Rho: 0.5}, FixedPlan{Delay: ms, Hedges: -1}, errBadPlan},
		{"two attempts on one replica", Load{Rho: 0.5, Replicas: 2}, FixedPlan{Delay: ms, Hedges: 2}, errBadPlan},
		{"no delay", Load{Rho: 0.5}, FixedPlan{Hedges: 1}, errBadPlan},
		{"hedges shed", Load{Rho: 0.5, Shed: true}, FixedPlan{Delay: ms, Hedges: 1}, errBadPlan},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := RunPlan(tc.l, tc.p); !errors.Is(err, tc.want) {
				t.Errorf("RunPlan: %v, want an error wrapping %v", err, tc.want)
			}
		})
	}
	// Without hedges, a shedding replica has nothing to shed.
	if _, err := RunPlan(Load{Rho: 0.5, Shed: true, Warm: 10, Calls: 10}, FixedPlan{}); err != nil {
		t.Errorf("RunPlan with shedding and no hedges: %v", err)
	}
}

// A shift multiplies every service time of the calls from its From on,
// and no other.
func TestShift(t *testing.T) {
	l, err := Load{Rho: 0.5, Shift: Shift{Factor: 3, From: 10}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	plain := l
	plain.Shift = Shift{}
	for i := range 20 {
		want := plain.service(i, 1)
		if i >= 10 {
			want = time.Duration(float64(want) * 3)
		}
		if got := l.service(i, 1); got != want {
			t.Errorf("call %d: %v, want %v", i, got, want)
		}
	}
	for _, bad := range []Shift{{Factor: -1}, {Factor: 2000}, {Factor: 2, From: -1}} {
		if _, err := (Load{Rho: 0.5, Shift: bad}).withDefaults(); !errors.Is(err, errBadLoad) {
			t.Errorf("%+v: %v, want an error wrapping errBadLoad", bad, err)
		}
	}
}
