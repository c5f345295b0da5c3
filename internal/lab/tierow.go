package lab

import (
	"fmt"
	"strings"
)

// TieString formats the row under TieHeader: what a tie changes, the
// wasted work, the calls whose attempts both started and the queue,
// beside the latencies and the attempts per call.
func (r LoadRow) TieString() string {
	return fmt.Sprintf("%-40s %4.2f %8v %8v %8v %6.3fx %5.2f %6.2f%% %6.2f%% %6.2f%% %6.2f%% %6.2f",
		r.Name, r.Rho, roundLatency(r.P50), roundLatency(r.P95), roundLatency(r.P99),
		r.Amp, r.Work, 100*r.Wasted, 100*r.Both, 100*r.Crossed, 100*r.Shed, r.Queue)
}

// TieHeader is the line above rows formatted by TieString.
func TieHeader() string {
	return fmt.Sprintf("%-40s %4s %8s %8s %8s %7s %5s %7s %7s %7s %7s %6s",
		"", "ρ", "p50", "p95", "p99", "amp", "work", "wasted", "both", "crossed", "shed", "queue")
}

// TieTable formats rows under title and TieHeader.
func TieTable(title string, rows []LoadRow) string {
	var b strings.Builder
	b.WriteString(title + "\n" + TieHeader() + "\n")
	for _, r := range rows {
		b.WriteString(r.TieString() + "\n")
	}
	return b.String()
}

// TieVerdictTable formats the tie lab's verdicts under title, as
// VerdictTable does, with room for the scenarios and plans they name.
func TieVerdictTable(title string, vs []Verdict) string {
	var b strings.Builder
	b.WriteString(title + "\n")
	line := "%-14s %-110s %-40s %-22s %7s %6s %8s  %s\n"
	fmt.Fprintf(&b, line, "criterion", "scenario", "contender", "reference", "figure", "limit", "feasible", "")
	for _, v := range vs {
		verdict := "ok"
		if !v.Pass {
			verdict = "MISSED"
		}
		fmt.Fprintf(&b, line, v.Criterion, v.Scenario, v.Contender, v.Reference,
			fmt.Sprintf("%.4f", v.Figure), fmt.Sprintf("%.3f", v.Limit), fmt.Sprintf("%.4f", v.Feasible), verdict)
	}
	return b.String()
}
