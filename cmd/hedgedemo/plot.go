package main

import (
	"fmt"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/tailcut/hedge/internal/chart"
)

// The tail plot's X axis is the percentile q drawn at -log10(1-q), so
// that each step from p90 to p99 to p99.9 gets as much room as the whole
// of p50 to p90: the tail is where hedging works.
var (
	tailFrom, tailTo = nines(0.5), nines(0.999)
	tailTicks        = plot.ConstantTicks{
		{Value: nines(0.5), Label: "p50"}, {Value: nines(0.8)}, {Value: nines(0.9), Label: "p90"},
		{Value: nines(0.95), Label: "p95"}, {Value: nines(0.98)}, {Value: nines(0.99), Label: "p99"},
		{Value: nines(0.995)}, {Value: nines(0.998)}, {Value: nines(0.999), Label: "p99.9"},
	}
)

// tailSteps is how many points each line of the tail plot has.
const tailSteps = 240

// nines is where quantile q sits on the tail plot's X axis.
func nines(q float64) float64 { return -math.Log10(1 - q) }

// tailPoints is the latency of each quantile from p50 to p99.9 (X as
// nines, Y in milliseconds), as the table computes its columns.
func tailPoints(latencies []time.Duration) plotter.XYs {
	qs := make([]float64, tailSteps+1)
	for i := range qs {
		qs[i] = 1 - math.Pow(10, -(tailFrom+(tailTo-tailFrom)*float64(i)/tailSteps))
	}
	qs[len(qs)-1] = 0.999 // not 0.9990000000000001, whose rank is one more
	xys := make(plotter.XYs, len(qs))
	for i, d := range percentiles(latencies, qs...) {
		xys[i] = plotter.XY{X: nines(qs[i]), Y: chart.Millis(d)}
	}
	return xys
}

// plotTail draws each row's latency against its percentile, subtitle
// saying what was run.
func plotTail(rows []row, subtitle string) (*plot.Plot, error) {
	p := chart.New("Latency by percentile, with and without hedging\n"+subtitle, "latency")
	p.X.Label.Text = "percentile"
	p.X.Min, p.X.Max = tailFrom, tailTo
	p.X.Tick.Marker = tailTicks
	p.Legend.Top, p.Legend.Left = false, false // where the lines are low and far right, nothing is: hedging leaves no tail there
	p.Legend.XOffs, p.Legend.YOffs = -vg.Centimeter/2, vg.Centimeter/2
	var lines []chart.Series
	for _, r := range rows {
		lines = append(lines, chart.Series{Name: r.name, Points: tailPoints(r.latencies)})
	}
	if err := chart.AddLines(p, false, lines...); err != nil {
		return nil, err
	}
	return p, nil
}

// plotTailTo draws plotTail into the file at path, if path is not "".
func plotTailTo(path, subtitle string, rows []row) error {
	if path == "" {
		return nil
	}
	p, err := plotTail(rows, subtitle)
	if err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	return chart.Save(p, path)
}

// loadPoints is each policy's p99 (in milliseconds) against ρ, in the
// order the policies first appear in rows.
func loadPoints(rows []loadRow) (names []string, points []plotter.XYs) {
	for _, r := range rows {
		i := slices.Index(names, r.name)
		if i < 0 {
			i = len(names)
			names, points = append(names, r.name), append(points, nil)
		}
		points[i] = append(points[i], plotter.XY{X: r.rho, Y: chart.Millis(r.p99)})
	}
	return names, points
}

// plotLoad draws the sweep, rows of one load or more: each policy's p99
// against the load, subtitle saying what was run.
func plotLoad(rows []loadRow, subtitle string) (*plot.Plot, error) {
	p := chart.New("p99 under load, with and without hedging\n"+subtitle, "p99")
	p.X.Label.Text = "ρ, the load that primaries alone put on the workers"
	p.Legend.Top, p.Legend.Left = true, true // where the load is light and hedges cut p99 most
	p.Legend.XOffs, p.Legend.YOffs = vg.Centimeter/2, -vg.Centimeter/4
	names, points := loadPoints(rows)
	var ticks plot.ConstantTicks // at the loads swept, not at round numbers between them
	for _, pt := range points[0] {
		ticks = append(ticks, plot.Tick{Value: pt.X, Label: fmt.Sprintf("%g", pt.X)})
	}
	p.X.Tick.Marker = ticks
	var lines []chart.Series
	for i, name := range names {
		lines = append(lines, chart.Series{Name: name, Points: points[i]})
	}
	if err := chart.AddLines(p, true, lines...); err != nil {
		return nil, err
	}
	return p, nil
}

// plotLoadTo draws plotLoad into the file at path, if path is not "".
func plotLoadTo(path, subtitle string, rows []loadRow) error {
	if path == "" {
		return nil
	}
	p, err := plotLoad(rows, subtitle)
	if err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	return chart.Save(p, path)
}
