package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestProgressInALog: where status is not a terminal, progress is whole
// lines, one every logEvery while the step runs and one at its end, and
// never a carriage return, which garbles a log.
func TestProgressInALog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bytes.Buffer
		onCall := newProgress(&b, "percentile warm-up", 30)
		for range 30 {
			time.Sleep(time.Second) // virtual: a call a second
			onCall()
		}
		want := "percentile warm-up: 5/30 calls\n" +
			"percentile warm-up: 10/30 calls\n" +
			"percentile warm-up: 15/30 calls\n" +
			"percentile warm-up: 20/30 calls\n" +
			"percentile warm-up: 25/30 calls\n" +
			"percentile warm-up: 30 calls in 30s\n"
		if diff := cmp.Diff(want, b.String()); diff != "" {
			t.Errorf("progress (-want +got):\n%s", diff)
		}
	})
}

// TestProgressOfAQuickStep: a step done within logEvery says so once.
func TestProgressOfAQuickStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bytes.Buffer
		onCall := newProgress(&b, "no hedging", 1000)
		for range 1000 {
			time.Sleep(time.Millisecond)
			onCall()
		}
		if got, want := b.String(), "no hedging: 1000 calls in 1s\n"; got != want {
			t.Errorf("progress: %q, want %q", got, want)
		}
	})
}

// TestBar: on a terminal, the bar redraws itself in place, and the line
// ends once the step is done, so that the next bar starts below it.
func TestBar(t *testing.T) {
	var b bytes.Buffer
	onCall := newBar(&b, "two hedges", 200)
	for range 200 {
		onCall()
	}
	out := b.String()
	if !strings.Contains(out, "\r") || !strings.Contains(out, "two hedges") || !strings.Contains(out, "200/200") {
		t.Errorf("no bar redrawn to 200/200 for %q: %q", "two hedges", out)
	}
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Errorf("the bar's line should end once, when the step is done: %q", out)
	}
}

func TestIsTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a bytes.Buffer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a file is a terminal")
	}
}
