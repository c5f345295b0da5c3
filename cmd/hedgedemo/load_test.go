package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSummarizeLoad(t *testing.T) {
	boom := errors.New("boom")
	calls := make([]callTally, 5)
	for i, c := range []struct {
		latency    time.Duration
		sent, shed int32
		winner     int
		err        error
	}{
		{10 * ms, 1, 0, 0, nil},
		{20 * ms, 2, 0, 1, nil},   // a hedge won
		{30 * ms, 2, 1, 0, nil},   // the hedge was shed: the primary won
		{40 * ms, 2, 0, 0, nil},   // the primary won the race
		{500 * ms, 2, 0, 1, boom}, // failed: nobody won
	} {
		calls[i].latency, calls[i].winner, calls[i].err = c.latency, c.winner, c.err
		calls[i].sent.Store(c.sent)
		calls[i].shed.Store(c.shed)
	}
	got := summarizeLoad("p", 0.5, calls)
	want := loadRow{name: "p", rho: 0.5, p50: 30 * ms, p99: 500 * ms, calls: 5,
		attempts: 9.0 / 5, hedgeRate: 4.0 / 5, winRate: 1.0 / 4, shed: 1.0 / 4, failed: 1, firstErr: boom}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(loadRow{}), cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("summarizeLoad (-want +got):\n%s", diff)
	}
	if got := summarizeLoad("none", 0.5, nil); got.calls != 0 || got.attempts != 0 {
		t.Errorf("no calls: %+v", got)
	}
}

func TestPrintLoadTable(t *testing.T) {
	rows := []loadRow{
		{name: "no hedging", rho: 0.3, p50: 7400 * time.Microsecond, p99: 113 * ms, calls: 1000, attempts: 1},
		{name: "hedge after 10ms", rho: 0.3, p50: 7 * ms, p99: 22 * ms, calls: 1000, attempts: 1.13,
			hedgeRate: 0.13, winRate: 0.6667, shed: 0.154, delay: 10 * ms},
		{name: "Percentile{Quantile: 0.9}", rho: 0.3, p50: 7 * ms, p99: 28 * ms, calls: 1000, attempts: 1.09,
			hedgeRate: 0.09, winRate: 0.926, delay: 17640 * time.Microsecond},
		{name: "no hedging", rho: 0.95, p50: 27 * ms, p99: 139 * ms, calls: 1000, attempts: 1},
		{name: "hedge after 10ms", rho: 0.95, p50: 679 * ms, p99: 1917 * ms, calls: 1000, attempts: 2,
			hedgeRate: 1, shed: 0.5, failed: 12, firstErr: errors.New("context deadline exceeded"), delay: 10 * ms},
	}
	tests := []struct {
		name     string
		withShed bool
		want     string
	}{
		{"without shedding", false, `
                              ρ    p50     p99  attempts/call  hedge rate  win rate   delay  failed
no hedging                  0.3    7ms   113ms          1.00x        0.0%         -       -       0
hedge after 10ms            0.3    7ms    22ms          1.13x       13.0%     66.7%    10ms       0
Percentile{Quantile: 0.9}   0.3    7ms    28ms          1.09x        9.0%     92.6%  17.6ms       0

no hedging                 0.95   27ms   139ms          1.00x        0.0%         -       -       0
hedge after 10ms           0.95  679ms  1.917s          2.00x      100.0%      0.0%    10ms      12
ρ 0.95 hedge after 10ms: 12 of 1000 calls failed, first: context deadline exceeded
`},
		{"with shedding", true, `
                              ρ    p50     p99  attempts/call  hedge rate  win rate  hedges shed   delay  failed
no hedging                  0.3    7ms   113ms          1.00x        0.0%         -         0.0%       -       0
hedge after 10ms            0.3    7ms    22ms          1.13x       13.0%     66.7%        15.4%    10ms       0
Percentile{Quantile: 0.9}   0.3    7ms    28ms          1.09x        9.0%     92.6%         0.0%  17.6ms       0

no hedging                 0.95   27ms   139ms          1.00x        0.0%         -         0.0%       -       0
hedge after 10ms           0.95  679ms  1.917s          2.00x      100.0%      0.0%        50.0%    10ms      12
ρ 0.95 hedge after 10ms: 12 of 1000 calls failed, first: context deadline exceeded
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printLoadTable(&b, tt.withShed, rows); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(strings.TrimPrefix(tt.want, "\n"), b.String()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunLoad sweeps two loads with a few calls each, end to end over
// loopback, and checks the table's shape: every policy at every load, in
// order, and what holds whatever the timing.
func TestRunLoad(t *testing.T) {
	for _, lc := range []loadConfig{
		{warmup: 5, workers: 4, scale: 0.25, stopWork: true, rhos: []float64{0.3, 0.6}},
		{warmup: 5, workers: 4, scale: 0.25, stopWork: false, shed: true, rhos: []float64{0.3, 0.6}},
	} {
		name := "stopwork"
		if lc.shed {
			name = "shed"
		}
		t.Run(name, func(t *testing.T) {
			checkNoLeaks(t)
			cfg := config{calls: 20, delay: 20 * ms, timeout: 10 * time.Second, profile: testProfile, seed: 1, sweep: true, load: lc}
			var out, status bytes.Buffer
			if err := runLoad(t.Context(), cfg, &out, &status); err != nil {
				t.Fatal(err)
			}
			// On a busy machine a warning ends the output: it is
			// busyWarning's, tested there.
			table, warning, busy := strings.Cut(out.String(), "\nwarning: the machine was busy: ")
			if busy && !strings.HasSuffix(warning, "Run the demo again when the machine is quieter.\n") {
				t.Errorf("the warning is cut short:\n%s", warning)
			}
			lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
			policies := loadPolicies(5 * ms)
			// A title of three lines, a blank line, the header, and then a
			// block of rows per load, a blank line between blocks. Then a
			// line for each row with failed calls: on a machine stalled
			// for longer than the timeout, calls time out, but no call
			// fails otherwise.
			want := 5 + len(lc.rhos)*(len(policies)+1) - 1
			if len(lines) < want {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), want, out.String())
			}
			for _, line := range lines[want:] {
				if !strings.Contains(line, "calls failed, first: ") || !strings.HasSuffix(line, context.DeadlineExceeded.Error()) {
					t.Errorf("after the table: %q, want only calls that timed out", line)
				}
			}
			for i, prefix := range []string{"server:  4 workers", "service: ", "calls:   ", ""} {
				if !strings.HasPrefix(lines[i], prefix) || (prefix == "") != (lines[i] == "") {
					t.Errorf("line %d is %q, want it to start with %q", i, lines[i], prefix)
				}
			}
			header := strings.Fields(lines[4])
			wantHeader := []string{"ρ", "p50", "p99", "attempts/call", "hedge", "rate", "win", "rate", "delay", "failed"}
			if lc.shed {
				wantHeader = []string{"ρ", "p50", "p99", "attempts/call", "hedge", "rate", "win", "rate", "hedges", "shed", "delay", "failed"}
			}
			if diff := cmp.Diff(wantHeader, header); diff != "" {
				t.Errorf("header (-want +got):\n%s", diff)
			}
			rows := lines[5:]
			for i, rho := range []string{"0.3", "0.6"} {
				block := rows[i*(len(policies)+1):]
				if i > 0 && rows[i*(len(policies)+1)-1] != "" {
					t.Errorf("no blank line before load %s", rho)
				}
				for j, p := range policies {
					line := block[j]
					if !strings.HasPrefix(line, p.name+" ") {
						t.Errorf("row %d of load %s is %q, want %s", j, rho, line, p.name)
						continue
					}
					fields := strings.Fields(strings.TrimPrefix(line, p.name))
					if fields[0] != rho {
						t.Errorf("%s: ρ %s, want %s", p.name, fields[0], rho)
					}
					if j == 0 {
						// No hedging: one attempt per call, nothing to
						// win, no delay.
						if tail := fields[3:]; tail[0] != "1.00x" || tail[1] != "0.0%" || tail[2] != "-" || tail[len(tail)-2] != "-" {
							t.Errorf("%s at %s: %q", p.name, rho, line)
						}
					}
				}
			}
			if got, want := strings.Count(status.String(), fmt.Sprintf(": %d calls in ", lc.warmup+cfg.calls)), len(lc.rhos)*len(policies); got != want {
				t.Errorf("%d points said they were done, want %d: %q", got, want, status.String())
			}
			if strings.Contains(status.String(), "\r") {
				t.Errorf("progress in a log has a carriage return: %q", status.String())
			}
		})
	}
}

// TestRunLoadRejectsBadSettings: a setting the sweep cannot run with is
// an error before any call.
func TestRunLoadRejectsBadSettings(t *testing.T) {
	good := config{calls: 1, delay: 20 * ms, timeout: time.Second, profile: testProfile,
		load: loadConfig{warmup: 0, workers: 1, scale: 1, rhos: []float64{0.5}}}
	tests := []struct {
		name string
		edit func(*config)
	}{
		{"no calls", func(c *config) { c.calls = 0 }},
		{"negative warm-up", func(c *config) { c.load.warmup = -1 }},
		{"no workers", func(c *config) { c.load.workers = 0 }},
		{"zero scale", func(c *config) { c.load.scale = 0 }},
		{"NaN scale", func(c *config) { c.load.scale = math.NaN() }},
		{"zero load", func(c *config) { c.load.rhos = []float64{0.5, 0} }},
		{"no timeout", func(c *config) { c.timeout = 0 }},
		{"no service time", func(c *config) { c.profile = profile{} }},
		{"slow fraction above 1", func(c *config) { c.profile.slowFrac = 1.5 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			cfg.load.rhos = append([]float64(nil), good.load.rhos...)
			tt.edit(&cfg)
			var out, status bytes.Buffer
			if err := runLoad(t.Context(), cfg, &out, &status); err == nil {
				t.Errorf("no error; output:\n%s", out.String())
			}
			if out.Len() != 0 || status.Len() != 0 {
				t.Errorf("wrote %q and %q before failing", out.String(), status.String())
			}
		})
	}
}
