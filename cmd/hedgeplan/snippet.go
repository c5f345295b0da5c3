package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/tailcut/hedge"
)

// fixedPolicy is the Go for plan as a fixed delay.
func fixedPolicy(plan hedge.Plan) string {
	return fmt.Sprintf("hedge.Policy[T]{Delay: hedge.Fixed(%s), MaxAttempts: %d}", goDuration(plan.Delay), plan.Hedges+1)
}

// plannerPolicy is the Go for a policy that goes on planning as cfg did,
// naming only the settings that differ from a Planner's defaults. It
// allows every hedge the Planner may choose later.
func plannerPolicy(cfg config) string {
	fields := []string{fmt.Sprintf("Load: %v", cfg.budget)}
	if cfg.target != 0.99 {
		fields = append(fields, fmt.Sprintf("Target: %v", cfg.target))
	}
	if cfg.maxHedges != 2 {
		fields = append(fields, fmt.Sprintf("MaxHedges: %d", cfg.maxHedges))
	}
	return fmt.Sprintf("hedge.Policy[T]{Delay: &hedge.Planner{%s}, MaxAttempts: %d}", strings.Join(fields, ", "), cfg.maxHedges+1)
}

// goUnits are the units goDuration writes in, largest first; a
// duration none of them divides is written in nanoseconds.
var goUnits = []struct {
	d    time.Duration
	name string
}{
	{time.Hour, "time.Hour"}, {time.Minute, "time.Minute"}, {time.Second, "time.Second"},
	{time.Millisecond, "time.Millisecond"}, {time.Microsecond, "time.Microsecond"},
}

// goDuration writes d as a constant Go expression of type time.Duration,
// in the largest unit that holds it exactly: 415 * time.Millisecond,
// 44600 * time.Microsecond, time.Second. (d.String() is not Go: 44.6ms.)
func goDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	for _, u := range goUnits {
		if d%u.d == 0 {
			return times(int64(d/u.d), u.name)
		}
	}
	return times(int64(d), "time.Nanosecond")
}

// times writes n units: "time.Second", "-time.Second", "3 * time.Second".
func times(n int64, unit string) string {
	switch n {
	case 1:
		return unit
	case -1:
		return "-" + unit
	}
	return fmt.Sprintf("%d * %s", n, unit)
}
