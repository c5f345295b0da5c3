package lab

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tailcut/hedge"
)

// LoadRow is what one policy did to the measured calls of one Load. It
// is a plain value, made by RunLoad; the zero LoadRow measured nothing.
type LoadRow struct {
	Name          string
	Rho           float64 // the Load's utilisation by primaries
	P50, P95, P99 time.Duration
	// Amp is attempts per call (1 is no extra attempt); WorstAmp is the
	// largest Amp of any Block of measured calls.
	Amp, WorstAmp float64
	// Work is worker time per call, in mean service times: what the
	// cluster spent, including requests that ran on after their attempt
	// was cancelled. Without hedging it is about 1.
	Work float64
	// Wasted is the share of Work spent on attempts other than the one
	// whose answer the call returned: losers, whether cancelled while
	// running or run to their end. Both is the share of calls of which a
	// worker took two attempts or more; Tie.Signal's delay lets it happen
	// to tied calls too. Crossed is the share of calls in which a tie cut
	// an attempt that had started: two started before either's signal
	// arrived.
	Wasted, Both, Crossed float64
	// Spent is Amp less the attempts a tie cancelled while they were
	// queued, which did no work and give their budget's grant back: the
	// attempts per call a budget is charged for.
	Spent float64
	// HedgeRate is the share of calls that started a hedge; WinRate the
	// share of those that a hedge won; Shed the hedges refused per call.
	HedgeRate, WinRate, Shed float64
	// Queue is the servers' mean queue: the requests waiting for a
	// worker, on all replicas together, averaged over the time from the
	// first measured call's arrival to the last's.
	Queue float64
	// Delay is the policy's delay for the first hedge when the run ended:
	// what a learned delay learned. 0 with MaxAttempts 1; negative when
	// the delay sends no hedge (a Planner that plans none).
	Delay time.Duration
	// Plan is a Planner's plan when the run ended, with the extra
	// attempts per call it expected; nil for other delays.
	Plan *hedge.Plan
	// Blocks are the measured calls in blocks of Load.Block, in order;
	// a last, partial block is left out.
	Blocks []Block
}

// Block is what one block of consecutive measured calls saw: their p99,
// their attempts per call, and the servers' mean queue from the first
// call's arrival to the next block's first (or to the last call's). It is
// a plain value.
type Block struct {
	P99   time.Duration
	Amp   float64
	Queue float64
	// Spent and Wasted are LoadRow's, for the block's calls.
	Spent, Wasted float64
}

// queueMark is the servers' queue area (see cluster.area) at a moment of a
// run, given as the time since the run began.
type queueMark struct {
	at   time.Duration
	area int64
}

// meanQueue is the mean queue between two marks.
func meanQueue(from, to queueMark) float64 {
	if to.at <= from.at {
		return 0
	}
	return float64(to.area-from.area) / float64(to.at-from.at)
}

// summarizeLoad summarizes the measured calls of a run of l. marks are
// the queue's area when each block of measured calls began, and last
// when the last call arrived.
func summarizeLoad(name string, l Load, calls []callTally, marks []queueMark) LoadRow {
	measured := calls[l.Warm:]
	row := LoadRow{Name: name, Rho: l.Rho}
	if len(measured) == 0 {
		return row
	}
	lat := make([]time.Duration, len(measured))
	var attempts, hedged, won, shed, both, crossed, cut int
	var work, lost time.Duration
	for i := range measured {
		c := &measured[i]
		lat[i] = c.latency
		n := int(c.attempts.Load())
		attempts += n
		shed += int(c.shed.Load())
		work += c.work
		lost += c.work
		if c.winner >= 0 {
			lost -= c.byAttempt[c.winner]
		}
		if c.began >= 2 {
			both++
		}
		if c.crossed {
			crossed++
		}
		cut += int(c.queuedCut)
		if n > 1 {
			hedged++
			if c.winner > 0 {
				won++
			}
		}
	}
	n := float64(len(measured))
	s := slices.Sorted(slices.Values(lat))
	row.P50, row.P95, row.P99 = NearestRank(s, 0.5), NearestRank(s, 0.95), NearestRank(s, 0.99)
	row.Amp = float64(attempts) / n
	row.Work = float64(work) / float64(l.meanService()) / n
	row.HedgeRate = float64(hedged) / n
	if hedged > 0 {
		row.WinRate = float64(won) / float64(hedged)
	}
	row.Shed = float64(shed) / n
	row.Both = float64(both) / n
	row.Crossed = float64(crossed) / n
	row.Spent = float64(attempts-cut) / n
	if work > 0 {
		row.Wasted = float64(lost) / float64(work)
	}
	row.Queue = meanQueue(marks[0], marks[len(marks)-1])
	row.WorstAmp = row.Amp
	for from := 0; from+l.Block <= len(measured); from += l.Block {
		block := measured[from : from+l.Block]
		attempts, cut := 0, 0
		var work, lost time.Duration
		for i := range block {
			c := &block[i]
			attempts += int(c.attempts.Load())
			cut += int(c.queuedCut)
			work += c.work
			lost += c.work
			if c.winner >= 0 {
				lost -= c.byAttempt[c.winner]
			}
		}
		k := from / l.Block
		b := Block{P99: NearestRank(slices.Sorted(slices.Values(lat[from:from+l.Block])), 0.99),
			Amp: float64(attempts) / float64(l.Block), Queue: meanQueue(marks[k], marks[k+1]),
			Spent: float64(attempts-cut) / float64(l.Block)}
		if work > 0 {
			b.Wasted = float64(lost) / float64(work)
		}
		row.Blocks = append(row.Blocks, b)
		if from == 0 || b.Amp > row.WorstAmp {
			row.WorstAmp = b.Amp
		}
	}
	return row
}

// String formats the row under LoadHeader.
func (r LoadRow) String() string {
	win, shed, delay := "-", "-", "-"
	if r.HedgeRate > 0 {
		win = fmt.Sprintf("%.1f%%", 100*r.WinRate)
	}
	if r.Shed > 0 {
		shed = fmt.Sprintf("%.1f%%", 100*r.Shed)
	}
	switch {
	case r.Plan != nil && r.Plan.Hedges == 0:
		delay = fmt.Sprintf("no hedge, plans +%.3f", r.Plan.Load)
	case r.Plan != nil:
		delay = fmt.Sprintf("%d×%v, plans +%.3f", r.Plan.Hedges, roundDelay(r.Plan.Delay), r.Plan.Load)
	case r.Delay < 0:
		delay = "no hedge"
	case r.Delay > 0:
		delay = roundDelay(r.Delay).String()
	}
	return fmt.Sprintf("%-32s %4.2f %8v %8v %8v %6.3fx %6.3fx %5.2f %6.1f%% %6s %5s  %s",
		r.Name, r.Rho, roundLatency(r.P50), roundLatency(r.P95), roundLatency(r.P99),
		r.Amp, r.WorstAmp, r.Work, 100*r.HedgeRate, win, shed, delay)
}

// LoadHeader is the line above LoadRows.
func LoadHeader() string {
	return fmt.Sprintf("%-32s %4s %8s %8s %8s %7s %7s %5s %7s %6s %5s  %s",
		"", "ρ", "p50", "p95", "p99", "amp", "worst", "work", "hedged", "won", "shed", "delay")
}

// BlockString formats the row's blocks: p99 and attempts per call of each.
func (r LoadRow) BlockString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-32s", r.Name)
	for _, blk := range r.Blocks {
		fmt.Fprintf(&b, " %7v %5.2fx", roundLatency(blk.P99), blk.Amp)
	}
	return b.String()
}

func roundDelay(d time.Duration) time.Duration {
	if d >= 100*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}

func roundLatency(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// LoadTable formats rows under title and LoadHeader, with a blank line
// between loads.
func LoadTable(title string, rows []LoadRow) string {
	var b strings.Builder
	b.WriteString(title + "\n" + LoadHeader() + "\n")
	for i, r := range rows {
		if i > 0 && r.Rho != rows[i-1].Rho {
			b.WriteString("\n")
		}
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

// BlockTable formats the rows' blocks under title: p99 and attempts per
// call of each block of measured calls, in order.
func BlockTable(title string, rows []LoadRow) string {
	var b strings.Builder
	b.WriteString(title + "\n")
	if len(rows) > 0 {
		fmt.Fprintf(&b, "%-32s", "p99, attempts per call")
		for i := range rows[0].Blocks {
			fmt.Fprintf(&b, " %14s", fmt.Sprintf("block %d", i+1))
		}
		b.WriteString("\n")
	}
	for _, r := range rows {
		b.WriteString(r.BlockString() + "\n")
	}
	return b.String()
}
