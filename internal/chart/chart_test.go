package chart_test

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/tailcut/hedge/internal/chart"
)

func TestLatencyTicks(t *testing.T) {
	tests := []struct {
		name     string
		min, max float64
		want     []plot.Tick
	}{
		{"a tail from 20ms to 600ms", 20, 600, []plot.Tick{
			{Value: 20, Label: "20ms"}, {Value: 30}, {Value: 40}, {Value: 50, Label: "50ms"}, {Value: 60}, {Value: 70}, {Value: 80}, {Value: 90},
			{Value: 100, Label: "100ms"}, {Value: 200, Label: "200ms"}, {Value: 300}, {Value: 400}, {Value: 500, Label: "500ms"}, {Value: 600},
		}},
		{"below a millisecond and above a second", 0.5, 2000, []plot.Tick{
			{Value: 0.5, Label: "500µs"}, {Value: 0.6}, {Value: 0.7}, {Value: 0.8}, {Value: 0.9},
			{Value: 1, Label: "1ms"}, {Value: 2, Label: "2ms"}, {Value: 3}, {Value: 4}, {Value: 5, Label: "5ms"}, {Value: 6}, {Value: 7}, {Value: 8}, {Value: 9},
			{Value: 10, Label: "10ms"}, {Value: 20, Label: "20ms"}, {Value: 30}, {Value: 40}, {Value: 50, Label: "50ms"}, {Value: 60}, {Value: 70}, {Value: 80}, {Value: 90},
			{Value: 100, Label: "100ms"}, {Value: 200, Label: "200ms"}, {Value: 300}, {Value: 400}, {Value: 500, Label: "500ms"}, {Value: 600}, {Value: 700}, {Value: 800}, {Value: 900},
			{Value: 1000, Label: "1s"}, {Value: 2000, Label: "2s"},
		}},
		{"too short for a 1, 2 or 5: every tick labelled", 61, 79, []plot.Tick{{Value: 70, Label: "70ms"}}},
		{"no range", 0, 100, nil},
		{"upside down", 100, 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chart.LatencyTicks{}.Ticks(tt.min, tt.max)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b float64) bool { return a == b || (a-b)/b < 1e-9 && (b-a)/b < 1e-9 })); diff != "" {
				t.Errorf("Ticks(%v, %v) (-want +got):\n%s", tt.min, tt.max, diff)
			}
		})
	}
}

func TestMillis(t *testing.T) {
	for d, want := range map[time.Duration]float64{
		1500 * time.Microsecond: 1.5, time.Second: 1000, 0: 0.001, -time.Second: 0.001,
	} {
		if got := chart.Millis(d); got != want {
			t.Errorf("Millis(%v) = %v, want %v", d, got, want)
		}
	}
}

// TestSave draws a line into each format Save writes and checks the
// file: a PNG of the documented size, an SVG document; and that a name
// in another format is refused before any file is made.
func TestSave(t *testing.T) {
	p := chart.New("title", "latency")
	line, err := plotter.NewLine(plotter.XYs{{X: 1, Y: 20}, {X: 2, Y: 500}})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(line)
	dir := t.TempDir()

	pngPath := filepath.Join(dir, "tail.PNG")
	if err := chart.Save(p, pngPath); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", pngPath, err)
	}
	if cfg.Width != chart.PixelsWide || cfg.Height != chart.PixelsHigh {
		t.Errorf("PNG of %d×%d pixels, want %d×%d", cfg.Width, cfg.Height, chart.PixelsWide, chart.PixelsHigh)
	}

	svgPath := filepath.Join(dir, "tail.svg")
	if err := chart.Save(p, svgPath); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("%s holds no <svg> element:\n%.200s", svgPath, svg)
	}

	for _, bad := range []string{"tail.pdf", "tail", "tail.png.txt"} {
		path := filepath.Join(dir, bad)
		if err := chart.Save(p, path); err == nil {
			t.Errorf("Save(%q): no error", bad)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("Save(%q) made a file", bad)
		}
	}
}
