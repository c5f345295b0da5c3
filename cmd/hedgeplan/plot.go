package main

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/chart"
)

// picture is what -plot draws: the plans the planner weighed, as the
// target latency against the extra load for each number of hedges, the
// latency without hedging, the budget, and the plan it chose.
type picture struct {
	target  string        // the quantile's name: p99
	budget  float64       // extra load allowed
	none    time.Duration // the target latency without hedging
	curves  [][]hedge.Plan
	plan    hedge.Plan
	maxLoad float64 // the X axis's end: curves hold the plans up to it
}

// newPicture gathers the picture of planner's plans for cfg: curves[h-1]
// is Curve(h) from the longest delay to the shortest, up to a load of
// three times the budget (or half as much again as the plan's load, if
// more), where the trade-off a budget faces lies. The curve goes by
// delay, not by load: delays across a gap in the latencies cost about
// the same load, and differ in latency.
func newPicture(planner *hedge.Planner, plan hedge.Plan, cfg config) picture {
	single := planner.Curve(1)
	pic := picture{
		target: quantileName(cfg.target), budget: cfg.budget, plan: plan,
		none:    single[len(single)-1].Latency, // the hedge at neverDelay, as the table's row 0
		maxLoad: min(float64(cfg.maxHedges), max(3*cfg.budget, 1.5*plan.Load)),
	}
	for h := 1; h <= cfg.maxHedges; h++ {
		var curve []hedge.Plan
		for _, p := range slices.Backward(planner.Curve(h)) {
			if p.Load <= pic.maxLoad {
				curve = append(curve, p)
			}
		}
		pic.curves = append(pic.curves, curve)
	}
	return pic
}

// markColor is the colour of the chosen plan's ring.
var markColor = color.RGBA{A: 0xff}

// plotPlan draws pic, of n latencies: a line for no hedging and one per
// number of hedges, the budget as a dashed upright, and a ring on the
// plan.
func plotPlan(pic picture, n int) *plot.Plot {
	p := chart.New(fmt.Sprintf("%s against extra load, as the planner expects it\n%d latencies, a budget of %s", pic.target, n, percent(pic.budget)), pic.target)
	p.X.Label.Text = "extra load: attempts beyond the first, in % of calls"
	p.X.Min, p.X.Max = 0, 100*pic.maxLoad
	p.Legend.Top = true // on the right, below the lines that start at no hedging's latency
	p.Legend.YOffs = -2 * vg.Centimeter

	series := []chart.Series{{Name: "no hedging", Points: plotter.XYs{{X: 0, Y: chart.Millis(pic.none)}, {X: 100 * pic.maxLoad, Y: chart.Millis(pic.none)}}}}
	lo, hi := chart.Millis(pic.none), chart.Millis(pic.none)
	for i, curve := range pic.curves {
		name := fmt.Sprintf("%d hedges", i+1)
		if i == 0 {
			name = "1 hedge"
		}
		s := chart.Series{Name: name}
		for _, plan := range curve {
			y := chart.Millis(plan.Latency)
			s.Points = append(s.Points, plotter.XY{X: 100 * plan.Load, Y: y})
			lo, hi = math.Min(lo, y), math.Max(hi, y)
		}
		if len(s.Points) > 0 {
			series = append(series, s)
		}
	}
	// The lines are made from points the planner computed: they are
	// finite, and so NewLine and NewScatter return no error below.
	chart.AddLines(p, false, series...)

	budget, _ := plotter.NewLine(plotter.XYs{{X: 100 * pic.budget, Y: lo}, {X: 100 * pic.budget, Y: hi}})
	budget.Color, budget.Width, budget.Dashes = chart.Color(0), vg.Points(1), []vg.Length{vg.Points(5), vg.Points(4)}
	p.Add(budget)
	p.Legend.Add("budget: "+percent(pic.budget), budget)

	mark, _ := plotter.NewScatter(plotter.XYs{{X: 100 * pic.plan.Load, Y: chart.Millis(pic.plan.Latency)}})
	mark.Shape, mark.Color, mark.Radius = draw.RingGlyph{}, markColor, vg.Points(6)
	p.Add(mark)
	p.Legend.Add(planName(pic.plan), mark)
	return p
}

// planName says what the plan is, as the legend names its ring.
func planName(plan hedge.Plan) string {
	switch plan.Hedges {
	case 0:
		return "plan: do not hedge"
	case 1:
		return fmt.Sprintf("plan: 1 hedge after %v", show(plan.Delay))
	}
	return fmt.Sprintf("plan: %d hedges, one every %v", plan.Hedges, show(plan.Delay))
}
