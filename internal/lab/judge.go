package lab

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tailcut/hedge"
)

// JudgeConfig says what Judge runs. It is a plain value; the zero value
// is a quick look, on seed 0, at a contender allowed no extra attempts.
type JudgeConfig struct {
	// Budget is the extra attempts per call the contender is allowed, as
	// its RatioBudget's ratio or its Planner's Load says: every oracle is
	// the best fixed plan that spends no more. In [0, 3].
	Budget float64
	// Seed draws the arrivals, routes and service times of every
	// scenario.
	Seed uint64
	// Full judges every scenario in both cancellation modes, on the
	// oracle's FullGrid. Otherwise Judge takes a quick look: a few
	// scenarios, on the DefaultGrid.
	Full bool
}

// Verdict is what Judge found for one criterion in one scenario: the
// criterion holds if Figure ≤ Limit. It is a plain value.
type Verdict struct {
	Criterion string // the target's name, as in Criteria
	Scenario  string
	// Contender and Reference are the figures Figure compares, as text:
	// "154ms" against "fixed 44.3ms ×2: 89ms".
	Contender, Reference string
	Figure, Limit        float64
	// Feasible is the Figure of the best fixed plan with the same budget
	// where that tells whether the target can be met at all (it recovers
	// from a disturbance as fast as the queues let it); NaN where it
	// cannot tell.
	Feasible float64
	Pass     bool
}

// Criterion is one target of a default policy, as Judge checks it: a
// short name, the target in words, and the Limit that a Verdict's Figure
// must not exceed. It is a plain value.
type Criterion struct {
	Name   string
	Target string
	Limit  float64
}

// criterion is a Criterion with what it runs and how it judges one
// scenario.
type criterion struct {
	Criterion
	oracle    oracleNeed // whether it needs the grid of fixed plans on each scenario's load
	scenarios func(full bool) []scenario
	judge     func(j *judging, s scenario) Verdict
}

type oracleNeed int

const (
	noOracle     oracleNeed = iota
	oracleAlways            // the criterion compares with it
	oracleIfFull            // it shows what is feasible, in a full run
)

// scenario is one Load the contender runs. ref is the same Load without
// its disturbance, for the recovery after it; block is the disturbance's
// block (from 0), and from the first block by which it must have
// recovered. independent runs the contender through Run on the Load's
// Service, without queues.
type scenario struct {
	load        Load
	ref         *Load
	block, from int
	independent bool
}

// The disturbances last while the calls of block 2 arrive (of Load's
// default blocks of 1,000 after 2,000 to warm up); a shift starts with
// it. A policy gets two blocks after one to recover: it is judged on the
// blocks from the fifth, or from the fourth after a shift.
var (
	block2      = Period{From: 3000, To: 4000}
	shiftFrom   = 3000
	overloadRho = 1.1
)

func steady(svc Upstream, rho float64, c Cancel) scenario {
	return scenario{load: Load{Service: svc, Rho: rho, Cancel: c}}
}

func brownout(svc Upstream, c Cancel) scenario {
	s := steady(svc, 0.5, c)
	ref := s.load
	s.load.Brownout = Brownout{Replica: 0, Factor: 5, Period: block2}
	s.ref, s.block, s.from = &ref, 1, 4
	return s
}

func overload(svc Upstream, c Cancel) scenario {
	s := steady(svc, 0.5, c)
	ref := s.load
	s.load.Overload = Overload{Rho: overloadRho, Period: block2}
	s.ref, s.block, s.from = &ref, 1, 4
	return s
}

// shift moves the whole distribution by factor from block 2 on; the run
// it recovers towards is the one shifted from the first call.
func shift(factor float64, c Cancel) scenario {
	s := steady(FastSlow, 0.3, c)
	ref := s.load
	ref.Shift = Shift{Factor: factor}
	s.load.Shift = Shift{Factor: factor, From: shiftFrom}
	s.ref, s.block, s.from = &ref, 1, 3
	return s
}

var cancels = []Cancel{CancelRunning, CancelQueued}

// each returns one scenario per cancellation mode.
func each(f func(Cancel) scenario) []scenario {
	var ss []scenario
	for _, c := range cancels {
		ss = append(ss, f(c))
	}
	return ss
}

// A quick look runs few loads, and judges each by every criterion it
// can: the run of 90/10 at ρ 0.5 with cancel running is judged as sharp
// and steady, and is the undisturbed run of the brownout.

func sharpScenarios(full bool) []scenario {
	if !full {
		return []scenario{steady(FastSlow, 0.5, CancelRunning), steady(Stragglers, 0.5, CancelQueued)}
	}
	var ss []scenario
	for _, svc := range []Upstream{FastSlow, Stragglers, HeavyTail} {
		for _, rho := range []float64{0.3, 0.5} {
			ss = append(ss, each(func(c Cancel) scenario { return steady(svc, rho, c) })...)
		}
	}
	return ss
}

func brownoutScenarios(full bool) []scenario {
	if !full {
		return []scenario{brownout(FastSlow, CancelRunning)}
	}
	return append(each(func(c Cancel) scenario { return brownout(FastSlow, c) }),
		each(func(c Cancel) scenario { return brownout(Stragglers, c) })...)
}

func overloadScenarios(full bool) []scenario {
	if !full {
		return []scenario{overload(FastSlow, CancelQueued)}
	}
	return append(each(func(c Cancel) scenario { return overload(FastSlow, c) }),
		each(func(c Cancel) scenario { return overload(Stragglers, c) })...)
}

func shiftScenarios(full bool) []scenario {
	if !full {
		return nil
	}
	return append(each(func(c Cancel) scenario { return shift(2, c) }),
		each(func(c Cancel) scenario { return shift(0.5, c) })...)
}

// Criteria returns the targets Judge checks, in the order of its
// verdicts, in a slice of the caller's own.
func Criteria() []Criterion {
	cs := make([]Criterion, len(criteria))
	for i, c := range criteria {
		cs[i] = c.Criterion
	}
	return cs
}

var criteria = []criterion{{
	Criterion: Criterion{"independent", "independent draws: p99 ≤ 1.05× the best fixed plan at the same extra load", 1.05},
	scenarios: func(full bool) []scenario {
		ups := []Upstream{FastSlow}
		if full {
			ups = []Upstream{FastSlow, Lognormal, Stragglers, HeavyTail}
		}
		var ss []scenario
		for _, up := range ups {
			ss = append(ss, scenario{load: Load{Service: up}, independent: true})
		}
		return ss
	},
	judge: judgeIndependent,
}, {
	Criterion: Criterion{"sharp", "ρ ≤ 0.5: p99 ≤ 1.2× the best fixed plan with the same budget", 1.2},
	oracle:    oracleAlways,
	scenarios: sharpScenarios,
	judge: func(j *judging, s scenario) Verdict {
		r := j.run(s.load)
		o, _ := Best(j.grid(s.load), j.budget, Whole)
		return ratio(r.P99, o.P99, o.Name)
	},
}, {
	Criterion: Criterion{"steady", "steady load: p99 ≤ 1.05× no hedging", 1.05},
	scenarios: func(full bool) []scenario {
		if !full {
			return append(sharpScenarios(false), steady(FastSlow, 0.5, CancelQueued), steady(FastSlow, 0.9, CancelQueued))
		}
		var ss []scenario
		for _, svc := range []Upstream{FastSlow, Stragglers, HeavyTail} {
			for _, rho := range []float64{0.3, 0.5, 0.7, 0.9, 0.95} {
				ss = append(ss, each(func(c Cancel) scenario { return steady(svc, rho, c) })...)
			}
		}
		return ss
	},
	judge: func(j *judging, s scenario) Verdict {
		return ratio(j.run(s.load).P99, j.none(s.load).P99, "no hedging")
	},
}, {
	Criterion: Criterion{"shed", "servers shed hedges when busy, ρ 0.9: p99 ≤ 1.05× no hedging", 1.05},
	scenarios: func(full bool) []scenario {
		if !full {
			return nil
		}
		s := steady(FastSlow, 0.9, CancelQueued)
		s.load.Shed = true
		return []scenario{s}
	},
	judge: func(j *judging, s scenario) Verdict {
		return ratio(j.run(s.load).P99, j.none(s.load).P99, "no hedging")
	},
}, {
	Criterion: Criterion{"brownout", "one replica of four 5× slower: p99 ≤ 1.5× the best fixed plan with the same budget", 1.5},
	oracle:    oracleAlways,
	scenarios: brownoutScenarios,
	judge: func(j *judging, s scenario) Verdict {
		r := j.run(s.load)
		o, _ := Best(j.grid(s.load), j.budget, InBlock(s.block))
		return ratio(r.Blocks[s.block].P99, o.Blocks[s.block].P99, o.Name)
	},
}, {
	Criterion: Criterion{"recovery", "from two blocks after a disturbance: each block's p99 ≤ 1.1× the undisturbed run's", 1.1},
	oracle:    oracleIfFull,
	scenarios: func(full bool) []scenario {
		return slices.Concat(brownoutScenarios(full), overloadScenarios(full), shiftScenarios(full))
	},
	judge: judgeRecovery,
}, {
	Criterion: Criterion{"overload amp", "step overload ρ 0.5 → 1.1 → 0.5: attempts per call ≤ 1.05 while it lasts", 1.05},
	scenarios: overloadScenarios,
	judge: func(j *judging, s scenario) Verdict {
		a := j.run(s.load).Blocks[s.block].Amp
		return Verdict{Contender: fmt.Sprintf("%.3f", a), Reference: "-", Figure: a, Feasible: math.NaN()}
	},
}, {
	Criterion: Criterion{"overload p99", "step overload: p99 while it lasts ≤ 1.0× no hedging's", 1},
	scenarios: overloadScenarios,
	judge: func(j *judging, s scenario) Verdict {
		return ratio(j.run(s.load).Blocks[s.block].P99, j.none(s.load).Blocks[s.block].P99, "no hedging")
	},
}, {
	Criterion: Criterion{"overload queue", "step overload: the servers' mean queue while it lasts and in the block after ≤ 1.0× no hedging's", 1},
	scenarios: overloadScenarios,
	judge: func(j *judging, s scenario) Verdict {
		r, none := j.run(s.load), j.none(s.load)
		v := Verdict{Figure: -1, Feasible: math.NaN()}
		for k := s.block; k <= s.block+1; k++ {
			if f := r.Blocks[k].Queue / none.Blocks[k].Queue; f > v.Figure {
				v.Figure = f
				v.Contender = fmt.Sprintf("%.1f in block %d", r.Blocks[k].Queue, k+1)
				v.Reference = fmt.Sprintf("no hedging: %.1f", none.Blocks[k].Queue)
			}
		}
		return v
	},
}, {
	Criterion: Criterion{"cannot win", "slowness belongs to the request: attempts per call ≤ 1.03", 1.03},
	scenarios: func(full bool) []scenario {
		rhos := []float64{0.5}
		if full {
			rhos = []float64{0.5, 0.9}
		}
		var ss []scenario
		for _, rho := range rhos {
			for _, c := range cancels {
				if !full && c == CancelQueued {
					continue
				}
				s := steady(FastSlow, rho, c)
				s.load.Correlated = true
				ss = append(ss, s)
			}
		}
		return ss
	},
	judge: func(j *judging, s scenario) Verdict {
		a := j.run(s.load).Amp
		return Verdict{Contender: fmt.Sprintf("%.3f", a), Reference: "-", Figure: a, Feasible: math.NaN()}
	},
}}

// ratio is the verdict of a p99 against a reference p99.
func ratio(got, ref time.Duration, refName string) Verdict {
	return Verdict{Contender: roundLatency(got).String(), Reference: refName + ": " + roundLatency(ref).String(),
		Figure: float64(got) / float64(ref), Feasible: math.NaN()}
}

// judgeRecovery compares each block from s.from on with the same block of
// the undisturbed run, and the best fixed plan for the disturbed run
// likewise where its grid was run: always in a full run, and in a quick
// one where another criterion needs it.
func judgeRecovery(j *judging, s scenario) Verdict {
	worst := func(r, ref LoadRow) (f float64, k int) {
		f = -1
		for i := s.from; i < len(r.Blocks) && i < len(ref.Blocks); i++ {
			if x := float64(r.Blocks[i].P99) / float64(ref.Blocks[i].P99); x > f {
				f, k = x, i
			}
		}
		return f, k
	}
	r, ref := j.run(s.load), j.run(*s.ref)
	v := Verdict{}
	var k int
	v.Figure, k = worst(r, ref)
	v.Contender = fmt.Sprintf("%v in block %d", roundLatency(r.Blocks[k].P99), k+1)
	v.Reference = fmt.Sprintf("undisturbed: %v", roundLatency(ref.Blocks[k].P99))
	v.Feasible = math.NaN()
	if grid := j.grid(s.load); grid != nil {
		o, _ := Best(grid, j.budget, Whole)
		if oref, err := RunPlan(*s.ref, o.Plan); err == nil {
			v.Feasible, _ = worst(o.LoadRow, oref)
		}
	}
	return v
}

func judgeIndependent(j *judging, s scenario) Verdict {
	r := j.independent[j.key(s.load)]
	o := Oracle(s.load.Service, independentWarm, independentCalls, r.Amp)
	return ratio(r.P99, o.P99, strings.TrimPrefix(o.Name, "oracle: "))
}

// The tail lab's calls: independent draws need no queue to fill.
const independentWarm, independentCalls = 1000, 4000

// judging holds what one Judge ran.
type judging struct {
	cfg         JudgeConfig
	budget      float64
	runs        map[string]LoadRow
	grids       map[string][]PlanRow
	nones       map[string]LoadRow
	independent map[string]Row
}

func (j *judging) seeded(l Load) Load {
	l.Seed = j.cfg.Seed
	return l
}

// key names a Load, on the judge's seed, as a map key.
func (j *judging) key(l Load) string { return j.seeded(l).key() }

func (j *judging) run(l Load) LoadRow    { return j.runs[j.key(l)] }
func (j *judging) grid(l Load) []PlanRow { return j.grids[j.key(l)] }
func (j *judging) none(l Load) LoadRow   { return j.nones[j.key(l)] }

// Judge runs contender c through the scenarios of every criterion, and
// returns a verdict for each criterion in each scenario, in the order of
// Criteria. Each scenario is run on cfg.Seed's draws, and each oracle
// (the best fixed plan that spends at most cfg.Budget extra attempts per
// call) is chosen from its grid run on the same draws, through the same
// queues, by RunPlan.
//
// The contender's runs are parallel subtests of a subtest named "judge",
// as Sweep runs them; the oracles' grids run beside them on every
// processor, and once per process (see RunGrid). A run that fails stops
// t once every run has ended. Call Judge from t's own goroutine, as
// t.Run must be; the independent draws run after the rest, through Run.
// They are the tail lab's, which cfg.Seed does not vary. A quick look (cfg.Full false) runs the
// contender on 7 loads of 7,000 calls and 3 grids of about 30 plans; a
// full one on 51 loads, and 24 grids of a few hundred plans.
func Judge(t *testing.T, c Contender, cfg JudgeConfig) []Verdict {
	t.Helper()
	if !(cfg.Budget >= 0 && cfg.Budget <= 3) {
		t.Fatalf("lab: JudgeConfig.Budget %v is outside [0, 3]", cfg.Budget)
	}
	j := &judging{cfg: cfg, budget: cfg.Budget, runs: map[string]LoadRow{}, grids: map[string][]PlanRow{},
		nones: map[string]LoadRow{}, independent: map[string]Row{}}
	grid := DefaultGrid
	if cfg.Full {
		grid = FullGrid
	}

	// What to run: each load once.
	var runs, grids, nones, independent []Load
	seen := map[string]bool{}
	add := func(to *[]Load, kind string, l Load) {
		if k := kind + j.key(l); !seen[k] {
			seen[k] = true
			*to = append(*to, j.seeded(l))
		}
	}
	for _, cr := range criteria {
		for _, s := range cr.scenarios(cfg.Full) {
			switch {
			case s.independent:
				add(&independent, "i", s.load)
				continue
			case cr.oracle == oracleAlways || cr.oracle == oracleIfFull && cfg.Full:
				add(&grids, "g", s.load)
			}
			add(&runs, "r", s.load)
			add(&nones, "n", s.load)
			if s.ref != nil {
				add(&runs, "r", *s.ref)
			}
		}
	}

	// The oracles' grids and the runs without hedging, beside the
	// contender's runs.
	gridRows := make([][]PlanRow, len(grids))
	noneRows := make([]LoadRow, len(nones))
	var eg errgroup.Group
	for i, l := range grids {
		eg.Go(func() (err error) {
			gridRows[i], err = RunGrid(l, grid)
			return err
		})
	}
	for i, l := range nones {
		eg.Go(func() (err error) {
			noneRows[i], err = RunPlan(l, FixedPlan{})
			return err
		})
	}
	runRows := make([]LoadRow, len(runs))
	ok := t.Run("judge", func(t *testing.T) {
		for i, l := range runs {
			t.Run(describeLoad(l), func(t *testing.T) {
				t.Parallel()
				runRows[i] = RunLoad(t, l, c)
			})
		}
	})
	err := eg.Wait()
	if !ok {
		t.FailNow()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range independent {
		j.independent[j.key(l)] = Run(t, c.Name, l.Service, independentWarm, independentCalls, c.hedger())
	}
	for i, l := range runs {
		j.runs[j.key(l)] = runRows[i]
	}
	for i, l := range nones {
		j.nones[j.key(l)] = noneRows[i]
	}
	for i, l := range grids {
		j.grids[j.key(l)] = gridRows[i]
	}

	var vs []Verdict
	for _, cr := range criteria {
		for _, s := range cr.scenarios(cfg.Full) {
			v := cr.judge(j, s)
			v.Criterion, v.Scenario, v.Limit = cr.Name, describeLoad(s.load), cr.Limit
			if s.independent {
				v.Scenario = shortName(s.load.Service) + ", independent draws"
			}
			v.Pass = v.Figure <= v.Limit
			vs = append(vs, v)
		}
	}
	return vs
}

// hedger plays c's policy through Do, made on the first call, inside
// Run's bubble.
func (c Contender) hedger() Hedger {
	var p *hedge.Policy[int]
	return func(ctx context.Context, attempt func(context.Context) (int, error)) (int, error) {
		if p == nil {
			q := c.Policy()
			p = &q
		}
		return hedge.Do(ctx, *p, attempt)
	}
}

// shortName is how a verdict names an upstream.
func shortName(up Upstream) string {
	switch up.Name {
	case FastSlow.Name:
		return "90/10"
	case Stragglers.Name:
		return "stragglers"
	case HeavyTail.Name:
		return "heavy tail"
	case Lognormal.Name:
		return "lognormal 1s"
	}
	return up.Name
}

// describeLoad names a scenario: its upstream, load, cancellation mode
// and disturbance.
func describeLoad(l Load) string {
	l, _ = l.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "%s ρ%v", shortName(l.Service), l.Rho)
	if l.Correlated {
		b.WriteString(" correlated")
	}
	if l.Shed {
		b.WriteString(" shedding")
	}
	if f := l.Brownout.Factor; f != 0 {
		fmt.Fprintf(&b, ", replica %d ×%v %s", l.Brownout.Replica, f, describePeriod(l, l.Brownout.Period))
	}
	if o := l.Overload; o.Rho != 0 {
		fmt.Fprintf(&b, ", ρ%v %s", o.Rho, describePeriod(l, o.Period))
	}
	if l.Tie.On {
		b.WriteString(", " + l.Tie.String())
	}
	if l.Admit.On {
		b.WriteString(", " + l.Admit.String())
	}
	if s := l.Shift; s.Factor != 0 {
		fmt.Fprintf(&b, ", ×%v %s", s.Factor, describePeriod(l, Period{s.From, l.Warm + l.Calls}))
	}
	if l.Seed != 0 {
		fmt.Fprintf(&b, ", seed %d", l.Seed)
	}
	b.WriteString(", " + l.Cancel.String())
	return b.String()
}

// describePeriod names a period by blocks of measured calls (from 1) if it
// is made of whole ones.
func describePeriod(l Load, p Period) string {
	from, to := p.From-l.Warm, p.To-l.Warm
	switch {
	case from < 0 || from%l.Block != 0 || to%l.Block != 0 && p.To != l.Warm+l.Calls:
		return fmt.Sprintf("in calls %d–%d", p.From, p.To-1)
	case p.To >= l.Warm+l.Calls:
		return fmt.Sprintf("from block %d", from/l.Block+1)
	case to-from == l.Block:
		return fmt.Sprintf("in block %d", from/l.Block+1)
	}
	return fmt.Sprintf("in blocks %d–%d", from/l.Block+1, to/l.Block)
}

// VerdictTable formats verdicts under title, one line each: "MISSED"
// marks those that failed, and "-" a Feasible that tells nothing.
func VerdictTable(title string, vs []Verdict) string {
	var b strings.Builder
	b.WriteString(title + "\n")
	line := "%-14s %-58s %-20s %-30s %7s %6s %8s  %s\n"
	fmt.Fprintf(&b, line, "criterion", "scenario", "contender", "reference", "figure", "limit", "feasible", "")
	for _, v := range vs {
		feasible, verdict := "-", "ok"
		if !math.IsNaN(v.Feasible) {
			feasible = fmt.Sprintf("%.3f", v.Feasible)
		}
		if !v.Pass {
			verdict = "MISSED"
		}
		fmt.Fprintf(&b, line, v.Criterion, v.Scenario, v.Contender, v.Reference,
			fmt.Sprintf("%.3f", v.Figure), fmt.Sprintf("%.2f", v.Limit), feasible, verdict)
	}
	return b.String()
}
