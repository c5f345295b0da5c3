package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// loadRow is one line of the load table: what one policy did to the
// measured calls of one load.
type loadRow struct {
	name      string
	rho       float64
	p50, p99  time.Duration // failed calls included, at the time they failed
	calls     int
	attempts  float64 // attempts sent per call, shed ones included
	hedgeRate float64 // share of calls that sent a hedge
	winRate   float64 // share of those a hedge won; 0 if none was sent
	shed      float64 // share of the hedges sent that a Shedder turned away
	failed    int
	firstErr  error
	// delay is the policy's delay for the first hedge once the calls were
	// made, what a learned delay learned; 0 for a policy that never
	// hedges.
	delay time.Duration
}

// summarizeLoad makes the row of calls.
func summarizeLoad(name string, rho float64, calls []callTally) loadRow {
	r := loadRow{name: name, rho: rho, calls: len(calls)}
	if len(calls) == 0 {
		return r
	}
	latencies := make([]time.Duration, len(calls))
	var sent, shed, hedged, won int
	for i := range calls {
		c := &calls[i]
		latencies[i] = c.latency
		n := int(c.sent.Load())
		sent += n
		shed += int(c.shed.Load())
		if n > 1 {
			hedged++
			if c.err == nil && c.winner > 0 {
				won++
			}
		}
		if c.err != nil {
			if r.failed++; r.firstErr == nil {
				r.firstErr = c.err
			}
		}
	}
	ps := percentiles(latencies, 0.5, 0.99)
	r.p50, r.p99 = ps[0], ps[1]
	n := float64(len(calls))
	r.attempts = float64(sent) / n
	r.hedgeRate = float64(hedged) / n
	if hedges := sent - len(calls); hedges > 0 {
		r.shed = float64(shed) / float64(hedges)
	}
	if hedged > 0 {
		r.winRate = float64(won) / float64(hedged)
	}
	return r
}

// printLoadTable writes rows as a table, a blank line between loads,
// failed calls counted in the last column, and then each failing row's
// first error. The column of hedges shed is there if withShed is set.
func printLoadTable(w io.Writer, withShed bool, rows []loadRow) error {
	header := []string{"", "ρ", "p50", "p99", "attempts/call", "hedge rate", "win rate"}
	if withShed {
		header = append(header, "hedges shed")
	}
	header = append(header, "delay", "failed")
	cells := [][]string{header}
	for _, r := range rows {
		win, delay := "-", "-" // no hedges, nothing to win; no delay
		if r.hedgeRate > 0 {
			win = percent(r.winRate)
		}
		if r.delay > 0 {
			delay = roundDelay(r.delay).String()
		}
		line := []string{r.name, fmt.Sprintf("%g", r.rho), roundMillis(r.p50), roundMillis(r.p99),
			fmt.Sprintf("%.2fx", r.attempts), percent(r.hedgeRate), win}
		if withShed {
			line = append(line, percent(r.shed))
		}
		cells = append(cells, append(line, delay, strconv.Itoa(r.failed)))
	}
	widths := make([]int, len(header))
	for _, line := range cells {
		for i, c := range line {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for i, line := range cells {
		if i > 1 && rows[i-1].rho != rows[i-2].rho {
			b.WriteString("\n")
		}
		// The name aligned left, numbers right, two spaces apart.
		fmt.Fprintf(&b, "%-*s", widths[0], line[0])
		for j, c := range line[1:] {
			fmt.Fprintf(&b, "  %*s", widths[j+1], c) // fmt pads by runes, as widths counts
		}
		b.WriteString("\n")
	}
	for _, r := range rows {
		if r.failed > 0 {
			fmt.Fprintf(&b, "ρ %g %s: %d of %d calls failed, first: %v\n", r.rho, r.name, r.failed, r.calls, r.firstErr)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func roundMillis(d time.Duration) string { return d.Round(time.Millisecond).String() }

// roundDelay keeps a delay's first three digits or so.
func roundDelay(d time.Duration) time.Duration {
	if d >= 100*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}
