package lab

import (
	"fmt"
	"math"
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
// and admits primaries first, with at most Workers requests waiting
// before hedges are turned away, and hedges turned away after 50 ms of
// waiting, about the median service time of the lab's upstreams.
func TiedServers(l Load) Load {
	w := l.Workers
	if w == 0 {
		w = 4
	}
	l.Tie = Tie{On: true, Signal: RoundTrip}
	l.Admit = Admit{On: true, Queue: w, HedgeWait: 50 * time.Millisecond}
	return l
}

// TieScenario is one Load of the tie lab and the rows its contenders
// made, in the order of TieRows' names. It is a plain value.
type TieScenario struct {
	Title string
	Load  Load // without ties; the tied rows ran on TiedServers(Load)
	Rows  []LoadRow
}

// The rows of a TieScenario, in order.
const (
	rowNone       = iota // no hedging
	rowFixed             // the best fixed plan with the budget, untied
	rowFixedTied         // the same plan, tied
	rowOracleTied        // the best fixed plan with the budget on the tied servers
	rowRoundTrip         // one hedge a round trip after the primary, tied
	rowAuto              // the contender, untied
	rowAutoTied          // the contender, tied
	tieRows
)

// tieScenarios are the loads the tie lab judges: steady loads from ρ 0.5
// to 0.95 and a step overload, in both cancellation modes; a quick look
// runs three of them.
func tieScenarios(full bool) []scenario {
	if !full {
		return []scenario{steady(FastSlow, 0.7, CancelRunning), steady(FastSlow, 0.95, CancelQueued), overload(FastSlow, CancelQueued)}
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
	{"tie waste", "ρ ≥ 0.9 and step overload: work spent on attempts that lost ≤ 1 % of handler time", 0.01},
	{"tie p99", "ρ ≥ 0.9 and step overload: p99 ≤ 1.02× no hedging (in the overload's block)", 1.02},
	{"tie queue", "ρ ≥ 0.9 and step overload: servers' mean queue ≤ 1.0× no hedging (in the overload's block and the next)", 1},
	{"tie gain", "ρ 0.5–0.7: p99 ≤ 0.7× no hedging", 0.7},
	{"tie vs untied", "ρ 0.5–0.7: p99 ≤ 1.0× the same policy untied", 1},
	{"tie crossed", "start signal a round trip late: calls in which two attempts both started before a tie ≤ 1 %", 0.01},
}

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
// plan. The fixed plans run through RunPlan, c through RunLoad as parallel
// subtests of a subtest named "tie".
//
// In RunLoad the servers play the client's part of a tie (see Tie), so a
// learned delay or a budget hears a tie-cancelled attempt as a loser.
func TieJudge(t *testing.T, c Contender, cfg JudgeConfig) ([]TieScenario, []Verdict) {
	t.Helper()
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
		out[i] = TieScenario{Title: describeLoad(l), Load: l, Rows: make([]LoadRow, tieRows)}
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
	m := Whole
	if sc.Load.Overload.Rho != 0 {
		m = InBlock(block)
	}
	untied, err := RunGrid(sc.Load, g)
	if err != nil {
		return err
	}
	tied, err := RunGrid(TiedServers(sc.Load), g)
	if err != nil {
		return err
	}
	best, _ := Best(untied, budget, m)
	oracle, _ := Best(tied, budget, m)
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
	sc.Rows[rowFixed].Name = "best " + best.Plan.String()
	sc.Rows[rowFixedTied].Name = "best " + best.Plan.String() + ", tied"
	sc.Rows[rowOracleTied].Name = "tied oracle: " + oracle.Plan.String()
	sc.Rows[rowRoundTrip].Name = rt.String() + ", tied"
	return nil
}

// judge returns the verdicts of scenario s, whose rows sc holds.
func (sc *TieScenario) judge(s scenario) []Verdict {
	r := sc.Rows
	high := sc.Load.Rho >= 0.9 || sc.Load.Overload.Rho != 0
	var vs []Verdict
	add := func(name string, k int, v Verdict) {
		for _, cr := range tieCriteria {
			if cr.Name == name {
				v.Criterion, v.Limit = name, cr.Limit
			}
		}
		v.Scenario = sc.Title + ": " + r[k].Name
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
			add("tie waste", k, share(r[k].Wasted, o.Wasted))
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
			add("tie vs untied", k, ratio(r[k].P99, untied.P99, "untied"))
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
	none, o := sc.Rows[rowNone], sc.Rows[rowOracleTied]
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
