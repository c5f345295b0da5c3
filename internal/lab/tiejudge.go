package lab

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// RoundTrip is the tie lab's round trip between a client and a replica:
// how long a start signal takes to cancel a call's other attempts, and
// the delay of a second copy sent one round trip after the first.
const RoundTrip = time.Millisecond

// TiedServers returns l served as the tie lab's servers do: each sends a
// start signal that cancels a call's queued attempts a RoundTrip later,
// and admits primaries first, turning a hedge away when 4 requests per
// worker already wait, or when it has waited 200 ms, about two and a half
// mean service times of the 90/10 upstream. Tighter bounds turn away
// hedges that would have won: with 4 waiting in all and 50 ms, Auto's p99
// at ρ 0.7 is 831 ms, against 684 ms.
func TiedServers(l Load) Load {
	w := l.Workers
	if w == 0 {
		w = 4
	}
	l.Tie = Tie{On: true, Signal: RoundTrip}
	l.Admit = Admit{On: true, Queue: 4 * w, HedgeWait: 200 * time.Millisecond}
	return l
}

// TieScenario is one Load of the tie lab and the rows its contenders
// made, in the order its table prints them: no hedging, the best fixed
// plan untied and tied, the two tied oracles, a second copy a round trip
// later, and the contender untied and tied. It is a plain value.
type TieScenario struct {
	Title string
	key   string // Title without the seed
	Load  Load   // without ties; the tied rows ran on TiedServers(Load)
	Rows  []LoadRow
}

// The rows of a TieScenario, in order.
const (
	rowNone       = iota // no hedging
	rowFixed             // the best fixed plan with the budget, untied
	rowFixedTied         // the same plan, tied
	rowOracleTied        // the best fixed plan with the budget on the tied servers
	rowSafeTied          // the same, among the plans that meet the targets of a high load
	rowRoundTrip         // one hedge a round trip after the primary, tied
	rowAuto              // the contender, untied
	rowAutoTied          // the contender, tied
	tieRows
)

// roles name the judged rows in a Verdict's Scenario, the same on every
// seed; its Contender names the plan.
var roles = map[int]string{rowAutoTied: "contender, tied", rowFixedTied: "best fixed plan, tied",
	rowRoundTrip: "second copy a round trip later, tied"}

// tieScenarios are the loads the tie lab judges: steady loads from ρ 0.5
// to 0.95 and a step overload, in both cancellation modes; a quick look
// runs two of them, which under the race detector take about a minute.
func tieScenarios(full bool) []scenario {
	if !full {
		return []scenario{steady(FastSlow, 0.7, CancelRunning), steady(FastSlow, 0.95, CancelQueued)}
	}
	var ss []scenario
	for _, c := range cancels {
		for _, rho := range []float64{0.5, 0.7, 0.9, 0.95} {
			ss = append(ss, steady(FastSlow, rho, c))
		}
		ss = append(ss, overload(FastSlow, c))
	}
	return ss
}

// tieCriteria are the targets of tied hedges, judged on the tied rows of
// the contender and of the best fixed plan (Verdict.Feasible is the tied
// oracle's figure), and, for crossed signals, of the second copy sent a
// round trip after the first.
var tieCriteria = []Criterion{
	{"tie waste", "ρ ≥ 0.9 and step overload: work spent on attempts that lost ≤ 1 % of handler time (in the overload's block)", 0.01},
	{"tie p99", "ρ ≥ 0.9 and step overload: p99 ≤ 1.02× no hedging (in the overload's block)", 1.02},
	{"tie queue", "ρ ≥ 0.9 and step overload: servers' mean queue ≤ 1.0× no hedging (in the overload's block and the next)", 1},
	{"tie gain", "ρ 0.5–0.7: p99 ≤ 0.7× no hedging, or the tied oracle's if it misses", 0.7},
	{"tie vs untied", "ρ 0.5–0.7: p99 ≤ 1.0× the same policy untied, or the oracles' ratio if it is above", 1},
	{"tie crossed", "start signal a round trip late: calls in which two attempts both started before a tie ≤ 1 %", 0.01},
}

// bestPossible are the criteria whose target the tied oracle may miss on
// the lab's upstream: where it does, a verdict's Limit is its figure, the
// best a fixed plan with the budget does in hindsight.
var bestPossible = map[string]bool{"tie gain": true, "tie vs untied": true}

// TieCriteria returns the targets TieJudge checks, in a slice of the
// caller's own.
func TieCriteria() []Criterion { return append([]Criterion(nil), tieCriteria...) }

// TieJudge runs the tie lab on cfg's seed: each scenario without hedging,
// with the best fixed plan that spends at most cfg.Budget extra attempts
// per call (chosen in hindsight on the untied servers), tied and untied,
// with the best such plan on the tied servers, with one tied hedge a
// RoundTrip after the primary, and with contender c, tied and untied. It
// returns the scenarios' rows and a verdict for each criterion of
// TieCriteria that applies, for the tied contender and the tied fixed
// plan, and for crossed signals the tied second copy too. cfg.Budget is
// the contender's, in [0, 3]. The fixed plans run through RunPlan, c
// through RunLoad, whose servers report starts to Do through
// hedge.Started, as parallel subtests of a subtest named "tie".
func TieJudge(t *testing.T, c Contender, cfg JudgeConfig) ([]TieScenario, []Verdict) {
	t.Helper()
	if !(cfg.Budget >= 0 && cfg.Budget <= 3) {
		t.Fatalf("lab: JudgeConfig.Budget %v is outside [0, 3]", cfg.Budget)
	}
	grid := DefaultGrid
	if cfg.Full {
		grid = FullGrid
	}
	ss := tieScenarios(cfg.Full)
	out := make([]TieScenario, len(ss))
	var eg errgroup.Group
	for i, s := range ss {
		l := s.load
		l.Seed = cfg.Seed
		out[i] = TieScenario{Title: describeLoad(l), key: describeLoad(s.load), Load: l, Rows: make([]LoadRow, tieRows)}
		eg.Go(func() error { return out[i].runPlans(grid, cfg.Budget, s.block) })
	}
	ok := t.Run("tie", func(t *testing.T) {
		for i := range out {
			sc := &out[i]
			for _, k := range []int{rowAuto, rowAutoTied} {
				l, name := sc.Load, c.Name
				if k == rowAutoTied {
					l, name = TiedServers(l), c.Name+", tied"
				}
				t.Run(describeLoad(l), func(t *testing.T) {
					t.Parallel()
					sc.Rows[k] = RunLoad(t, l, c)
					sc.Rows[k].Name = name
				})
			}
		}
	})
	err := eg.Wait()
	if !ok {
		t.FailNow()
	}
	if err != nil {
		t.Fatal(err)
	}
	var vs []Verdict
	for i, s := range ss {
		vs = append(vs, out[i].judge(s)...)
	}
	return out, vs
}

// runPlans fills the rows of sc that fixed plans make.
func (sc *TieScenario) runPlans(g Grid, budget float64, block int) error {
	m, spent := Whole, Spent
	if sc.Load.Overload.Rho != 0 {
		m, spent = InBlock(block), SpentInBlock(block)
	}
	untied, err := RunGrid(sc.Load, g)
	if err != nil {
		return err
	}
	tied, err := tiedGrid(TiedServers(sc.Load), g)
	if err != nil {
		return err
	}
	best, _ := Best(untied, budget, m)
	oracle, _ := Best(tied, budget, spent)
	safe := oracle
	if sc.high() {
		var meets []PlanRow
		for _, r := range tied {
			if sc.meetsHigh(block, r.LoadRow, untied[0].LoadRow) {
				meets = append(meets, r)
			}
		}
		safe, _ = Best(meets, budget, spent) // no hedging meets them
	}
	fixedTied, err := RunPlan(TiedServers(sc.Load), best.Plan)
	if err != nil {
		return err
	}
	rt := FixedPlan{Delay: RoundTrip, Hedges: 1}
	roundTrip, err := RunPlan(TiedServers(sc.Load), rt)
	if err != nil {
		return err
	}
	sc.Rows[rowNone] = untied[0].LoadRow
	sc.Rows[rowFixed] = best.LoadRow
	sc.Rows[rowFixedTied] = fixedTied
	sc.Rows[rowOracleTied] = oracle.LoadRow
	sc.Rows[rowRoundTrip] = roundTrip
	sc.Rows[rowSafeTied] = safe.LoadRow
	sc.Rows[rowSafeTied].Name = "tied, within targets: " + safe.Plan.String()
	sc.Rows[rowFixed].Name = "best " + best.Plan.String()
	sc.Rows[rowFixedTied].Name = "best " + best.Plan.String() + ", tied"
	sc.Rows[rowOracleTied].Name = "tied oracle: " + oracle.Plan.String()
	sc.Rows[rowRoundTrip].Name = rt.String() + ", tied"
	return nil
}

// Spent measures a row's whole run by the attempts per call a budget is
// charged for, which a tie's cancellations do not count: a tied plan
// with the same budget may send more hedges than an untied one.
func Spent(r LoadRow) (time.Duration, float64) { return r.P99, r.Spent }

// SpentInBlock is Spent for the block of index i, as InBlock.
func SpentInBlock(i int) Measure {
	return func(r LoadRow) (time.Duration, float64) {
		if i >= len(r.Blocks) {
			return math.MaxInt64, math.Inf(1)
		}
		return r.Blocks[i].P99, r.Blocks[i].Spent
	}
}

// tiedGrid is RunGrid on tied servers, with the early plans that ties
// make worth trying: hedges from a round trip to 20 ms apart, which race
// the queues rather than the work.
func tiedGrid(l Load, g Grid) ([]PlanRow, error) {
	rows, err := RunGrid(l, g)
	if err != nil {
		return nil, err
	}
	rows = slices.Clone(rows)
	for _, d := range []time.Duration{RoundTrip, 2 * RoundTrip, 5 * RoundTrip, 10 * RoundTrip, 20 * RoundTrip} {
		for h := 1; h <= g.Hedges; h++ {
			p := FixedPlan{Delay: d, Hedges: h}
			r, err := RunPlan(l, p)
			if err != nil {
				return nil, err
			}
			rows = append(rows, PlanRow{p, r})
		}
	}
	return rows, nil
}

// high reports whether sc is judged by the targets of a high load: ρ ≥
// 0.9, or a step overload.
func (sc *TieScenario) high() bool { return sc.Load.Rho >= 0.9 || sc.Load.Overload.Rho != 0 }

// meetsHigh reports whether row x meets the targets of a high load, waste,
// p99 and queue, against none, the run without hedging.
func (sc *TieScenario) meetsHigh(block int, x, none LoadRow) bool {
	if sc.Load.Overload.Rho == 0 {
		return x.Wasted <= 0.01 && float64(x.P99) <= 1.02*float64(none.P99) && x.Queue <= none.Queue
	}
	b, nb := x.Blocks[block], none.Blocks[block]
	return b.Wasted <= 0.01 && float64(b.P99) <= 1.02*float64(nb.P99) &&
		b.Queue <= nb.Queue && x.Blocks[block+1].Queue <= none.Blocks[block+1].Queue
}

// judge returns the verdicts of scenario s, whose rows sc holds.
func (sc *TieScenario) judge(s scenario) []Verdict {
	r := sc.Rows
	high := sc.high()
	var vs []Verdict
	add := func(name string, k int, v Verdict) {
		for _, cr := range tieCriteria {
			if cr.Name == name {
				v.Criterion, v.Limit = name, cr.Limit
			}
		}
		v.Scenario = sc.key + ": " + roles[k]
		v.Contender = r[k].Name + ": " + v.Contender
		if bestPossible[name] && v.Feasible > v.Limit {
			v.Limit = v.Feasible
		}
		v.Pass = v.Figure <= v.Limit
		vs = append(vs, v)
	}
	share := func(x, feasible float64) Verdict {
		return Verdict{Contender: fmt.Sprintf("%.2f%%", 100*x), Reference: "-", Figure: x, Feasible: feasible}
	}
	for _, k := range []int{rowAutoTied, rowFixedTied} {
		o := r[rowOracleTied]
		switch {
		case high:
			o = r[rowSafeTied]
			waste := func(x LoadRow) float64 {
				if sc.Load.Overload.Rho != 0 {
					return x.Blocks[s.block].Wasted
				}
				return x.Wasted
			}
			add("tie waste", k, share(waste(r[k]), waste(o)))
			p99 := func(x LoadRow) time.Duration {
				if sc.Load.Overload.Rho != 0 {
					return x.Blocks[s.block].P99
				}
				return x.P99
			}
			v := ratio(p99(r[k]), p99(r[rowNone]), "no hedging")
			v.Feasible = float64(p99(o)) / float64(p99(r[rowNone]))
			add("tie p99", k, v)
			add("tie queue", k, sc.queueVerdict(s, r[k]))
		default:
			v := ratio(r[k].P99, r[rowNone].P99, "no hedging")
			v.Feasible = float64(o.P99) / float64(r[rowNone].P99)
			add("tie gain", k, v)
			untied := r[k-1]
			v = ratio(r[k].P99, untied.P99, "untied")
			v.Feasible = float64(o.P99) / float64(r[rowFixed].P99)
			add("tie vs untied", k, v)
		}
	}
	for _, k := range []int{rowAutoTied, rowFixedTied, rowRoundTrip} {
		add("tie crossed", k, share(r[k].Crossed, r[rowOracleTied].Crossed))
	}
	return vs
}

// queueVerdict compares the servers' mean queue of row x with that of no
// hedging: over the run, or, in an overload, the worse of its block and
// the next.
func (sc *TieScenario) queueVerdict(s scenario, x LoadRow) Verdict {
	none, o := sc.Rows[rowNone], sc.Rows[rowSafeTied]
	if sc.Load.Overload.Rho == 0 {
		return Verdict{Contender: fmt.Sprintf("%.1f", x.Queue), Reference: fmt.Sprintf("no hedging: %.1f", none.Queue),
			Figure: x.Queue / none.Queue, Feasible: o.Queue / none.Queue}
	}
	v := Verdict{Figure: -1, Feasible: -1}
	for k := s.block; k <= s.block+1; k++ {
		if f := x.Blocks[k].Queue / none.Blocks[k].Queue; f > v.Figure {
			v.Figure = f
			v.Contender = fmt.Sprintf("%.1f in block %d", x.Blocks[k].Queue, k+1)
			v.Reference = fmt.Sprintf("no hedging: %.1f", none.Blocks[k].Queue)
		}
		v.Feasible = math.Max(v.Feasible, o.Blocks[k].Queue/none.Blocks[k].Queue)
	}
	return v
}

// Table formats the scenario's rows under its title.
func (sc TieScenario) Table() string { return TieTable(sc.Title, sc.Rows) }
