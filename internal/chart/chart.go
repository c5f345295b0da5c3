// Package chart holds what the commands' pictures share: a latency axis
// on a log scale, with ticks a reader can read as durations, and the
// picture's size and file formats. It is a module of its own, so that
// the plotting library stays out of the core's go.mod.
package chart

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The size of every picture: 864 × 480 pixels as a PNG, at 96 dots per
// inch.
const (
	Width  = 9 * vg.Inch
	Height = 5 * vg.Inch
	// PixelsWide and PixelsHigh are the PNG's size.
	PixelsWide, PixelsHigh = 864, 480
)

// New returns a plot with title whose Y axis is a latency in
// milliseconds on a log scale, with a grid behind whatever is added to
// it and the legend at the top left, where a tail plot's lines are low.
func New(title, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = LatencyTicks{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Centimeter / 2
	p.Add(plotter.NewGrid())
	return p
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
