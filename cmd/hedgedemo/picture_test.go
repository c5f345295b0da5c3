package main

import (
	"context"
	"flag"
	"fmt"
	"image"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

var update = flag.Bool("update", false, "TestPicture: draw docs/img/tail.png and write its lines in README.md from the run, instead of checking them")

const (
	pictureCalls = 10000 // a policy's measured calls, and its warm-up's
	picturePath  = "../../docs/img/tail.png"
	readmePath   = "../../README.md"
)

// pictureConfig is the demo as it runs by default, with pictureCalls
// calls.
func pictureConfig() config {
	var cfg config
	var metricsAddr string
	newFlags(&cfg, &metricsAddr, flag.ContinueOnError)
	cfg.calls = pictureCalls
	return cfg
}

// pictureRun runs each of the default run's policies through the real
// Do, in virtual time, against the demo's latencies with no network in
// between: attempt k of call i takes what the PCG source seeded with
// the demo's seed and (i, k) draws, so that every policy meets the same
// calls and the run is the same on every machine. The calls go one after
// another; the learned delays warm up on calls of their own.
func pictureRun(t *testing.T, cfg config) []row {
	var rows []row
	synctest.Test(t, func(t *testing.T) {
		for _, p := range demoPolicies(cfg) {
			if p.learns {
				virtualDrive(t.Context(), p.policy, cfg, cfg.calls)
			}
			got := virtualDrive(t.Context(), p.policy, cfg, 0)
			got.name = p.rowName()
			rows = append(rows, got)
		}
	})
	return rows
}

// virtualDrive makes cfg.calls calls through policy, calls from, from+1,
// ... of the draws, and returns what drive would.
func virtualDrive(ctx context.Context, policy hedge.Policy[*http.Response], cfg config, from int) row {
	var stats hedge.Stats
	policy.Observer = tee(&stats, policy.Observer)
	r := row{latencies: make([]time.Duration, cfg.calls)}
	for n := range cfg.calls {
		start := time.Now()
		_, err := hedge.Do(ctx, policy, func(ctx context.Context) (*http.Response, error) {
			i, k := uint64(from+n), uint64(hedge.Attempt(ctx))
			if err := sleep(ctx, cfg.profile.draw(rand.New(rand.NewPCG(cfg.seed, i<<8|k)))); err != nil {
				return nil, err
			}
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
		})
		r.latencies[n] = time.Since(start)
		if err != nil {
			if r.failures++; r.firstErr == nil {
				r.firstErr = err
			}
		}
	}
	r.stats = stats.Snapshot()
	return r
}

// pictureLines are the README's lines for the picture: the image, and a
// caption with the run's headline.
func pictureLines(rows []row) string {
	return "![Latency by percentile, with and without hedging](docs/img/tail.png)\n\n" +
		fmt.Sprintf("*%s calls a policy to the demo's upstream, in virtual time (`scripts/pictures`). %s.*\n",
			thousands(pictureCalls), headline(rows...))
}

var pictureLinesPattern = regexp.MustCompile(`(?m)^!\[[^\]]*\]\(docs/img/tail\.png\)\n\n\*.*\*\n`)

// TestPicture runs the README's picture in virtual time and checks that
// the picture and the README's caption are what the run gives, so that
// neither drifts from the code. With -update it draws them instead:
// scripts/pictures.
func TestPicture(t *testing.T) {
	if testing.Short() {
		t.Skip("the picture takes 90,000 calls")
	}
	rows := pictureRun(t, pictureConfig())
	for _, r := range rows {
		if r.failures > 0 {
			t.Errorf("%s: %d calls failed, first: %v", r.name, r.failures, r.firstErr)
		}
	}
	subtitle := fmt.Sprintf("%s calls a policy, in virtual time, seed %d", thousands(pictureCalls), pictureConfig().seed)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	want := pictureLines(rows)
	if *update {
		if err := plotTailTo(picturePath, subtitle, rows); err != nil {
			t.Fatal(err)
		}
		text := string(readme)
		if pictureLinesPattern.MatchString(text) {
			text = pictureLinesPattern.ReplaceAllLiteralString(text, want)
		} else {
			title, rest, _ := strings.Cut(text, "\n\n")
			text = title + "\n\n" + want + "\n" + rest
		}
		if err := os.WriteFile(readmePath, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and README.md:\n%s", picturePath, want)
		return
	}
	if got := pictureLinesPattern.FindString(string(readme)); got != want {
		t.Errorf("README.md's picture and caption:\n%s\nwant, from the run (scripts/pictures writes them):\n%s", got, want)
	}
	fresh := filepath.Join(t.TempDir(), "tail.png")
	if err := plotTailTo(fresh, subtitle, rows); err != nil {
		t.Fatal(err)
	}
	if differ, all := differentPixels(decodePNG(t, picturePath), decodePNG(t, fresh)); differ > all/100 {
		t.Errorf("%s differs from the run's picture in %d of %d pixels: run scripts/pictures", picturePath, differ, all)
	}
}

// differentPixels counts the pixels in which a and b, of the same size,
// differ, and the pixels of each.
func differentPixels(a, b image.Image) (differ, all int) {
	bounds := a.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			if a.At(x, y) != b.At(x, y) {
				differ++
			}
		}
	}
	return differ, bounds.Dx() * bounds.Dy()
}
