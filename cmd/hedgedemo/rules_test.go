package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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

// TestRulesOverTheDemo plays the alerting rules over what the demo's
// /metrics said during a run under -load, with Prometheus's own engine
// (promtool test rules), and sees each alert fire and clear:
//
//   - a learned delay on a lightly loaded server (ρ 0.3);
//   - two hedges every 30ms on a server whose every answer takes 50ms (ρ
//     0.3): a hedge cannot beat its primary, so the hedges stop winning
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
	// answer takes 50ms (-fast 250ms -slowfrac 0), where a hedge 30ms
	// after its primary, behind it in the queue, can only come second
	// (unless the primary is held up for 30ms on its way).
	delay, timeout := 10*ms, 400*ms
	p := profile{fast: span{20 * ms, 40 * ms}, slow: span{400 * ms, 600 * ms}, slowFrac: 0.1}.scaled(0.2)
	constant := profile{fast: span{250 * ms, 250 * ms}}.scaled(0.2)
	policies := loadPolicies(delay)
	pinned := loadPolicy{"Percentile{0.99, Ceiling: 50ms}", func(func(string)) (*hedgehttp.Transport, error) {
		return &hedgehttp.Transport{Delay: &hedge.Percentile{Quantile: 0.99, Ceiling: 50 * ms}, MaxAttempts: 3}, nil
	}}
	gauges := func(s string) bool { return strings.HasPrefix(s, "hedge_delay_") }
	point := func(rho float64, workers int, p profile, pol loadPolicy) phase {
		before, err := readPage(m.url)
		if err != nil {
			t.Fatal(err)
		}
		ph := phase{key: pointName(rho, pol.name), start: tl.last() + 1}
		if _, err := loadPoint(t.Context(), pointConfig{
			profile: p, seed: 1, workers: workers, rho: rho, calls: 900, timeout: timeout, metrics: m,
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
		point(0.3, 16, p, policies[2]),
		point(0.3, 32, constant, loadPolicies(30 * ms)[1]),
		point(0.3, 16, p, pinned),
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
	for _, ph := range phases {
		t.Logf("%s: %v calls, %v attempts, %v hedged, %v won by a hedge; delay %vs, ceiling %vs", ph.key,
			total(ph, "hedge_call_duration_seconds_count"), total(ph, "hedge_call_attempts_total"),
			total(ph, "hedge_call_hedged_total"),
			total(ph, "hedge_call_wins_total")-total(ph, "hedge_call_wins_total", `hedge_winner="0"`),
			tl.sum(ph.end, "hedge_delay_seconds", ph.key), tl.sum(ph.end, "hedge_delay_ceiling_seconds", ph.key))
	}
	// Each alert of the load phases fires in the phase built for it.
	for name, ph := range map[string]phase{
		"HedgesStoppedWinning":          phases[1],
		"HedgeAmplificationAboveBudget": phases[1],
		"HedgeDelayAtCeiling":           phases[2],
	} {
		if !expected[name](ph) {
			t.Fatalf("%s: the run does not show what %s is about (its figures are logged above)", ph.key, name)
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
