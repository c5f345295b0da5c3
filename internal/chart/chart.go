// Package chart holds what the commands' pictures share: a latency axis
// on a log scale, with ticks a reader can read as durations, and the
// picture's size and file formats. It is a module of its own, so that
// the plotting library stays out of the core's go.mod.
package chart

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The size of every picture: 864 × 480 pixels as a PNG, at 96 dots per
// inch.
const (
	Width  = 9 * vg.Inch
	Height = 5 * vg.Inch
	// PixelsWide and PixelsHigh are the PNG's size.
	PixelsWide, PixelsHigh = 864, 480
)

// New returns a plot with title whose Y axis, named yLabel, is a
// latency in milliseconds on a log scale, with a grid behind whatever is
// added to it.
func New(title, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = LatencyTicks{}
	p.Add(plotter.NewGrid())
	return p
}

// Series is one line of a picture: its name in the legend, and its
// points.
type Series struct {
	Name   string
	Points plotter.XYs
}

// colors tell the lines apart: the first, which is the baseline in every
// picture (no hedging), in grey.
var colors = []color.RGBA{
	{0x55, 0x55, 0x55, 0xff}, {0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xd6, 0x27, 0x28, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff},
}

// Color is the colour of the i-th line AddLines draws.
func Color(i int) color.RGBA { return colors[i%len(colors)] }

// AddLines draws each series as a line 1.5 points wide in a colour of
// its own, Color(i) for the i-th, with a dot at each point if dots is
// set, and names it in p's legend.
func AddLines(p *plot.Plot, dots bool, series ...Series) error {
	for i, s := range series {
		line, err := plotter.NewLine(s.Points)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		line.Color, line.Width = Color(i), vg.Points(1.5)
		p.Add(line)
		if !dots {
			p.Legend.Add(s.Name, line)
			continue
		}
		scatter, err := plotter.NewScatter(s.Points)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		scatter.Color, scatter.Shape, scatter.Radius = Color(i), draw.CircleGlyph{}, vg.Points(3)
		p.Add(scatter)
		p.Legend.Add(s.Name, line, scatter)
	}
	return nil
}

// Millis is d in milliseconds, the unit of a latency axis; at least a
// microsecond, since a log scale has no place for 0.
func Millis(d time.Duration) float64 {
	return float64(max(d, time.Microsecond)) / float64(time.Millisecond)
}

// LatencyTicks marks a latency axis in milliseconds, on a log scale:
// 1, 2 and 5 in each decade labelled as durations (20ms, 500ms, 1s), the
// other digits as minor ticks. An axis too short to hold a 1, 2 or 5
// has every tick labelled. The zero value is ready to use.
type LatencyTicks struct{}

// Ticks returns the ticks between min and max; none unless 0 < min <=
// max.
func (LatencyTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0 && min <= max && !math.IsInf(max, 1)) {
		return nil
	}
	var ticks []plot.Tick
	labelled := 0
	for decade := math.Pow10(int(math.Floor(math.Log10(min)))); decade <= max; decade *= 10 {
		for i := 1; i < 10; i++ {
			v := decade * float64(i)
			if v < min || v > max {
				continue
			}
			tick := plot.Tick{Value: v}
			if i == 1 || i == 2 || i == 5 {
				tick.Label = label(v)
				labelled++
			}
			ticks = append(ticks, tick)
		}
	}
	if labelled == 0 {
		for i := range ticks {
			ticks[i].Label = label(ticks[i].Value)
		}
	}
	return ticks
}

// label writes ms milliseconds as a duration: 20ms, 1.5s, 500µs.
func label(ms float64) string {
	return time.Duration(math.Round(ms * float64(time.Millisecond))).String()
}

// CheckPath returns an error unless path names a file in a format Save
// writes: .png or .svg. A command checks it before its long work, not
// after.
func CheckPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png", ".svg":
		return nil
	}
	return fmt.Errorf("%q: want a file name ending in .png or .svg", path)
}

// Save draws p into the file at path, Width × Height, in the format its
// extension names (see CheckPath).
func Save(p *plot.Plot, path string) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	return p.Save(Width, Height, path)
}
