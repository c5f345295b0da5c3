package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// The files under test, from this package's directory.
var (
	rulesFile     = filepath.Join("..", "..", "deploy", "prometheus", "hedge.rules.yml")
	dashboardFile = filepath.Join("..", "..", "deploy", "grafana", "hedge-dashboard.json")
)

// promtool returns the path of Prometheus's promtool, or skips the test
// when it is not installed. .ci/run installs it (Debian's prometheus
// package), so that these tests run in CI.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus): the rules and the dashboard are not checked")
	}
	return path
}

// TestRulesParse: Prometheus's own rule parser accepts the rules file.
func TestRulesParse(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
}

// timeline is what the demo's /metrics said at each of a run's scrapes,
// one series per sample as Prometheus would store it, under the job and
// instance labels that Prometheus adds.
type timeline struct {
	url string

	mu    sync.Mutex // orders the scrapes and guards what follows
	steps []map[string]float64
	err   error
}

// scrape reads the page once and appends it as the next step. It may be
// called from any goroutine; the first error is kept for the test.
func (tl *timeline) scrape() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	step, err := readPage(tl.url)
	if err != nil {
		tl.err = cmpErr(tl.err, err)
		return
	}
	tl.steps = append(tl.steps, step)
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// last is the index of the latest step.
func (tl *timeline) last() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.steps) - 1
}

// sum adds up, at step i, the series of the metric name under hedge_key
// key whose selectors hold every one of must.
func (tl *timeline) sum(i int, name, key string, must ...string) float64 {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var sum float64
	for s, v := range tl.steps[i] {
		if !strings.HasPrefix(s, name+"{") || !strings.Contains(s, "hedge_key="+strconv.Quote(key)) {
			continue
		}
		held := true
		for _, m := range must {
			held = held && strings.Contains(s, m)
		}
		if held {
			sum += v
		}
	}
	return sum
}

// readPage scrapes url in the text format and flattens it into series.
func readPage(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	step := map[string]float64{}
	for name, f := range families {
		if !strings.HasPrefix(name, "hedge_") {
			continue // target_info
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{"job": "hedgedemo", "instance": "demo"}
			for _, l := range m.GetLabel() {
				if l.GetValue() != "" { // an empty label is no label to Prometheus
					labels[l.GetName()] = l.GetValue()
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				step[series(name, labels)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				step[series(name, labels)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					step[series(name+"_bucket", labels, "le", le(b.GetUpperBound()))] = float64(b.GetCumulativeCount())
				}
				step[series(name+"_bucket", labels, "le", "+Inf")] = float64(h.GetSampleCount())
				step[series(name+"_sum", labels)] = h.GetSampleSum()
				step[series(name+"_count", labels)] = float64(h.GetSampleCount())
			}
		}
	}
	return step, nil
}

func le(bound float64) string { return strconv.FormatFloat(bound, 'g', -1, 64) }

// series is a PromQL selector of one series: name{label="value",...}, the
// labels in order, with extra pairs added.
func series(name string, labels map[string]string, extra ...string) string {
	all := map[string]string{}
	for k, v := range labels {
		all[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		all[extra[i]] = extra[i+1]
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(name + "{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%s", k, strconv.Quote(all[k]))
	}
	b.WriteString("}")
	return b.String()
}

// Shapes of a phase of TestRulesOverTheDemo.
const (
	scrapesPerPhase = 30 // one a virtual minute: longer than any rule's window and for together
	idleScrapes     = 10 // after each phase: more than a 5m window, so that its alerts clear
)

// phase is one stretch of the run: what runs, under which hedge_key, and
// what it shows.
type phase struct {
	key        string
	start, end int // the steps it ran over
}

// TestRulesOverTheDemo plays the alerting rules over what the demo's
// /metrics said during a run under -load, with Prometheus's own engine
// (promtool test rules), and sees each alert fire and clear:
//
//   - a learned delay on a lightly loaded server (ρ 0.3): nothing fires;
//   - two hedges every 4ms on a server whose every answer takes 8ms (ρ
//     0.2): a hedge cannot beat its primary, so the hedges stop winning
//     and the load they add passes the budget;
//   - a learned delay whose ceiling (50ms) is below the p99 it learns:
//     the delay sits at its ceiling;
//   - the demo's budgeted policy against an upstream whose every answer
//     is 503: the breaker opens. (The load sweep's server never fails a
//     primary, and a call cut off by its deadline tells a breaker
//     nothing, so this phase has an upstream of its own.)
//
// Each phase is scraped every 1/30 of its calls, and each scrape is one
// virtual minute of the test's series; ten idle scrapes follow each
// phase. Every query of the dashboard runs over the same series and must
// return data.
func TestRulesOverTheDemo(t *testing.T) {
	tool := promtool(t)
	m, err := serveMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	tl := &timeline{url: m.url}

	// The defaults of -load, scaled by its 0.2; and a server whose every
	// answer takes 8ms (-fast 40ms -slowfrac 0), where a hedge 4ms after
	// its primary can only come second.
	delay, timeout := 10*ms, 400*ms
	p := profile{fast: span{20 * ms, 40 * ms}, slow: span{400 * ms, 600 * ms}, slowFrac: 0.1}.scaled(0.2)
	constant := profile{fast: span{40 * ms, 40 * ms}}.scaled(0.2)
	policies := loadPolicies(delay)
	pinned := loadPolicy{"Percentile{0.99, Ceiling: 50ms}", func(func(string)) (*hedgehttp.Transport, error) {
		return &hedgehttp.Transport{Delay: &hedge.Percentile{Quantile: 0.99, Ceiling: 50 * ms}, MaxAttempts: 3}, nil
	}}
	const calls = 1200
	point := func(rho float64, p profile, pol loadPolicy) phase {
		ph := phase{key: pointName(rho, pol.name), start: tl.last() + 1}
		var done atomic.Int64
		_, err := loadPoint(t.Context(), pointConfig{
			profile: p, seed: 1, workers: 16, rho: rho, calls: calls, timeout: timeout, metrics: m,
		}, pol, func() {
			if done.Add(1)%(calls/scrapesPerPhase) == 0 {
				tl.scrape()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		ph.end = tl.last()
		for range idleScrapes {
			tl.scrape()
		}
		return ph
	}
	healthy := point(0.3, p, policies[2])
	losing := point(0.2, constant, loadPolicies(4 * ms)[1])
	pinnedAt := point(0.3, p, pinned)
	failing := failingPhase(t, tl, m, policies[3])
	if tl.err != nil {
		t.Fatal(tl.err)
	}

	// The phases show what they are meant to, in the run's own totals.
	totals := func(ph phase, name string, must ...string) float64 { return tl.sum(ph.end, name, ph.key, must...) }
	// Over the steps the alerts judge at a phase's end: the last 15.
	since := func(ph phase, name string, must ...string) float64 {
		return totals(ph, name, must...) - tl.sum(ph.end-15, name, ph.key, must...)
	}
	winRate := func(ph phase) float64 {
		return (since(ph, "hedge_call_wins_total") - since(ph, "hedge_call_wins_total", `hedge_winner="0"`)) /
			since(ph, "hedge_call_hedged_total")
	}
	amplification := func(ph phase) float64 {
		return since(ph, "hedge_call_attempts_total") / since(ph, "hedge_call_duration_seconds_count")
	}
	if w, a := winRate(healthy), amplification(healthy); !(w > 0.5 && a < 1.2) {
		t.Fatalf("%s: win rate %.2f and amplification %.2f, want hedges that win and cost little", healthy.key, w, a)
	}
	if w, a := winRate(losing), amplification(losing); !(w < 0.05 && a > 1.5) {
		t.Fatalf("%s: win rate %.2f and amplification %.2f, want hedges that lose and cost much", losing.key, w, a)
	}
	opened := -1 // the first step at which the failing phase's breaker had opened
	for i := failing.start; i <= failing.end; i++ {
		if tl.sum(i, "hedge_breaker_opens_total", failing.key) > 0 && opened < 0 {
			opened = i
		}
	}

	alerts := readAlerts(t)
	fire := func(at int, name string, ph *phase) alertTest {
		at1 := alertTest{EvalTime: minutes(at), Alertname: name, ExpAlerts: []expAlert{}}
		if ph != nil {
			at1.ExpAlerts = append(at1.ExpAlerts, alerts.expect(name, ph.key))
		}
		return at1
	}
	none := func(at int) []alertTest {
		var tests []alertTest
		for _, name := range alerts.names() {
			tests = append(tests, fire(at, name, nil))
		}
		return tests
	}
	var tests []alertTest
	tests = append(tests, none(healthy.end)...)
	tests = append(tests,
		fire(losing.end, "HedgesStoppedWinning", &losing),
		fire(losing.end, "HedgeAmplificationAboveBudget", &losing),
		fire(losing.end, "HedgeDelayAtCeiling", nil),
		fire(losing.end, "HedgeBreakerOpened", nil))
	tests = append(tests, none(losing.end+idleScrapes)...)
	tests = append(tests,
		fire(pinnedAt.end, "HedgeDelayAtCeiling", &pinnedAt),
		fire(pinnedAt.end, "HedgesStoppedWinning", nil),
		fire(pinnedAt.end, "HedgeAmplificationAboveBudget", nil),
		fire(pinnedAt.end, "HedgeBreakerOpened", nil))
	tests = append(tests, none(pinnedAt.end+idleScrapes)...)
	if opened < 0 {
		t.Fatalf("%s: the breaker never opened", failing.key)
	}
	if opened == failing.start {
		t.Fatalf("%s: the breaker had opened by the phase's first scrape", failing.key)
	}
	tests = append(tests, fire(opened, "HedgeBreakerOpened", &failing))
	tests = append(tests, none(failing.end+idleScrapes)...)

	file := unitTest{
		RuleFiles:          []string{abs(t, rulesFile)},
		EvaluationInterval: "1m",
		Tests: []testGroup{{
			Interval:    "1m",
			InputSeries: tl.input(),
			AlertTests:  tests,
			ExprTests:   dashboardTests(t, minutes(opened)),
		}},
	}
	path := filepath.Join(t.TempDir(), "hedge.rules.test.json")
	data, err := json.MarshalIndent(file, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "test", "rules", path).CombinedOutput(); err != nil {
		keep := filepath.Join(os.TempDir(), "hedge.rules.test.json")
		os.WriteFile(keep, data, 0o644)
		t.Fatalf("promtool test rules (the test file is kept at %s): %v\n%s", keep, err, out)
	}
}

// failingPhase sends calls through the demo's budgeted Transport, with its
// breaker's openings counted, to an upstream that answers every request
// with 503, scraping every tenth call.
func failingPhase(t *testing.T, tl *timeline, m *metrics, pol loadPolicy) phase {
	t.Helper()
	ph := phase{key: "failing upstream, " + pol.name, start: tl.last() + 1}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer upstream.Close()
	obs, err := m.observer(ph.key, nil)
	if err != nil {
		t.Fatal(err)
	}
	// As the demo does: the breaker has one key, the Observer's.
	tr, err := pol.newTransport(func(string) { obs.BreakerOpened(ph.key) })
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr.Base, tr.Observer = base, obs
	client := &http.Client{Transport: tr}
	const calls, every = 30 * 10, 10
	for i := 1; i <= calls; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 400*ms)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, upstream.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		cancel()
		if i%every == 0 {
			tl.scrape()
		}
	}
	ph.end = tl.last()
	for range idleScrapes {
		tl.scrape()
	}
	return ph
}

// The test file of promtool test rules, as JSON, which YAML reads.
type (
	unitTest struct {
		RuleFiles          []string    `json:"rule_files"`
		EvaluationInterval string      `json:"evaluation_interval"`
		Tests              []testGroup `json:"tests"`
	}
	testGroup struct {
		Interval    string        `json:"interval"`
		InputSeries []inputSeries `json:"input_series"`
		AlertTests  []alertTest   `json:"alert_rule_test"`
		ExprTests   []exprTest    `json:"promql_expr_test"`
	}
	inputSeries struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	alertTest struct {
		EvalTime  string     `json:"eval_time"`
		Alertname string     `json:"alertname"`
		ExpAlerts []expAlert `json:"exp_alerts"`
	}
	expAlert struct {
		ExpLabels      map[string]string `json:"exp_labels"`
		ExpAnnotations map[string]string `json:"exp_annotations"`
	}
	exprTest struct {
		Expr       string      `json:"expr"`
		EvalTime   string      `json:"eval_time"`
		ExpSamples []expSample `json:"exp_samples"`
	}
	expSample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
)

func minutes(step int) string { return fmt.Sprintf("%dm", step) }

func abs(t *testing.T, path string) string {
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// input is every series of the timeline as promtool's input: one value a
// step, "_" before the series first appeared.
func (tl *timeline) input() []inputSeries {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	seen := map[string]bool{}
	var names []string
	for _, step := range tl.steps {
		for s := range step {
			if !seen[s] {
				seen[s] = true
				names = append(names, s)
			}
		}
	}
	slices.Sort(names)
	in := make([]inputSeries, 0, len(names))
	for _, s := range names {
		values := make([]string, len(tl.steps))
		for i, step := range tl.steps {
			values[i] = "_"
			if v, ok := step[s]; ok {
				values[i] = strconv.FormatFloat(v, 'g', -1, 64)
			}
		}
		in = append(in, inputSeries{Series: s, Values: strings.Join(values, " ")})
	}
	return in
}

// alertRules are the alerting rules of the rules file, by name.
type alertRules map[string]struct {
	Labels      map[string]string
	Annotations map[string]string
	Expr        string
}

func readAlerts(t *testing.T) alertRules {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Expr        string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	alerts := alertRules{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = struct {
					Labels      map[string]string
					Annotations map[string]string
					Expr        string
				}{r.Labels, r.Annotations, r.Expr}
			}
		}
	}
	return alerts
}

func (a alertRules) names() []string {
	var names []string
	for n := range a {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// expect is the alert name fires for key: the rule's labels and the
// labels it keeps (job, hedge_key, and instance where it keeps that), and
// its annotations with those filled in.
func (a alertRules) expect(name, key string) expAlert {
	r := a[name]
	labels := map[string]string{"job": "hedgedemo", "hedge_key": key}
	if strings.Contains(r.Expr, "instance") {
		labels["instance"] = "demo"
	}
	for k, v := range r.Labels {
		labels[k] = v
	}
	annotations := map[string]string{}
	for k, v := range r.Annotations {
		v = strings.ReplaceAll(v, "{{ $labels.hedge_key }}", key)
		annotations[k] = strings.ReplaceAll(v, "{{ $labels.job }}", "hedgedemo")
	}
	return expAlert{ExpLabels: labels, ExpAnnotations: annotations}
}

// dashboardTests asks, at evalTime, that every query of the dashboard
// (its panels' and the metrics its variables list values of) return at
// least one series, with Grafana's variables set as "All" sets them.
func dashboardTests(t *testing.T, evalTime string) []exprTest {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Definition string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var queries []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			queries = append(queries, target.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		// label_values(selector, label): the selector must find series.
		if sel, ok := strings.CutPrefix(v.Definition, "label_values("); ok {
			queries = append(queries, sel[:strings.LastIndex(sel, ",")])
		}
	}
	vars := strings.NewReplacer(`"$job"`, `".+"`, `"$hedge_key"`, `".*"`, "$__rate_interval", "5m")
	var tests []exprTest
	for _, q := range queries {
		tests = append(tests, exprTest{
			Expr:       "count(" + vars.Replace(q) + ") > bool 0",
			EvalTime:   evalTime,
			ExpSamples: []expSample{{Labels: "{}", Value: 1}},
		})
	}
	return tests
}
