package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

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
