package hedge

import (
	"testing"
	"time"
)

func TestCallDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	tests := []struct {
		name      string
		timeout   time.Duration
		parent    time.Time
		hasParent bool
		want      time.Time
	}{
		{"none", 0, time.Time{}, false, time.Time{}},
		{"timeout only", time.Second, time.Time{}, false, at(time.Second)},
		{"parent only", 0, at(time.Minute), true, at(time.Minute)},
		{"parent first", time.Second, at(500 * time.Millisecond), true, at(500 * time.Millisecond)},
		{"timeout first", time.Second, at(time.Minute), true, at(time.Second)},
	}
	for _, tt := range tests {
		if got := callDeadline(start, tt.timeout, tt.parent, tt.hasParent); !got.Equal(tt.want) {
			t.Errorf("%s: callDeadline = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestWorthStarting(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		left  time.Duration // before the deadline; 0 with noDeadline means none
		delay time.Duration
		want  bool
	}{
		{left: 100 * time.Millisecond, delay: 100 * time.Millisecond, want: true},
		{left: 50 * time.Millisecond, delay: 100 * time.Millisecond, want: true},
		{left: 49 * time.Millisecond, delay: 100 * time.Millisecond, want: false},
		{left: time.Nanosecond, delay: 0, want: true},
		{left: 0, delay: 0, want: false},
		{left: -time.Second, delay: 0, want: false},
		{left: time.Nanosecond, delay: -1, want: true},
	}
	for _, tt := range tests {
		if got := worthStarting(now, now.Add(tt.left), tt.delay); got != tt.want {
			t.Errorf("worthStarting(%v left, delay %v) = %v, want %v", tt.left, tt.delay, got, tt.want)
		}
	}
	if !worthStarting(now, time.Time{}, time.Hour) {
		t.Error("worthStarting without a deadline = false, want true")
	}
}

func TestEarliest(t *testing.T) {
	a, b := time.Unix(1, 0), time.Unix(2, 0)
	for _, tt := range []struct{ x, y, want time.Time }{
		{time.Time{}, time.Time{}, time.Time{}},
		{a, time.Time{}, a},
		{time.Time{}, b, b},
		{a, b, a},
		{b, a, a},
	} {
		if got := earliest(tt.x, tt.y); !got.Equal(tt.want) {
			t.Errorf("earliest(%v, %v) = %v, want %v", tt.x, tt.y, got, tt.want)
		}
	}
}
