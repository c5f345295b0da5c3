package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/chart"
)

// TestPictureIsWhatThePlannerWeighed: the picture marks the plan the
// output recommends, and its lines are the planner's own curves, from
// the longest delay to the shortest, within the X axis.
func TestPictureIsWhatThePlannerWeighed(t *testing.T) {
	for _, budget := range []float64{0.10, 0.15} {
		cfg := config{budget: budget, target: 0.99, maxHedges: 2, column: 1}
		hedges, delay, _ := plan(t, fastSlow(4000), cfg)
		lat, err := readLatencies(strings.NewReader(fastSlow(4000)), false, 1, "")
		if err != nil {
			t.Fatal(err)
		}
		planner, err := learn(lat, cfg)
		if err != nil {
			t.Fatal(err)
		}
		pic := newPicture(planner, planner.Replan(), cfg)
		if pic.plan.Hedges != hedges || show(pic.plan.Delay) != delay {
			t.Errorf("budget %v: the picture marks %d hedges every %v, the output recommends %d every %v",
				budget, pic.plan.Hedges, show(pic.plan.Delay), hedges, delay)
		}
		if pic.plan.Load > budget || pic.plan.Load > pic.maxLoad {
			t.Errorf("budget %v: the plan's load %v is beyond the budget or the axis (%v)", budget, pic.plan.Load, pic.maxLoad)
		}
		if len(pic.curves) != cfg.maxHedges {
			t.Fatalf("budget %v: %d curves, want one per number of hedges, %d", budget, len(pic.curves), cfg.maxHedges)
		}
		for i, curve := range pic.curves {
			all := planner.Curve(i + 1)
			if len(curve) < 2 || len(curve) > len(all) {
				t.Fatalf("budget %v, %d hedges: %d of the curve's %d plans", budget, i+1, len(curve), len(all))
			}
			for j, p := range curve {
				if want := all[len(all)-1-j]; p != want {
					t.Errorf("budget %v, %d hedges: plan %d is %+v, want the curve's %+v", budget, i+1, j, p, want)
					break
				}
				if p.Load > pic.maxLoad {
					t.Errorf("budget %v, %d hedges: a plan of load %v beyond the axis' %v", budget, i+1, p.Load, pic.maxLoad)
				}
			}
		}
		if none := planner.Curve(1); pic.none != none[len(none)-1].Latency {
			t.Errorf("budget %v: no hedging at %v, want the table's %v", budget, pic.none, none[len(none)-1].Latency)
		}
	}
}

// TestRunPlots runs hedgeplan with -plot: a PNG of the chart's size, with
// each line in its colour and the plan's ring.
func TestRunPlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.png")
	var b strings.Builder
	if err := run(strings.NewReader(fastSlow(4000)), &b, config{budget: 0.15, target: 0.99, maxHedges: 2, column: 1, plot: path}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != chart.PixelsWide || b.Dy() != chart.PixelsHigh {
		t.Errorf("%s is %d×%d pixels, want %d×%d", path, b.Dx(), b.Dy(), chart.PixelsWide, chart.PixelsHigh)
	}
	for i, name := range []string{"no hedging", "1 hedge", "2 hedges"} {
		if n := pixelsOf(img, chart.Color(i)); n < 20 {
			t.Errorf("%s: %d pixels of its colour, want at least 20", name, n)
		}
	}
	if n := pixelsOf(img, markColor); n < 20 {
		t.Errorf("the plan's ring: %d pixels of its colour, want at least 20", n)
	}
}

// TestPlotRefusesAFormatItCannotDraw: a -plot file in a format the chart
// cannot write is an error before the input is read.
func TestPlotRefusesAFormatItCannotDraw(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.gif")
	err := run(strings.NewReader("not read"), &strings.Builder{}, config{budget: 0.1, target: 0.99, maxHedges: 2, column: 1, plot: path})
	if err == nil || !strings.HasPrefix(err.Error(), "-plot ") {
		t.Errorf("-plot %s: %v, want an error about -plot", path, err)
	}
}

func TestPlanName(t *testing.T) {
	for _, tt := range []struct {
		plan hedge.Plan
		want string
	}{
		{hedge.Plan{}, "plan: do not hedge"},
		{hedge.Plan{Hedges: 1, Delay: 41437 * time.Microsecond}, "plan: 1 hedge after 41.4ms"},
		{hedge.Plan{Hedges: 2, Delay: 45600 * time.Microsecond}, "plan: 2 hedges, one every 45.6ms"},
	} {
		if got := planName(tt.plan); got != tt.want {
			t.Errorf("planName(%+v) = %q, want %q", tt.plan, got, tt.want)
		}
	}
}

// pixelsOf counts img's pixels of colour c.
func pixelsOf(img image.Image, c color.Color) int {
	r0, g0, b0, a0 := c.RGBA()
	n := 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			if r, g, b, a := img.At(x, y).RGBA(); r == r0 && g == g0 && b == b0 && a == a0 {
				n++
			}
		}
	}
	return n
}
