package lab

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Grid is the set of fixed plans a load oracle chooses from: no hedging,
// and 1 to Hedges hedges at every delay of a geometric series of ratio
// Step, across the delays that may matter on the Load (see RunGrid). It
// is a plain value; the zero Grid means DefaultGrid.
type Grid struct {
	Step   float64
	Hedges int
}

// The grids of a quick look and of a whole run. A quick look's delays are
// 30 % apart, with at most two hedges: its best plan's p99 can be some
// 5 % above the whole grid's, whose delays are 10 % apart.
var (
	DefaultGrid = Grid{Step: 1.3, Hedges: 2}
	FullGrid    = Grid{Step: 1.1, Hedges: 3}
)

// PlanRow is a fixed plan and what it did on a Load. It is a plain value.
type PlanRow struct {
	Plan FixedPlan
	LoadRow
}

// RunGrid runs every plan of g on l's draws and returns their rows, no
// hedging first. The delays span what may matter to l's p99: from 0.8×
// the median latency without hedging (earlier, the first hedge alone
// doubles the load) to 1.25× its largest p99, over the whole run or any
// block; a plan whose last hedge would be due after that is left out, as
// the same plan with one hedge fewer has its p99 for less load. The runs
// are independent, so they run on every processor.
//
// A grid is run once per process: RunGrid keeps the rows, by g and l
// (whose Service it knows by Name), and returns the same ones to every
// caller, which must not modify them. It is safe for concurrent use.
func RunGrid(l Load, g Grid) ([]PlanRow, error) {
	if g == (Grid{}) {
		g = DefaultGrid
	}
	l, err := l.withDefaults()
	if err != nil {
		return nil, err
	}
	v, _ := grids.LoadOrStore(fmt.Sprintf("%+v %s", g, l.key()), &gridRun{})
	r := v.(*gridRun)
	r.once.Do(func() { r.rows, r.err = runGrid(l, g) })
	return r.rows, r.err
}

// grids holds the grids run so far, by Grid and Load.
var grids sync.Map // string → *gridRun

type gridRun struct {
	once sync.Once
	rows []PlanRow
	err  error
}

// runGrid is RunGrid on a Load with its defaults.
func runGrid(l Load, g Grid) ([]PlanRow, error) {
	if err := l.canPlan(FixedPlan{Delay: 1, Hedges: g.Hedges}); err != nil {
		return nil, err
	}
	if !(g.Step > 1 && g.Step < 10) {
		return nil, fmt.Errorf("%w: grid step %v is outside (1, 10)", errBadPlan, g.Step)
	}
	d := newDraws(l, g.Hedges)
	none := runPlan(l, d, FixedPlan{})
	hi := none.P99
	for _, b := range none.Blocks {
		hi = max(hi, b.P99)
	}
	plans := []FixedPlan{{}}
	for h := 1; h <= g.Hedges; h++ {
		for x := 0.8 * float64(none.P50); x*float64(h) <= 1.25*float64(hi); x *= g.Step {
			plans = append(plans, FixedPlan{Delay: time.Duration(x), Hedges: h})
		}
	}
	rows := make([]PlanRow, len(plans))
	rows[0] = PlanRow{FixedPlan{}, none}
	var eg errgroup.Group
	eg.SetLimit(runtime.GOMAXPROCS(0))
	for i := 1; i < len(plans); i++ {
		eg.Go(func() error {
			rows[i] = PlanRow{plans[i], runPlan(l, d, plans[i])}
			return nil
		})
	}
	eg.Wait() // runPlan returns no errors
	return rows, nil
}

// Measure is what an oracle minimises and bounds in a row: a p99 and the
// attempts per call of the same calls, such as the whole run's or one
// block's. It must be safe to call concurrently, as Whole and InBlock
// are.
type Measure func(LoadRow) (p99 time.Duration, amp float64)

// Whole measures a row's whole run.
func Whole(r LoadRow) (time.Duration, float64) { return r.P99, r.Amp }

// InBlock measures the block of index i (from 0) of a row; a row without
// it measures as infinitely slow.
func InBlock(i int) Measure {
	return func(r LoadRow) (time.Duration, float64) {
		if i >= len(r.Blocks) {
			return math.MaxInt64, math.Inf(1)
		}
		return r.Blocks[i].P99, r.Blocks[i].Amp
	}
}

// Best returns the row of least p99 among those that spend at most budget
// extra attempts per call, both by m; the first of equals; ok is false if
// none does. With RunGrid's rows and a budget of at least 0 it always
// finds one: no hedging.
func Best(rows []PlanRow, budget float64, m Measure) (best PlanRow, ok bool) {
	least := time.Duration(math.MaxInt64)
	for _, r := range rows {
		p99, amp := m(r.LoadRow)
		if amp <= 1+budget && p99 < least {
			best, least, ok = r, p99, true
		}
	}
	return best, ok
}
