package hedge

import (
	"math"
	"time"
)

// callDeadline is the one deadline shared by every attempt of a call: the
// earlier of the caller's deadline and start+timeout. Zero means none.
func callDeadline(start time.Time, timeout time.Duration, parent time.Time, hasParent bool) time.Time {
	var d time.Time
	if timeout > 0 {
		d = start.Add(timeout)
	}
	if hasParent && (d.IsZero() || parent.Before(d)) {
		d = parent
	}
	return d
}

// deadlines are the three readings of a call's deadline.
type deadlines struct {
	// sched is the deadline by the policy's clock: the skip rule reads it.
	sched time.Time
	// timeout is the Timeout's deadline when the call must enforce it: when
	// it comes before ctx's, or runs on another clock. ctx's own deadline
	// reaches the call through ctx, with its cause. Zero: none to enforce.
	timeout time.Time
	// real is what attempts report: by the real clock, the one their I/O
	// runs against.
	real time.Time
}

// callDeadlines computes a call's deadlines. begin is its start by the
// policy's clock; realNow is the real time then, or zero when the policy's
// clock is the real one.
func callDeadlines(begin, realNow time.Time, timeout time.Duration, parent time.Time, hasParent bool) deadlines {
	var d deadlines
	if realNow.IsZero() {
		d.sched = callDeadline(begin, timeout, parent, hasParent)
		d.real = d.sched
	} else {
		d.sched = callDeadline(begin, timeout, time.Time{}, false)
		d.real = callDeadline(realNow, timeout, parent, hasParent)
	}
	if timeout > 0 && (!hasParent || !realNow.IsZero() || d.sched.Before(parent)) {
		d.timeout = d.sched
	}
	return d
}

// worthStarting reports whether an extra attempt started at now has a
// useful share of the deadline left. delay is the hedge delay that led to
// it, a stand-in for how long a healthy attempt takes (delays sit near the
// p95 of a normal attempt). An attempt left with less than half of that
// would mostly be cut off by the deadline: it would add load without
// cutting latency, so Do skips it. Both times are offsets from the call's
// start; never: no deadline.
func worthStarting(now, deadline, delay time.Duration) bool {
	if deadline == never {
		return true
	}
	left := until(now, deadline)
	return left > 0 && left >= delay/2
}

// never is an offset from a call's start that no clock reading reaches:
// no deadline, or no hedge due. A call keeps its times as offsets from its
// start: 8 bytes each rather than a time.Time's 24 keep the call in a
// smaller size class, and every comparison is a plain one.
const never = time.Duration(math.MaxInt64)

// until returns at - now, held at the ends of time.Duration's range
// rather than wrapped around: a clock set far back, or a deadline far
// behind, must not turn a wait into none or the reverse.
func until(now, at time.Duration) time.Duration {
	d := at - now
	switch {
	case at > now && d < 0:
		return never
	case at < now && d > 0:
		return math.MinInt64
	}
	return d
}

// offset returns t as an offset from begin, or never for a zero t.
func offset(t, begin time.Time) time.Duration {
	if t.IsZero() {
		return never
	}
	return t.Sub(begin)
}
