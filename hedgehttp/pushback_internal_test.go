package hedgehttp

import (
	"net/http"
	"testing"
	"time"
)

func TestPushbackRule(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		header   string
		deadline time.Time
		wait     time.Duration
		ok       bool
	}{
		{"0", time.Time{}, 0, true},
		{"1", time.Time{}, time.Second, true},
		{" 1 ", time.Time{}, time.Second, true},
		{"2", time.Time{}, 2 * time.Second, false},      // past maxPushback
		{"1", now.Add(time.Second), time.Second, false}, // ends at the deadline: no time to send
		{"1", now.Add(time.Second + time.Nanosecond), time.Second, true},
		{date(time.Second), time.Time{}, time.Second, true},
		{date(-time.Hour), time.Time{}, 0, true}, // already past
		{"Fri, 02 Jan 2026 03:04:06 GMT", time.Time{}, time.Second, true},
		{"-1", time.Time{}, 0, false},
		{"1.5", time.Time{}, 0, false},
		{"soon", time.Time{}, 0, false},
		{"99999999999", time.Time{}, 0, false},
		{"", time.Time{}, 0, false},
	}
	for _, tt := range tests {
		wait, ok := pushback(tt.header, now, tt.deadline)
		if wait != tt.wait || ok != tt.ok {
			t.Errorf("pushback(%q, deadline %v) = %v, %v; want %v, %v", tt.header, tt.deadline, wait, ok, tt.wait, tt.ok)
		}
	}
}
