package hedge

import "time"

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

// worthStarting reports whether an extra attempt started at now has a
// useful share of the deadline left. delay is the hedge delay that led to
// it, a stand-in for how long a healthy attempt takes (delays sit near the
// p95 of a normal attempt). An attempt left with less than half of that
// would mostly be cut off by the deadline: it would add load without
// cutting latency, so Do skips it.
func worthStarting(now, deadline time.Time, delay time.Duration) bool {
	if deadline.IsZero() {
		return true
	}
	left := deadline.Sub(now)
	return left > 0 && left >= delay/2
}

// earliest returns the earlier of two times, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
