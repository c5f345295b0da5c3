package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/tailcut/hedge"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestPercentiles(t *testing.T) {
	oneToThousand := make([]time.Duration, 1000)
	for i := range oneToThousand {
		oneToThousand[len(oneToThousand)-1-i] = time.Duration(i+1) * ms // reversed: percentiles must sort
	}
	tests := []struct {
		name    string
		samples []time.Duration
		qs      []float64
		want    []time.Duration
	}{
		{"no samples", nil, []float64{0.5, 1}, []time.Duration{0, 0}},
		{"one sample", []time.Duration{7 * ms}, []float64{0.001, 0.5, 1}, []time.Duration{7 * ms, 7 * ms, 7 * ms}},
		{"rank rounds up", []time.Duration{4 * ms, 1 * ms, 3 * ms, 2 * ms}, []float64{0.25, 0.26, 0.5, 0.75, 1},
			[]time.Duration{1 * ms, 2 * ms, 2 * ms, 3 * ms, 4 * ms}},
		{"ties", []time.Duration{5 * ms, 5 * ms, 1 * ms}, []float64{0.34, 0.99}, []time.Duration{5 * ms, 5 * ms}},
		{"table columns of 1000", oneToThousand, columns,
			[]time.Duration{500 * ms, 950 * ms, 990 * ms, 999 * ms, 1000 * ms}},
		{"float rounding", oneToThousand[900:], []float64{0.07, 0.29}, []time.Duration{7 * ms, 29 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.samples)
			got := percentiles(tt.samples, tt.qs...)
			if !slices.Equal(got, tt.want) {
				t.Errorf("percentiles(%v) = %v, want %v", tt.qs, got, tt.want)
			}
			if !slices.Equal(tt.samples, before) {
				t.Errorf("percentiles reordered its input")
			}
		})
	}
}

func TestSpanSet(t *testing.T) {
	tests := []struct {
		text    string
		want    span
		wantErr bool
	}{
		{"20ms-40ms", span{20 * ms, 40 * ms}, false},
		{"30ms", span{30 * ms, 30 * ms}, false},
		{"40ms-20ms", span{}, true},
		{"fast", span{}, true},
		{"20ms-", span{}, true},
	}
	for _, tt := range tests {
		var got span
		err := got.Set(tt.text)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Set(%q) = %v, %v; want %v, error %v", tt.text, got, err, tt.want, tt.wantErr)
		}
	}
}

// testProfile is the default profile scaled down, so that the tests
// exercise hedging without taking seconds.
var testProfile = profile{fast: span{1 * ms, 3 * ms}, slow: span{80 * ms, 120 * ms}, slowFrac: 0.2}

// TestDriveClosesEveryBody makes real calls over loopback and checks
// that every response body the client opened, the winners' and the
// losers' alike, was closed.
func TestDriveClosesEveryBody(t *testing.T) {
	tests := []struct {
		name     string
		profile  profile
		attempts int
		delay    time.Duration
	}{
		{"no hedging", testProfile, 1, 20 * ms},
		{"hedging", testProfile, 2, 20 * ms},
		// Twin attempts that answer together: often both get a response
		// before Do cancels the loser, whose body then goes to Discard.
		{"racing twins", profile{fast: span{2 * ms, 2 * ms}}, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkNoLeaks(t)
			srv, err := startServer(tt.profile, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := srv.close(); err != nil {
					t.Error(err)
				}
			}()
			transport := newTransport(4)
			defer transport.CloseIdleConnections()
			bodies := &countingTransport{next: transport}
			client := &http.Client{Transport: bodies}

			const calls = 100
			var ticks atomic.Int64
			r := drive(t.Context(), client, srv.url, newPolicy(tt.attempts, hedge.Fixed(tt.delay), 2*time.Second), calls, 4,
				func() { ticks.Add(1) })
			if r.failures != 0 {
				t.Errorf("%d calls failed, first: %v", r.failures, r.firstErr)
			}
			if len(r.latencies) != calls || ticks.Load() != calls || r.stats.Calls != calls {
				t.Errorf("%d latencies, %d progress ticks, %d calls observed; want %d each",
					len(r.latencies), ticks.Load(), r.stats.Calls, calls)
			}
			if wins := r.stats.Wins[0] + r.stats.Wins[1]; wins != calls {
				t.Errorf("%d calls won, want %d", wins, calls)
			}
			if tt.attempts == 1 && r.stats.Attempts != calls {
				t.Errorf("%d attempts for %d calls, want one each", r.stats.Attempts, calls)
			}

			// Losers may still be returning, and handing their bodies to
			// Discard, after Do has returned: wait for them before counting.
			// Equal counts of bodies alone may hold while a loser's response
			// is still on its way; no RoundTrip in flight says it is not.
			waitUntil(func() bool {
				return bodies.returned.Load() == bodies.sent.Load() && bodies.opened.Load() == bodies.closed.Load()
			})
			opened, closed := bodies.opened.Load(), bodies.closed.Load()
			if opened != closed {
				t.Errorf("%d response bodies opened, %d closed", opened, closed)
			}
			if opened < calls {
				t.Errorf("%d response bodies opened for %d calls", opened, calls)
			}
			t.Logf("%d attempts, %d bodies, %d of them losers'", r.stats.Attempts, opened, opened-calls)
		})
	}
}

// TestRun checks the whole command end to end, output included.
func TestRun(t *testing.T) {
	checkNoLeaks(t)
	cfg := config{calls: 50, concurrency: 5, delay: 20 * ms, timeout: 2 * time.Second, profile: testProfile, seed: 1}
	var out, status bytes.Buffer
	if err := run(t.Context(), cfg, &out, &status); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"p99.9", "amplification", "no hedging", "hedge after 20ms", "extra calls", "One run of 50 calls a row"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "calls failed") {
		t.Errorf("calls failed:\n%s", out.String())
	}
	if !strings.Contains(status.String(), "planner, budgeted: 50 calls in ") {
		t.Errorf("progress never said the last run was done: %q", status.String())
	}
}

// TestPrintTableCountsFailures: a run's failed calls are a column of
// the table, whose first error follows it.
func TestPrintTableCountsFailures(t *testing.T) {
	lat := func(ds ...time.Duration) []time.Duration { return ds }
	rows := []row{
		{name: "no hedging", latencies: lat(30*ms, 40*ms, 500*ms, 2*time.Second), failures: 1,
			firstErr: errors.New("context deadline exceeded"), stats: hedge.Snapshot{Calls: 4, Attempts: 4}},
		{name: "1 hedge", latencies: lat(30*ms, 40*ms, 90*ms, 95*ms), stats: hedge.Snapshot{Calls: 4, Attempts: 5, Hedged: 1}},
	}
	var b bytes.Buffer
	if err := printTable(&b, rows...); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if header := strings.Fields(lines[0]); header[len(header)-1] != "failed" {
		t.Errorf("the header's last column is %q, want failed:\n%s", header[len(header)-1], b.String())
	}
	for i, want := range []string{"1", "0"} {
		if fields := strings.Fields(lines[i+1]); fields[len(fields)-1] != want {
			t.Errorf("%s: %s failed, want %s:\n%s", rows[i].name, fields[len(fields)-1], want, b.String())
		}
	}
	if want := "no hedging: 1 of 4 calls failed, first: context deadline exceeded\n"; lines[3]+"\n" != want {
		t.Errorf("under the table: %q, want %q", lines[3], want)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 50: "50", 300: "300", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567", -1000: "-1,000", -100: "-100"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// countingTransport counts the response bodies it hands out and how many
// of them were closed.
type countingTransport struct {
	next           http.RoundTripper
	sent, returned atomic.Int64 // RoundTrips begun and returned
	opened, closed atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.sent.Add(1)
	defer c.returned.Add(1) // after opened, so that a body is counted before its return
	resp, err := c.next.RoundTrip(req)
	if err == nil {
		c.opened.Add(1)
		resp.Body = &countedBody{ReadCloser: resp.Body, closed: &c.closed}
	}
	return resp, err
}

// countedBody counts its first Close only: closing twice is allowed, and
// must not hide a body never closed.
type countedBody struct {
	io.ReadCloser
	once   sync.Once
	closed *atomic.Int64
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.closed.Add(1) })
	return b.ReadCloser.Close()
}

// checkNoLeaks fails t if, once t's deferred cleanup has run, more
// goroutines are left than when it started.
func checkNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		// Closed connections wind down their goroutines asynchronously.
		if !waitUntil(func() bool { return runtime.NumGoroutine() <= before }) {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	})
}

// waitUntil polls cond for up to five seconds.
func waitUntil(cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * ms):
		}
	}
	return true
}
