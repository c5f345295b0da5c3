package main

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

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
