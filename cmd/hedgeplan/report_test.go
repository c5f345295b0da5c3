package main

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMain runs the command itself when the test binary is started with
// HEDGEPLAN_RUN_MAIN set, so that a test can run the real main, flags and
// exit status included.
func TestMain(m *testing.M) {
	if os.Getenv("HEDGEPLAN_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func output(t *testing.T, input string, cfg config) string {
	t.Helper()
	var b strings.Builder
	if err := run(strings.NewReader(input), &b, cfg); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// flat writes n latencies of 30, 31 and 32ms.
func flat(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%dms\n", 30+i%3)
	}
	return b.String()
}

const fiveSamples = "31ms\n40ms\n35ms\n500ms\n33ms\n"

func TestWarnsWhenTooFewToPlanTheTarget(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		target float64
		need   int // 0: no warning
	}{
		{"5 latencies for p99", fiveSamples, 0.99, 2500},
		{"one short of p99's minimum", fastSlow(2499), 0.99, 2500},
		{"p99's minimum", fastSlow(2500), 0.99, 0},
		{"one short of p95's minimum", fastSlow(499), 0.95, 500},
		{"p95's minimum", fastSlow(500), 0.95, 0},
		{"p99.9 from what p99 needs", fastSlow(2500), 0.999, 25000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := output(t, tt.input, config{budget: 0.1, target: tt.target, maxHedges: 2, column: 1})
			warned := strings.Contains(out, "too few")
			switch {
			case tt.need == 0 && warned:
				t.Errorf("warns with enough latencies:\n%s", out)
			case tt.need != 0 && !warned:
				t.Errorf("no warning that the latencies are too few:\n%s", out)
			case tt.need != 0 && !strings.Contains(out, fmt.Sprintf("at least %d", tt.need)):
				t.Errorf("the warning does not say that it takes at least %d:\n%s", tt.need, out)
			}
		})
	}
}

func TestMinSamples(t *testing.T) {
	for _, tt := range []struct {
		q    float64
		want int
	}{{0.5, 50}, {0.9, 250}, {0.95, 500}, {0.99, 2500}, {0.999, 25000}} {
		if got := minSamples(tt.q); got != tt.want {
			t.Errorf("minSamples(%v) = %d, want %d", tt.q, got, tt.want)
		}
	}
}

func TestRecommendationCountsHedges(t *testing.T) {
	for _, tt := range []struct {
		budget float64
		want   string
	}{
		{0.10, "1 hedge after "},
		{0.15, "2 hedges, one every "},
	} {
		out := output(t, fastSlow(4000), config{budget: tt.budget, target: 0.99, maxHedges: 2, column: 1})
		if !strings.Contains(out, tt.want) || strings.Contains(out, "hedge(s)") {
			t.Errorf("budget %v: want %q, and no \"hedge(s)\":\n%s", tt.budget, tt.want, out)
		}
	}
}

var snippet = regexp.MustCompile(`(?m)hedge\.Policy\[T\]\{.*\}$`)

// TestPolicySnippetsAreGo parses each policy the output suggests as a Go
// expression, and type-checks the fixed delay's argument against the
// real time package: it must be a constant time.Duration equal to the
// recommended delay.
func TestPolicySnippetsAreGo(t *testing.T) {
	for _, budget := range []float64{0.10, 0.15} {
		hedges, delay, out := plan(t, fastSlow(4000), config{budget: budget, target: 0.99, maxHedges: 2, column: 1})
		snippets := snippet.FindAllString(out, -1)
		if hedges == 0 || len(snippets) != 2 {
			t.Fatalf("budget %v: want a recommendation and two policies:\n%s", budget, out)
		}
		var fixed []ast.Expr
		for _, s := range snippets {
			e, err := parser.ParseExpr(s)
			if err != nil {
				t.Errorf("budget %v: %s is not Go: %v", budget, s, err)
				continue
			}
			// A fixed delay needs one attempt per hedge; a Planner, one
			// per hedge it may choose.
			attempts := 2 + 1
			if strings.Contains(s, "hedge.Fixed(") {
				attempts = hedges + 1
			}
			if !strings.Contains(s, fmt.Sprintf("MaxAttempts: %d}", attempts)) {
				t.Errorf("budget %v: %s does not allow %d attempts", budget, s, attempts)
			}
			ast.Inspect(e, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok && types.ExprString(c.Fun) == "hedge.Fixed" && len(c.Args) == 1 {
					fixed = append(fixed, c.Args[0])
				}
				return true
			})
		}
		if len(fixed) != 1 {
			t.Fatalf("budget %v: want one hedge.Fixed(d) in %q", budget, snippets)
		}
		if got := durationConstant(t, types.ExprString(fixed[0])); got != delay {
			t.Errorf("budget %v: hedge.Fixed(%s) is %v, want the recommended %v", budget, types.ExprString(fixed[0]), got, delay)
		}
	}
}

func TestGoDuration(t *testing.T) {
	for _, d := range []time.Duration{
		0, 1, 999, time.Microsecond, 850 * time.Microsecond, 44600 * time.Microsecond,
		415 * time.Millisecond, 1520 * time.Millisecond, time.Second, 90 * time.Second,
		2 * time.Minute, time.Hour + time.Nanosecond, -3 * time.Millisecond,
	} {
		expr := goDuration(d)
		if got := durationConstant(t, expr); got != d {
			t.Errorf("goDuration(%v) = %s, which is %v", d, expr, got)
		}
	}
	for d, want := range map[time.Duration]string{
		415 * time.Millisecond:   "415 * time.Millisecond",
		44600 * time.Microsecond: "44600 * time.Microsecond",
		time.Second:              "time.Second",
		0:                        "0",
	} {
		if got := goDuration(d); got != want {
			t.Errorf("goDuration(%v) = %s, want %s", d, got, want)
		}
	}
}

// The time package, parsed once from source for every durationConstant.
var (
	fset    = token.NewFileSet()
	sources = importer.ForCompiler(fset, "source", nil)
)

// durationConstant type-checks expr as a constant time.Duration against
// the standard library's time package and returns its value.
func durationConstant(t *testing.T, expr string) time.Duration {
	t.Helper()
	src := "package p\n\nimport \"time\"\n\nconst d time.Duration = " + expr + "\n"
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	conf := types.Config{Importer: sources}
	pkg, err := conf.Check("p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatalf("%s is not a constant time.Duration: %v", expr, err)
	}
	v, exact := constant.Int64Val(pkg.Scope().Lookup("d").(*types.Const).Val())
	if !exact {
		t.Fatalf("%s does not fit a time.Duration", expr)
	}
	return time.Duration(v)
}

var (
	noHedgingRow = regexp.MustCompile(`(?m)^\s*0\s+-\s+(\S+)\s+0\.0%`)
	doNotHedge   = regexp.MustCompile(`do not hedge; no plan within the budget beats p99 (\S+)`)
	observedP99  = regexp.MustCompile(`, p99 (\S+),`)
)

// TestNoHedgingRowAgreesWithVerdict checks that the table's no-hedging
// row is the figure the verdict weighs plans against, and that where it
// differs from the observed p99 the output says why, naming both.
func TestNoHedgingRowAgreesWithVerdict(t *testing.T) {
	for name, input := range map[string]string{
		"5 latencies":                   fiveSamples,
		"a flat upstream":               flat(3000),
		"a 90/10 upstream, tiny budget": fastSlow(4000),
	} {
		t.Run(name, func(t *testing.T) {
			out := output(t, input, config{budget: 0.001, target: 0.99, maxHedges: 2, column: 1})
			row, verdict, observed := noHedgingRow.FindStringSubmatch(out), doNotHedge.FindStringSubmatch(out), observedP99.FindStringSubmatch(out)
			if row == nil || verdict == nil || observed == nil {
				t.Fatalf("want a no-hedging row, an observed p99 and a verdict not to hedge:\n%s", out)
			}
			if row[1] != verdict[1] {
				t.Errorf("no hedging: %s in the table, %s in the verdict\n%s", row[1], verdict[1], out)
			}
			if row[1] != observed[1] && !regexp.MustCompile(`(?m)^.*`+regexp.QuoteMeta(row[1])+`.*observed p99 is `+regexp.QuoteMeta(observed[1])).MatchString(out) {
				t.Errorf("no hedging reads %s, the observed p99 %s, and the output does not say why:\n%s", row[1], observed[1], out)
			}
		})
	}
}

func TestUsageExplainsTheInput(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-h")
	cmd.Env = append(os.Environ(), "HEDGEPLAN_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hedgeplan -h: %v\n%s", err, out)
	}
	for _, want := range []string{
		"usage: hedgeplan [flags] [file]",
		"one latency per line, with its unit",
		"-column",
		"header",
		"are ignored",
		"at least 25/(1-q)",
		"-budget",
		"-plot file",
		"with the plan marked",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("hedgeplan -h does not say %q:\n%s", want, out)
		}
	}
}
