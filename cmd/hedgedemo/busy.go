package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// probeEvery is how often the lateness probe sets its timer.
const probeEvery = 10 * time.Millisecond

// latenessProbe measures, while the demo runs, how late the runtime
// wakes a goroutine whose timer has fired. Every hedge waits on such a
// timer and every reply on such a wake-up, so on a machine whose CPUs
// are taken by other work the figures grow by about what the probe
// measures, whatever hedging does.
type latenessProbe struct {
	stop chan struct{}
	done chan []time.Duration // the samples, once stopped

	once   sync.Once
	result lateness
}

// startLatenessProbe starts sampling every probeEvery until end.
func startLatenessProbe() *latenessProbe {
	p := &latenessProbe{stop: make(chan struct{}), done: make(chan []time.Duration, 1)}
	go func() {
		var late []time.Duration
		due := time.Now().Add(probeEvery)
		t := time.NewTimer(probeEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				p.done <- late
				return
			case <-t.C:
				late = append(late, time.Since(due))
				due = time.Now().Add(probeEvery)
				t.Reset(probeEvery)
			}
		}
	}()
	return p
}

// lateness sums up what a probe measured.
type lateness struct {
	samples  int
	p99, max time.Duration
}

// end stops the probe, waits until it has stopped sampling, and returns
// what it measured; later calls return the same.
func (p *latenessProbe) end() lateness {
	p.once.Do(func() {
		close(p.stop)
		late := <-p.done
		if len(late) > 0 {
			ps := percentiles(late, 0.99, 1)
			p.result = lateness{samples: len(late), p99: ps[0], max: ps[1]}
		}
	})
	return p.result
}

// busyWarning says, if the timers were late by more than a tenth of
// delay at their p99, that the machine was too busy for the figures, and
// "" if not. A hedge that fires that late changes which attempt wins,
// and the p99 the demo prints is that of calls that waited as long.
// loadAvg, if not "", is the machine's load average, which says why.
func busyWarning(l lateness, delay time.Duration, loadAvg string) string {
	if l.samples == 0 || l.p99 <= delay/10 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "warning: the machine was busy: timers fired up to %v late, %v at p99, against a hedge delay of %v",
		roundDelay(l.max), roundDelay(l.p99), delay)
	if loadAvg != "" {
		fmt.Fprintf(&b, "; load average %s on %d CPUs", loadAvg, runtime.NumCPU())
	}
	b.WriteString(".\nHedges went out late and replies waited for a CPU, so the tail above is longer than this\n" +
		"machine gives when idle. Run the demo again when the machine is quieter.\n")
	return b.String()
}

// loadAverage is the machine's load average over the last minute, or ""
// where /proc/loadavg does not say.
func loadAverage() string {
	text, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(text), " ")
	return first
}

// warnIfBusy ends probe and writes busyWarning's warning to w, if any.
func warnIfBusy(w io.Writer, probe *latenessProbe, delay time.Duration) error {
	warning := busyWarning(probe.end(), delay, loadAverage())
	if warning == "" {
		return nil
	}
	_, err := fmt.Fprint(w, "\n"+warning)
	return err
}
