package main

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/tailcut/hedge/internal/chart"
)

// TestTailPoints: the tail plot's points are the percentiles the table
// computes, p50 first and p99.9 last, in milliseconds.
func TestTailPoints(t *testing.T) {
	lat := make([]time.Duration, 1000)
	for i := range lat {
		lat[i] = time.Duration(1000-i) * ms
	}
	pts := tailPoints(lat)
	if len(pts) != tailSteps+1 {
		t.Fatalf("%d points, want %d", len(pts), tailSteps+1)
	}
	first, last := pts[0], pts[len(pts)-1]
	if first != (plotter.XY{X: nines(0.5), Y: 500}) || last != (plotter.XY{X: nines(0.999), Y: 999}) {
		t.Errorf("from %+v to %+v, want p50 at 500ms to p99.9 at 999ms", first, last)
	}
	for i, p := range pts {
		q := 1 - math.Pow(10, -p.X)
		if want := chart.Millis(percentiles(lat, q)[0]); p.Y != want {
			t.Errorf("point %d at q %v: %vms, want the percentile %vms", i, q, p.Y, want)
		}
		if i > 0 && (p.X <= pts[i-1].X || p.Y < pts[i-1].Y) {
			t.Errorf("point %d %+v after %+v: X must grow and Y not fall", i, p, pts[i-1])
		}
	}
}

// TestLoadPoints: one line per policy, in the table's order, through
// each load's p99.
func TestLoadPoints(t *testing.T) {
	rows := []loadRow{
		{name: "no hedging", rho: 0.3, p99: 118 * ms}, {name: "hedged", rho: 0.3, p99: 19 * ms},
		{name: "no hedging", rho: 0.9, p99: 163 * ms}, {name: "hedged", rho: 0.9, p99: 401 * ms},
	}
	names, points := loadPoints(rows)
	if len(names) != 2 || names[0] != "no hedging" || names[1] != "hedged" {
		t.Fatalf("lines %q, want no hedging, hedged", names)
	}
	want := []plotter.XYs{{{X: 0.3, Y: 118}, {X: 0.9, Y: 163}}, {{X: 0.3, Y: 19}, {X: 0.9, Y: 401}}}
	for i := range want {
		if len(points[i]) != len(want[i]) || points[i][0] != want[i][0] || points[i][1] != want[i][1] {
			t.Errorf("%s: %v, want %v", names[i], points[i], want[i])
		}
	}
}

// TestRunPlots runs the demo with -plot and checks the picture: a PNG of
// the chart's size in which each policy's line is drawn in its colour.
func TestRunPlots(t *testing.T) {
	checkNoLeaks(t)
	path := filepath.Join(t.TempDir(), "tail.png")
	cfg := config{calls: 50, concurrency: 5, delay: 20 * ms, timeout: 2 * time.Second, profile: testProfile, seed: 1, plot: path}
	var out, status bytes.Buffer
	if err := run(t.Context(), cfg, &out, &status); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	checkLines(t, img, 6)
}

// TestRunLoadPlots sweeps two loads with -plot and checks the picture as
// TestRunPlots does.
func TestRunLoadPlots(t *testing.T) {
	checkNoLeaks(t)
	path := filepath.Join(t.TempDir(), "load.png")
	cfg := config{calls: 20, delay: 20 * ms, timeout: 10 * time.Second, profile: testProfile, seed: 1, sweep: true, plot: path,
		load: loadConfig{warmup: 5, workers: 4, scale: 0.25, stopWork: true, rhos: []float64{0.3, 0.6}}}
	var out, status bytes.Buffer
	if err := runLoad(t.Context(), cfg, &out, &status); err != nil {
		t.Fatal(err)
	}
	checkLines(t, decodePNG(t, path), len(loadPolicies(ms)))
}

// TestPlotRefusesAFormatItCannotDraw: a -plot file in a format the chart
// cannot write is an error before any call, not after the run.
func TestPlotRefusesAFormatItCannotDraw(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tail.jpg")
	for name, demo := range map[string]func() error{
		"run": func() error {
			cfg := config{calls: 1, concurrency: 1, delay: 20 * ms, timeout: time.Second, profile: testProfile, plot: path}
			return run(t.Context(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
		},
		"runLoad": func() error {
			cfg := config{calls: 1, delay: 20 * ms, timeout: time.Second, profile: testProfile, sweep: true, plot: path,
				load: loadConfig{workers: 1, scale: 1, rhos: []float64{0.5}}}
			return runLoad(t.Context(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
		},
	} {
		err := demo()
		if err == nil || !strings.HasPrefix(err.Error(), "-plot ") || !strings.Contains(err.Error(), ".png or .svg") {
			t.Errorf("%s with -plot %s: %v, want an error about -plot's format", name, path, err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a %s was written", path)
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
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
	return img
}

// checkLines checks that img has, for each of n lines, pixels of the
// colour the chart gives it: a line that was never drawn has none.
func checkLines(t *testing.T, img image.Image, n int) {
	t.Helper()
	for i := range n {
		want := chart.Color(i)
		count := 0
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == want {
					count++
				}
			}
		}
		if count < 20 {
			t.Errorf("line %d: %d pixels of its colour %v, want at least 20", i, count, want)
		}
	}
}
