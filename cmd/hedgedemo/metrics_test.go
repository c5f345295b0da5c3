package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/trace"

	"github.com/tailcut/hedge"
)

// TestMetricsServed runs a short default demo and a short load sweep
// with their metrics served on a loopback port, scrapes /metrics once,
// and parses the page as a Prometheus server would: every metric under
// its Prometheus name, type and unit, one series per row, keyed by the
// row's name, and every call of every row counted.
func TestMetricsServed(t *testing.T) {
	checkNoLeaks(t)
	m, err := serveMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.close(); err != nil {
			t.Error(err)
		}
	}()

	var out, status bytes.Buffer
	demo := config{calls: 50, concurrency: 5, delay: 20 * ms, timeout: 2 * time.Second, profile: testProfile, seed: 1, metrics: m}
	if err := run(t.Context(), demo, &out, &status); err != nil {
		t.Fatal(err)
	}
	sweep := config{calls: 20, delay: 20 * ms, timeout: 10 * time.Second, profile: testProfile, seed: 1, sweep: true, metrics: m,
		load: loadConfig{warmup: 5, workers: 4, scale: 0.25, stopWork: true, rhos: []float64{0.5}}}
	if err := runLoad(t.Context(), sweep, &out, &status); err != nil {
		t.Fatal(err)
	}

	families := scrape(t, m.url)
	for name, typ := range map[string]dto.MetricType{
		"hedge_call_duration_seconds":      dto.MetricType_HISTOGRAM,
		"hedge_call_hedges":                dto.MetricType_HISTOGRAM,
		"hedge_attempt_delay_seconds":      dto.MetricType_HISTOGRAM,
		"hedge_attempt_duration_seconds":   dto.MetricType_HISTOGRAM,
		"hedge_call_attempts_total":        dto.MetricType_COUNTER,
		"hedge_call_hedged_total":          dto.MetricType_COUNTER,
		"hedge_call_retries_total":         dto.MetricType_COUNTER,
		"hedge_call_wins_total":            dto.MetricType_COUNTER,
		"hedge_call_budget_refusals_total": dto.MetricType_COUNTER,
		"hedge_call_deadline_skips_total":  dto.MetricType_COUNTER,
		"hedge_call_panics_total":          dto.MetricType_COUNTER,
		"hedge_breaker_opens_total":        dto.MetricType_COUNTER,
		"hedge_delay_seconds":              dto.MetricType_GAUGE,
		"hedge_delay_ceiling_seconds":      dto.MetricType_GAUGE,
	} {
		f := families[name]
		switch {
		case f == nil:
			t.Errorf("no %s among %v", name, slices.Sorted(maps.Keys(families)))
		case f.GetType() != typ:
			t.Errorf("%s is a %v, want a %v", name, f.GetType(), typ)
		case f.GetHelp() == "":
			t.Errorf("%s has no HELP", name)
		}
	}
	if t.Failed() {
		return
	}

	// Every call of a row is in its histogram, and those it returned an
	// accepted answer for are its wins, whoever won.
	type key struct{ name, outcome string }
	calls := map[key]uint64{}
	for _, s := range families["hedge_call_duration_seconds"].GetMetric() {
		h := s.GetHistogram()
		calls[key{label(s, "hedge_key"), label(s, "hedge_outcome")}] += h.GetSampleCount()
		bounds := []float64{}
		for _, b := range h.GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		// gRFC A66's buckets, in seconds: 10µs up to 100s, then +Inf.
		if len(bounds) < 3 || bounds[1] != 0.00001 || !slices.Contains(bounds, 0.05) || bounds[len(bounds)-2] != 100 {
			t.Errorf("%v: bucket bounds %v, want A66's in seconds", s.GetLabel(), bounds)
		}
		if mean := h.GetSampleSum() / float64(h.GetSampleCount()); !(mean > 0 && mean < demo.timeout.Seconds()) {
			t.Errorf("%v: mean duration %v, want seconds", s.GetLabel(), mean)
		}
	}
	wantCalls := map[string]int{}
	for _, name := range []string{"no hedging", "1 hedge after 20ms", "2 hedges, every 20ms"} {
		wantCalls[name] = demo.calls
	}
	for _, name := range []string{"Percentile{Quantile: 0.9}", "Planner{Load: 0.15}", "Planner{0.15}, budgeted", "hedge.Auto()"} {
		wantCalls[name] = 2 * demo.calls // the warm-up's calls and the measured ones
	}
	// The sweep's row without hedging has MaxAttempts 1: its requests
	// pass through the hedgehttp.Transport, which reports only the
	// requests it hedges.
	for _, p := range loadPolicies(5 * ms)[1:] {
		wantCalls[pointName(0.5, p.name)] = sweep.load.warmup + sweep.calls
	}
	gotCalls := map[string]int{}
	for k, n := range calls {
		gotCalls[k.name] += int(n)
	}
	if !maps.Equal(gotCalls, wantCalls) {
		t.Errorf("calls by hedge_key: %v, want %v", gotCalls, wantCalls)
	}
	wins := sums(families["hedge_call_wins_total"])
	attempts := sums(families["hedge_call_attempts_total"])
	hedged := sums(families["hedge_call_hedged_total"])
	for name, n := range wantCalls {
		if accepted := float64(calls[key{name, "accept"}]); wins[name] != accepted {
			t.Errorf("%s: %v wins, want one per accepted call: %v", name, wins[name], accepted)
		}
		if attempts[name] < float64(n) {
			t.Errorf("%s: %v attempts for %d calls", name, attempts[name], n)
		}
		if strings.HasSuffix(name, "no hedging") && (attempts[name] != float64(n) || hedged[name] != 0) {
			t.Errorf("%s: %v attempts and %v calls hedged for %d calls, want one attempt each", name, attempts[name], hedged[name], n)
		}
	}
	// Every counter of every row is there, at 0 where it counted
	// nothing: a row without a breaker has hedge_breaker_opens_total 0.
	for _, counter := range []string{"hedge_call_hedged_total", "hedge_call_retries_total", "hedge_call_budget_refusals_total",
		"hedge_call_deadline_skips_total", "hedge_call_panics_total", "hedge_breaker_opens_total"} {
		got := sums(families[counter])
		for name := range wantCalls {
			if _, ok := got[name]; !ok {
				t.Errorf("%s has no series for %q", counter, name)
			}
		}
	}

	// The learned delays, and only those, are on the gauge, in seconds:
	// at most a Percentile's Ceiling, 10s, which it hedges at until it
	// has seen enough calls; a Planner that plans no hedge has no point.
	delays := sums(families["hedge_delay_seconds"])
	wantDelays := []string{"Percentile{Quantile: 0.9}", "Planner{Load: 0.15}", "Planner{0.15}, budgeted",
		pointName(0.5, "Percentile{Quantile: 0.9}"), pointName(0.5, "Percentile{0.9}, budgeted")}
	for name := range delays {
		if !slices.Contains(wantDelays, name) {
			t.Errorf("hedge_delay_seconds for %q, want only %q", name, wantDelays)
		}
	}
	for name, d := range delays {
		if !(d > 0 && d <= 10) {
			t.Errorf("hedge_delay_seconds{hedge_key=%q} is %v, want seconds", name, d)
		}
	}
	ceilings := sums(families["hedge_delay_ceiling_seconds"])
	if got := slices.Sorted(maps.Keys(ceilings)); !slices.Equal(got, slices.Sorted(slices.Values(wantDelays))) {
		t.Errorf("hedge_delay_ceiling_seconds for %q, want %q", got, wantDelays)
	}
	for name, c := range ceilings {
		if c != 10 {
			t.Errorf("hedge_delay_ceiling_seconds{hedge_key=%q} is %v, want the default 10", name, c)
		}
	}
}

// TestMetricsAddressInUse: a -metrics address that cannot be listened on
// is an error, before the demo starts.
func TestMetricsAddressInUse(t *testing.T) {
	checkNoLeaks(t)
	m, err := serveMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	addr := strings.TrimSuffix(strings.TrimPrefix(m.url, "http://"), "/metrics")
	for _, bad := range []string{addr, "127.0.0.1:-1", "nowhere"} {
		if again, err := serveMetrics(bad); err == nil {
			again.close()
			t.Errorf("serveMetrics(%q): no error", bad)
		}
	}
	var none *metrics
	if obs, err := none.observer("row", nil); obs != nil || err != nil {
		t.Errorf("nil metrics made an Observer: %v, %v", obs, err)
	}
	if err := none.close(); err != nil {
		t.Errorf("closing nil metrics: %v", err)
	}
}

// scrape GETs url once and parses the page in the Prometheus text format,
// with the classic names that a server's legacy validation accepts.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return families
}

// sums adds up a counter's or a gauge's samples by hedge_key.
func sums(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, s := range f.GetMetric() {
		out[label(s, "hedge_key")] += s.GetCounter().GetValue() + s.GetGauge().GetValue()
	}
	return out
}

// label is the value of a sample's label name, or "".
func label(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestMetricsOpenMetrics: a scraper that asks for OpenMetrics, as
// Prometheus does, gets it, with the exemplar that links a call's
// duration to the trace it ran in; one that does not gets the text format.
func TestMetricsOpenMetrics(t *testing.T) {
	checkNoLeaks(t)
	m, err := serveMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	obs, err := m.observer("row", nil)
	if err != nil {
		t.Fatal(err)
	}
	traceID := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	span := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID,
		SpanID: trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled})
	obs.Observe(trace.ContextWithSpanContext(t.Context(), span), hedge.Report{Attempts: 1, Elapsed: 3 * ms})

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, m.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("Content-Type %q, want OpenMetrics", ct)
	}
	if !bytes.HasSuffix(page, []byte("# EOF\n")) {
		t.Error("the page does not end with # EOF")
	}
	exemplar := fmt.Sprintf(`trace_id="%s"`, traceID)
	if !bytes.Contains(page, []byte(exemplar)) {
		t.Errorf("no exemplar with %s in\n%s", exemplar, page)
	}
	scrape(t, m.url) // the text format, to a scraper that asks for nothing
}
