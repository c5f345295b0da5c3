package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// logEvery is how often a step that is still running says so in a log.
const logEvery = 5 * time.Second

// newProgress returns a func to call after each of a step's total calls.
// On a terminal it draws a bar that redraws itself in place; anywhere
// else (a file, a pipe, a CI log) a carriage return would garble the
// text, so it writes a plain line every logEvery while the step runs and
// one when it is done.
func newProgress(w io.Writer, label string, total int) func() {
	if isTerminal(w) {
		return newBar(w, label, total)
	}
	return newLogProgress(w, label, total)
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newBar draws the step as a bar on w, a terminal, and ends its line once
// the step is done, so that the next step's bar starts below it.
func newBar(w io.Writer, label string, total int) func() {
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(fmt.Sprintf("%-28s", label)),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	return func() { bar.Add(1) } // the bar's errors are about misuse: a total it was not given
}

// newLogProgress writes the step's progress to w as whole lines: "label:
// 400/1000 calls" every logEvery, and "label: 1000 calls in 3.2s" at the
// end.
func newLogProgress(w io.Writer, label string, total int) func() {
	var (
		mu    sync.Mutex
		done  int
		start = time.Now()
		next  = start.Add(logEvery) // when to say how far it has got
	)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		done++
		now := time.Now()
		switch {
		case done == total:
			fmt.Fprintf(w, "%s: %d calls in %v\n", label, total, now.Sub(start).Round(100*time.Millisecond))
		case done < total && !now.Before(next):
			fmt.Fprintf(w, "%s: %d/%d calls\n", label, done, total)
			next = now.Add(logEvery)
		}
	}
}
