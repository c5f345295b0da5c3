package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tailcut/hedge"
)

// columns are the quantiles the table shows: p50, p95, p99, p99.9 and,
// as the sample no other exceeds, the max.
var columns = []float64{0.50, 0.95, 0.99, 0.999, 1}

// percentiles returns the nearest-rank percentile of samples for each q
// in qs (0 < q <= 1): the smallest sample that at least q of them do not
// exceed. It sorts a copy, leaving samples as they were; with no samples
// every answer is 0.
func percentiles(samples []time.Duration, qs ...float64) []time.Duration {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	out := make([]time.Duration, len(qs))
	if len(sorted) == 0 {
		return out
	}
	for i, q := range qs {
		// The epsilon keeps 0.07*100, which is 7.000000000000001 in
		// floating point, at rank 7 rather than 8.
		rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
		out[i] = sorted[min(max(rank, 1), len(sorted))-1]
	}
	return out
}

// row is one line of the table: what one run of calls measured.
type row struct {
	name      string
	latencies []time.Duration // one per call, failed calls included
	failures  int
	firstErr  error
	stats     hedge.Snapshot
}

func (r row) p99() time.Duration { return percentiles(r.latencies, 0.99)[0] }

// printTable writes the comparison of the runs, failed calls counted in
// a column and the first error of each run with any under the table,
// then a summary of the run with the least p99 against the first.
func printTable(w io.Writer, rows ...row) error {
	// Numbers read best aligned right, names left: pad the names to one
	// width so that right-aligning them changes nothing.
	nameWidth := 0
	for _, r := range rows {
		nameWidth = max(nameWidth, len(r.name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%*s\tp50\tp95\tp99\tp99.9\tmax\tamplification\thedge rate\twin rate\tfailed\t\n", nameWidth, "")
	for _, r := range rows {
		fmt.Fprintf(tw, "%-*s\t", nameWidth, r.name)
		for _, d := range percentiles(r.latencies, columns...) {
			fmt.Fprintf(tw, "%v\t", d.Round(time.Millisecond))
		}
		winRate := "-" // no hedges, nothing to win
		if r.stats.Hedged > 0 {
			winRate = percent(r.stats.WinRate())
		}
		fmt.Fprintf(tw, "%.2fx\t%s\t%s\t%d\t\n", r.stats.Amplification(), percent(r.stats.HedgeRate()), winRate, r.failures)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.failures > 0 {
			fmt.Fprintf(w, "%s: %d of %d calls failed, first: %v\n", r.name, r.failures, len(r.latencies), r.firstErr)
		}
	}
	if len(rows) < 2 {
		return nil
	}
	_, err := fmt.Fprintf(w, "\n%s\n", headline(rows...))
	return err
}

// headline sums up rows, two at least: the run with the least p99
// against the first, the table's baseline. "Percentile{Quantile: 0.9}:
// p99 cut from 569ms to 80ms for 10.6% extra calls".
func headline(rows ...row) string {
	base, last := rows[0], rows[1]
	for _, r := range rows[1:] {
		if r.p99() < last.p99() {
			last = r
		}
	}
	verb := "cut"
	if last.p99() > base.p99() {
		verb = "raised"
	}
	extra := last.stats.Amplification()/base.stats.Amplification() - 1
	return fmt.Sprintf("%s: p99 %s from %v to %v for %s extra calls", last.name, verb,
		base.p99().Round(time.Millisecond), last.p99().Round(time.Millisecond), percent(extra))
}

func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// histogramEdges are the upper edges of the histogram's latency bands.
var histogramEdges = []time.Duration{
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
}

// printHistogram draws the share of calls in each latency band, for each
// row side by side, so the tail that hedging moves can be seen.
func printHistogram(w io.Writer, rows ...row) error {
	const width = 24 // characters for a band that holds every call
	fmt.Fprintf(w, "\n%-12s", "latency")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-*s", width+7, r.name)
	}
	fmt.Fprintln(w)
	lo := time.Duration(0)
	for i := 0; i <= len(histogramEdges); i++ {
		hi := time.Duration(math.MaxInt64)
		label := fmt.Sprintf("≥ %v", lo)
		if i < len(histogramEdges) {
			hi = histogramEdges[i]
			label = fmt.Sprintf("< %v", hi)
		}
		fmt.Fprintf(w, "%-12s", label)
		for _, r := range rows {
			n := 0
			for _, d := range r.latencies {
				if d >= lo && d < hi {
					n++
				}
			}
			share := float64(n) / float64(max(len(r.latencies), 1))
			bar := strings.Repeat("█", int(math.Round(share*width)))
			if bar == "" && n > 0 {
				bar = "▏" // a band with calls is never blank: that is the tail
			}
			fmt.Fprintf(w, "  %-*s %5.1f%%", width, bar, 100*share)
		}
		fmt.Fprintln(w)
		lo = hi
	}
	return nil
}
