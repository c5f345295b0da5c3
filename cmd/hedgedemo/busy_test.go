package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestLatenessProbe runs the probe in a bubble, where a timer wakes its
// goroutine at its very instant: one sample every probeEvery, none late,
// and nothing left running once it has ended (the bubble would fail).
func TestLatenessProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		probe := startLatenessProbe()
		time.Sleep(100*probeEvery + probeEvery/2)
		got := probe.end()
		if want := (lateness{samples: 100}); got != want {
			t.Errorf("lateness %+v, want %+v", got, want)
		}
		if again := probe.end(); again != got {
			t.Errorf("a second end: %+v, want %+v again", again, got)
		}
	})
}

func TestBusyWarning(t *testing.T) {
	tests := []struct {
		name    string
		late    lateness
		delay   time.Duration
		loadAvg string
		want    string // "" for no warning, else the start of its first line
	}{
		{"idle", lateness{samples: 500, p99: 200 * time.Microsecond, max: 3 * ms}, 50 * ms, "0.20", ""},
		{"p99 at a tenth of the delay", lateness{samples: 500, p99: 5 * ms, max: 40 * ms}, 50 * ms, "", ""},
		{"nothing measured", lateness{}, 50 * ms, "9.00", ""},
		{"busy", lateness{samples: 500, p99: 5100 * time.Microsecond, max: 38 * ms}, 50 * ms, "",
			"warning: the machine was busy: timers fired up to 38ms late, 5.1ms at p99, against a hedge delay of 50ms.\n"},
		{"busy, with the load average", lateness{samples: 500, p99: 2 * ms, max: 9 * ms}, 10 * ms, "8.42",
			fmt.Sprintf("warning: the machine was busy: timers fired up to 9ms late, 2ms at p99, against a hedge delay of 10ms; load average 8.42 on %d CPUs.\n", runtime.NumCPU())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := busyWarning(tt.late, tt.delay, tt.loadAvg)
			if tt.want == "" {
				if got != "" {
					t.Errorf("a warning where none is due:\n%s", got)
				}
				return
			}
			if !strings.HasPrefix(got, tt.want) || !strings.Contains(got, "Run the demo again when the machine is quieter.") {
				t.Errorf("warning:\n%s\nwant it to start with:\n%s", got, tt.want)
			}
		})
	}
}
