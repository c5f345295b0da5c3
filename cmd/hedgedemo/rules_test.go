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
// key whose selectors hold every one of must: 0 before the first step.
func (tl *timeline) sum(i int, name, key string, must ...string) float64 {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var sum float64
	if i < 0 {
		return 0
	}
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
	stepsPerPhase = 30 // one a virtual minute: longer than any rule's window and for together
	idleScrapes   = 10 // after each phase: more than a 5m window, so that its alerts clear
)

// phase is one stretch of the run: under which hedge_key it ran, and the
// steps it ran over.
type phase struct {
	key        string
	start, end int
}

// ramp appends the steps of a phase that ran between the scrapes before
// and after: stepsPerPhase steps over which every series that changed
// moves from its value before (0 for a series that appeared) to its value
// after in equal parts, and every gauge holds its value after. A series
// then changes at the phase's average rate throughout, as a steady load
// would, however fast this machine scraped during the run.
func (tl *timeline) ramp(before, after map[string]float64, gauges func(string) bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for j := 1; j <= stepsPerPhase; j++ {
		step := make(map[string]float64, len(after))
		for s, v := range after {
			if gauges(s) {
				step[s] = v
				continue
			}
			from := before[s]
			step[s] = from + (v-from)*float64(j)/stepsPerPhase
		}
		tl.steps = append(tl.steps, step)
	}
}

// TestRulesOverTheDemo plays the alerting rules over what the demo's
// /metrics said during a run under -load, with Prometheus's own engine
// (promtool test rules), and sees each alert fire and clear:
//
//   - a learned delay on a lightly loaded server (ρ 0.3);
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
// The first three are points of the demo's load sweep (loadPoint), each
// on a server of its own. /metrics is scraped before and after each, and
// the phase becomes 30 steps of the test's series, one a virtual minute,
// over which its series move from the first scrape to the second (see
// ramp). The calls of the fourth are made one after another, and a
// scrape after every tenth is a step. Ten idle scrapes follow each phase.
// What each alert should do at the end of each phase follows from the
// scraped totals and the thresholds; the phases are built so that each
// alert fires in one of them, which the test checks first. Every query of
// the dashboard runs over the same series and must return data.
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
	gauges := func(s string) bool { return strings.HasPrefix(s, "hedge_delay_") }
	point := func(rho float64, p profile, pol loadPolicy) phase {
		before, err := readPage(m.url)
		if err != nil {
			t.Fatal(err)
		}
		ph := phase{key: pointName(rho, pol.name), start: tl.last() + 1}
		if _, err := loadPoint(t.Context(), pointConfig{
			profile: p, seed: 1, workers: 16, rho: rho, calls: 900, timeout: timeout, metrics: m,
		}, pol, func() {}); err != nil {
			t.Fatal(err)
		}
		after, err := readPage(m.url)
		if err != nil {
			t.Fatal(err)
		}
		tl.ramp(before, after, gauges)
		ph.end = tl.last()
		for range idleScrapes {
			tl.scrape()
		}
		return ph
	}
	phases := []phase{
		point(0.3, p, policies[2]),
		point(0.2, constant, loadPolicies(4 * ms)[1]),
		point(0.3, p, pinned),
	}
	failing := failingPhase(t, tl, m, policies[3])
	if tl.err != nil {
		t.Fatal(tl.err)
	}

	// What the alerts should say at the end of a ramped phase: in every
	// 5-minute window inside it, each series moved by 5/30 of its total,
	// so the ratios are the phase's own.
	total := func(ph phase, name string, must ...string) float64 {
		return tl.sum(ph.end, name, ph.key, must...) - tl.sum(ph.start-1, name, ph.key, must...)
	}
	window := func(ph phase, name string, must ...string) float64 {
		return total(ph, name, must...) * 5 / stepsPerPhase
	}
	expected := map[string]func(phase) bool{
		"HedgesStoppedWinning": func(ph phase) bool {
			hedged := total(ph, "hedge_call_hedged_total")
			won := total(ph, "hedge_call_wins_total") - total(ph, "hedge_call_wins_total", `hedge_winner="0"`)
			return won/hedged < 0.1 && window(ph, "hedge_call_hedged_total") >= 10
		},
		"HedgeAmplificationAboveBudget": func(ph phase) bool {
			calls := total(ph, "hedge_call_duration_seconds_count")
			return total(ph, "hedge_call_attempts_total")/calls > 1.25 && window(ph, "hedge_call_duration_seconds_count") >= 100
		},
		"HedgeDelayAtCeiling": func(ph phase) bool {
			d, c := tl.sum(ph.end, "hedge_delay_seconds", ph.key), tl.sum(ph.end, "hedge_delay_ceiling_seconds", ph.key)
			return c > 0 && d >= c && total(ph, "hedge_call_duration_seconds_count") > 0
		},
		"HedgeBreakerOpened": func(ph phase) bool { return total(ph, "hedge_breaker_opens_total") > 0 },
	}
	// Each alert of the load phases fires in the phase built for it.
	for name, ph := range map[string]phase{
		"HedgesStoppedWinning":          phases[1],
		"HedgeAmplificationAboveBudget": phases[1],
		"HedgeDelayAtCeiling":           phases[2],
	} {
		if !expected[name](ph) {
			t.Fatalf("%s: the run does not show what %s is about (%v hedged calls, %v won by a hedge; %v attempts for %v calls; delay %vs, ceiling %vs)",
				ph.key, name, total(ph, "hedge_call_hedged_total"),
				total(ph, "hedge_call_wins_total")-total(ph, "hedge_call_wins_total", `hedge_winner="0"`),
				total(ph, "hedge_call_attempts_total"), total(ph, "hedge_call_duration_seconds_count"),
				tl.sum(ph.end, "hedge_delay_seconds", ph.key), tl.sum(ph.end, "hedge_delay_ceiling_seconds", ph.key))
		}
	}
	if len(expected) != len(readAlerts(t)) {
		t.Fatalf("the test knows %d alerts, the rules file has %v", len(expected), readAlerts(t).names())
	}

	alerts := readAlerts(t)
	firing := func(at int, name string, keys ...string) alertTest {
		test := alertTest{EvalTime: minutes(at), Alertname: name, ExpAlerts: []expAlert{}}
		for _, key := range keys {
			test.ExpAlerts = append(test.ExpAlerts, alerts.expect(name, key))
		}
		return test
	}
	var tests []alertTest
	for _, ph := range phases {
		for _, name := range alerts.names() {
			if expected[name](ph) {
				tests = append(tests, firing(ph.end, name, ph.key))
			} else {
				tests = append(tests, firing(ph.end, name))
			}
			tests = append(tests, firing(ph.end+idleScrapes, name))
		}
	}
	opened := -1 // the first step at which the failing phase's breaker had opened
	for i := failing.start; i <= failing.end && opened < 0; i++ {
		if tl.sum(i, "hedge_breaker_opens_total", failing.key) > 0 {
			opened = i
		}
	}
	switch opened {
	case -1:
		t.Fatalf("%s: the breaker never opened", failing.key)
	case failing.start:
		t.Fatalf("%s: the breaker had opened by the phase's first scrape", failing.key)
	}
	tests = append(tests, firing(opened, "HedgeBreakerOpened", failing.key))
	for _, name := range alerts.names() {
		tests = append(tests, firing(failing.end+idleScrapes, name))
	}

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

// failingPhase sends calls one after another through the demo's budgeted
// Transport, with its breaker's openings counted, to an upstream that
// answers every request with 503, and scrapes after every tenth.
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
	const every = 10
	const calls = stepsPerPhase * every
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
