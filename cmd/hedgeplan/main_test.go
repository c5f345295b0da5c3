package main

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fastSlow writes n latencies: 90 % in 20–45ms, 10 % in 450–600ms.
func fastSlow(n int) string {
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range n {
		d := 20*time.Millisecond + time.Duration(r.Int64N(int64(25*time.Millisecond)))
		if r.Float64() < 0.1 {
			d = 450*time.Millisecond + time.Duration(r.Int64N(int64(150*time.Millisecond)))
		}
		fmt.Fprintln(&b, d)
	}
	return b.String()
}

var recommendation = regexp.MustCompile(`(\d+) hedges?(?:, one every| after) ([^:]+):`)

func plan(t *testing.T, input string, cfg config) (hedges int, delay time.Duration, out string) {
	t.Helper()
	var b strings.Builder
	if err := run(strings.NewReader(input), &b, cfg); err != nil {
		t.Fatal(err)
	}
	m := recommendation.FindStringSubmatch(b.String())
	if m == nil {
		return 0, 0, b.String()
	}
	d, _ := time.ParseDuration(m[2])
	n, _ := strconv.Atoi(m[1])
	return n, d, b.String()
}

func TestPlansKnownUpstream(t *testing.T) {
	base := config{target: 0.99, maxHedges: 2, column: 1}
	tests := []struct {
		name     string
		budget   float64
		hedges   int
		min, max time.Duration
	}{
		// Room for two hedges: send them past the fast mode.
		{"15% budget", 0.15, 2, 40 * time.Millisecond, 50 * time.Millisecond},
		// Two hedges past the fast mode cost 11%: one hedge is all 10%
		// buys, and one hedge leaves p99 in the slow mode.
		{"10% budget", 0.10, 1, 0, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			cfg.budget = tt.budget
			h, d, out := plan(t, fastSlow(4000), cfg)
			if h != tt.hedges || d < tt.min || d > tt.max {
				t.Errorf("recommended %d hedges every %v, want %d in [%v, %v]\n%s", h, d, tt.hedges, tt.min, tt.max, out)
			}
			m := regexp.MustCompile(`p99 about ([0-9.]+m?s)`).FindStringSubmatch(out)
			p99, _ := time.ParseDuration(m[1])
			if slow := p99 >= 400*time.Millisecond; slow != (tt.hedges == 1) {
				t.Errorf("expected p99 %v: one hedge should leave it slow, two should not\n%s", p99, out)
			}
		})
	}
}

func TestNoHedgeForAFlatUpstream(t *testing.T) {
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "%dms\n", 30+i%3)
	}
	_, _, out := plan(t, b.String(), config{budget: 0.1, target: 0.99, maxHedges: 2, column: 1})
	if !strings.Contains(out, "do not hedge") {
		t.Errorf("a flat upstream should not be hedged:\n%s", out)
	}
}

func TestReadLatencies(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		csv    bool
		column int
		unit   string
		want   []time.Duration
		err    string
	}{
		{name: "units", input: "31ms\n0.2s\n\n# a comment\n850µs\n", want: []time.Duration{31 * time.Millisecond, 200 * time.Millisecond, 850 * time.Microsecond}},
		{name: "bare numbers with -unit", input: "31\n2.5\n", unit: "ms", want: []time.Duration{31 * time.Millisecond, 2500 * time.Microsecond}},
		{name: "bare numbers without a unit", input: "31\n", err: "line 1: \"31\" has no unit"},
		{name: "garbage", input: "31ms\nfast\n", err: "line 2: \"fast\" is not a latency"},
		{name: "negative", input: "-3ms\n", err: "line 1: negative latency"},
		{name: "empty", input: "\n# nothing\n", err: "no latencies"},
		{name: "csv column with header", csv: true, column: 2, input: "path,latency\n/a,12ms\n/b,40ms\n", want: []time.Duration{12 * time.Millisecond, 40 * time.Millisecond}},
		{name: "csv short record", csv: true, column: 3, input: "a,1ms\n", err: "record 1 has 2 columns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			col := max(tt.column, 1)
			got, err := readLatencies(strings.NewReader(tt.input), tt.csv, col, tt.unit)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	for _, cfg := range []config{
		{budget: 0.1, target: 1, maxHedges: 2},
		{budget: 0.1, target: 0.99, maxHedges: 0},
		{budget: 3, target: 0.99, maxHedges: 2},
		{budget: 0, target: 0.99, maxHedges: 2},
	} {
		cfg.column = 1
		if err := run(strings.NewReader("1ms\n"), &strings.Builder{}, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}
