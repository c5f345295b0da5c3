package hedge

import (
	"math"
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
	now := 3 * time.Second // from the call's start
	tests := []struct {
		left  time.Duration // before the deadline
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
		if got := worthStarting(now, now+tt.left, tt.delay); got != tt.want {
			t.Errorf("worthStarting(%v left, delay %v) = %v, want %v", tt.left, tt.delay, got, tt.want)
		}
	}
	if !worthStarting(now, never, time.Hour) {
		t.Error("worthStarting without a deadline = false, want true")
	}
}

func TestUntilHoldsAtTheEnds(t *testing.T) {
	for _, tt := range []struct{ now, at, want time.Duration }{
		{time.Second, 3 * time.Second, 2 * time.Second},
		{3 * time.Second, time.Second, -2 * time.Second},
		{-2 * time.Second, never - time.Second, never},
		{time.Second, math.MinInt64 + time.Second, math.MinInt64},
	} {
		if got := until(tt.now, tt.at); got != tt.want {
			t.Errorf("until(%v, %v) = %v, want %v", tt.now, tt.at, got, tt.want)
		}
	}
}

func TestOffset(t *testing.T) {
	begin := time.Unix(1, 0)
	for _, tt := range []struct {
		t    time.Time
		want time.Duration
	}{
		{time.Time{}, never},
		{begin, 0},
		{begin.Add(time.Second), time.Second},
		{begin.Add(-time.Second), -time.Second},
	} {
		if got := offset(tt.t, begin); got != tt.want {
			t.Errorf("offset(%v) = %v, want %v", tt.t, got, tt.want)
		}
	}
}

func TestCallDeadlines(t *testing.T) {
	begin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return begin.Add(d) }
	mock := time.Unix(0, 0) // an injected clock's reading, far from real time
	realNow := at(time.Hour)
	tests := []struct {
		name      string
		begin     time.Time
		realNow   time.Time
		timeout   time.Duration
		parent    time.Time
		hasParent bool
		want      deadlines
	}{
		{"none", begin, time.Time{}, 0, time.Time{}, false, deadlines{}},
		{"Timeout only: the call enforces it", begin, time.Time{}, time.Second, time.Time{}, false,
			deadlines{sched: at(time.Second), timeout: at(time.Second), real: at(time.Second)}},
		{"Timeout first: the call enforces it", begin, time.Time{}, time.Second, at(time.Minute), true,
			deadlines{sched: at(time.Second), timeout: at(time.Second), real: at(time.Second)}},
		{"ctx's deadline first: ctx enforces it", begin, time.Time{}, time.Second, at(500 * time.Millisecond), true,
			deadlines{sched: at(500 * time.Millisecond), real: at(500 * time.Millisecond)}},
		{"ctx's deadline only", begin, time.Time{}, 0, at(time.Minute), true,
			deadlines{sched: at(time.Minute), real: at(time.Minute)}},
		{"injected clock: schedule by it, report real time", mock, realNow, time.Second, realNow.Add(time.Minute), true,
			deadlines{sched: mock.Add(time.Second), timeout: mock.Add(time.Second), real: realNow.Add(time.Second)}},
		{"injected clock, ctx's deadline only", mock, realNow, 0, realNow.Add(time.Minute), true,
			deadlines{real: realNow.Add(time.Minute)}},
	}
	for _, tt := range tests {
		if got := callDeadlines(tt.begin, tt.realNow, tt.timeout, tt.parent, tt.hasParent); got != tt.want {
			t.Errorf("%s: callDeadlines = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
