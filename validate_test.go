package hedge_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/hedge"
)

// fieldCase is a budget with its fields set, and the field its error must
// name: "" when the fields are in range.
type fieldCase struct {
	name   string
	budget hedge.Budget
	field  string
}

// checkFields checks each budget through Policy.Validate and Do: one in
// range passes both; one out of range fails both with one error that
// wraps ErrInvalidPolicy and ErrInvalidBudget and names the field, Do
// calls no fn, and the budget refuses every hedge while granting the
// primary.
func checkFields(t *testing.T, cases []fieldCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			p := hedge.Policy[int]{Budget: tt.budget, MaxAttempts: 1}
			err := p.Validate()
			called := false
			_, doErr := hedge.Do(context.Background(), p, func(context.Context) (int, error) {
				called = true
				return 1, nil
			})
			if tt.field == "" {
				if err != nil || doErr != nil {
					t.Fatalf("Validate: %v, Do: %v; want both nil", err, doErr)
				}
				return
			}
			switch {
			case err == nil:
				t.Fatalf("Validate: nil, want an error naming %s", tt.field)
			case !errors.Is(err, hedge.ErrInvalidPolicy) || !errors.Is(err, hedge.ErrInvalidBudget):
				t.Errorf("Validate: %v, want it to wrap ErrInvalidPolicy and ErrInvalidBudget", err)
			case !strings.Contains(err.Error(), tt.field+" "):
				t.Errorf("Validate: %q, want it to name %s", err, tt.field)
			}
			if doErr == nil || doErr.Error() != err.Error() || called {
				t.Errorf("Do: %v, fn called: %t; want Validate's error %v, and no call", doErr, called, err)
			}
			ctx := context.Background()
			if !tt.budget.Allow(ctx, 0) || tt.budget.Allow(ctx, 1) {
				t.Error("want the primary granted and every hedge refused")
			}
		})
	}
}

func TestRatioBudgetFields(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	r := func(ratio, perSecond float64, window time.Duration) *hedge.RatioBudget {
		return &hedge.RatioBudget{Ratio: ratio, MinPerSecond: perSecond, Window: window}
	}
	const field = "RatioBudget."
	checkFields(t, []fieldCase{
		{"zero", &hedge.RatioBudget{}, ""},
		{"smallest", r(0.001, 0, time.Second), ""},
		{"largest", r(1000, 1e6, time.Minute), ""},
		{"typical", r(0.1, 10, 10*time.Second), ""},
		{"negative ratio", r(-0.1, 10, 10*time.Second), field + "Ratio"},
		{"ratio above 1000", r(1000.5, 10, 10*time.Second), field + "Ratio"},
		{"NaN ratio", r(nan, 10, 10*time.Second), field + "Ratio"},
		{"infinite ratio", r(inf, 10, 10*time.Second), field + "Ratio"},
		{"negative MinPerSecond", r(0.1, -1, 10*time.Second), field + "MinPerSecond"},
		{"NaN MinPerSecond", r(0.1, nan, 10*time.Second), field + "MinPerSecond"},
		{"infinite MinPerSecond", r(0.1, inf, 10*time.Second), field + "MinPerSecond"},
		{"MinPerSecond above 1e6", r(0.1, 2e6, 10*time.Second), field + "MinPerSecond"},
		{"window under a second", r(0.1, 10, time.Second-1), field + "Window"},
		{"negative window", r(0.1, 10, -time.Second), field + "Window"},
		{"window over a minute", r(0.1, 10, time.Minute+time.Second), field + "Window"},
		{"window not in whole seconds", r(0.1, 10, 1500*time.Millisecond), field + "Window"},
	})
}

func TestTokenBucketFields(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	b := func(maxTokens int, ratio float64) *hedge.TokenBucket {
		return &hedge.TokenBucket{MaxTokens: maxTokens, TokenRatio: ratio}
	}
	checkFields(t, []fieldCase{
		{"zero", &hedge.TokenBucket{}, ""},
		{"smallest", b(1, 0.001), ""},
		{"largest", b(1000, 1e300), ""},
		{"ratio rounds up to a thousandth", b(10, 0.0005), ""},
		{"negative tokens", b(-1, 0.1), "TokenBucket.MaxTokens"},
		{"over 1000 tokens", b(1001, 0.1), "TokenBucket.MaxTokens"},
		{"ratio rounds to zero", b(10, 0.0004), "TokenBucket.TokenRatio"},
		{"negative ratio", b(10, -1), "TokenBucket.TokenRatio"},
		{"NaN ratio", b(10, nan), "TokenBucket.TokenRatio"},
		{"infinite ratio", b(10, inf), "TokenBucket.TokenRatio"},
	})
}

func TestInflightLimitFields(t *testing.T) {
	checkFields(t, []fieldCase{
		{"zero", &hedge.InflightLimit{}, ""},
		{"one", &hedge.InflightLimit{Max: 1}, ""},
		{"negative", &hedge.InflightLimit{Max: -1}, "InflightLimit.Max"},
	})
}

func TestBreakerFields(t *testing.T) {
	nan := math.NaN()
	const field = "Breaker."
	checkFields(t, []fieldCase{
		{"zero", &hedge.Breaker{}, ""},
		{"largest", &hedge.Breaker{Threshold: 1, Samples: 1000, Window: time.Hour, Cooldown: time.Hour, Trials: 1000, MaxKeys: 1 << 20}, ""},
		{"smallest", &hedge.Breaker{Threshold: 0.001, Samples: 1, Window: 1, Cooldown: 1, Trials: 1, MaxKeys: 1}, ""},
		{"negative threshold", &hedge.Breaker{Threshold: -0.5}, field + "Threshold"},
		{"threshold above 1", &hedge.Breaker{Threshold: 1.001}, field + "Threshold"},
		{"NaN threshold", &hedge.Breaker{Threshold: nan}, field + "Threshold"},
		{"infinite threshold", &hedge.Breaker{Threshold: math.Inf(1)}, field + "Threshold"},
		{"threshold rounds down to 0", &hedge.Breaker{Threshold: 0.0009}, field + "Threshold"},
		{"negative samples", &hedge.Breaker{Samples: -1}, field + "Samples"},
		{"over 1000 samples", &hedge.Breaker{Samples: 1001}, field + "Samples"},
		{"negative window", &hedge.Breaker{Window: -time.Second}, field + "Window"},
		{"window over an hour", &hedge.Breaker{Window: time.Hour + 1}, field + "Window"},
		{"negative cooldown", &hedge.Breaker{Cooldown: -1}, field + "Cooldown"},
		{"cooldown over an hour", &hedge.Breaker{Cooldown: time.Hour + 1}, field + "Cooldown"},
		{"negative trials", &hedge.Breaker{Trials: -1}, field + "Trials"},
		{"over 1000 trials", &hedge.Breaker{Trials: 1001}, field + "Trials"},
		{"negative MaxKeys", &hedge.Breaker{MaxKeys: -1}, field + "MaxKeys"},
	})
}

func TestWinRateBudgetFields(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	const field = "WinRateBudget."
	checkFields(t, []fieldCase{
		{"zero", &hedge.WinRateBudget{}, ""},
		{"largest", &hedge.WinRateBudget{MinWinRate: 1, Probe: 1, Burst: 1_000_000, Samples: 1000, MaxKeys: 1 << 20}, ""},
		{"smallest", &hedge.WinRateBudget{MinWinRate: 1e-9, Probe: 0.001, Burst: 1, Samples: 1, MaxKeys: 1}, ""},
		{"negative MinWinRate", &hedge.WinRateBudget{MinWinRate: -0.1}, field + "MinWinRate"},
		{"MinWinRate above 1", &hedge.WinRateBudget{MinWinRate: 1.001}, field + "MinWinRate"},
		{"NaN MinWinRate", &hedge.WinRateBudget{MinWinRate: nan}, field + "MinWinRate"},
		{"infinite MinWinRate", &hedge.WinRateBudget{MinWinRate: inf}, field + "MinWinRate"},
		{"negative Probe", &hedge.WinRateBudget{Probe: -0.01}, field + "Probe"},
		{"Probe above 1", &hedge.WinRateBudget{Probe: 1.5}, field + "Probe"},
		{"NaN Probe", &hedge.WinRateBudget{Probe: nan}, field + "Probe"},
		{"infinite Probe", &hedge.WinRateBudget{Probe: inf}, field + "Probe"},
		{"Probe rounds down to 0", &hedge.WinRateBudget{Probe: 0.0009}, field + "Probe"},
		{"negative Burst", &hedge.WinRateBudget{Burst: -1}, field + "Burst"},
		{"Burst above 1e6", &hedge.WinRateBudget{Burst: 1_000_001}, field + "Burst"},
		{"negative Samples", &hedge.WinRateBudget{Samples: -1}, field + "Samples"},
		{"over 1000 Samples", &hedge.WinRateBudget{Samples: 1001}, field + "Samples"},
		{"negative MaxKeys", &hedge.WinRateBudget{MaxKeys: -1}, field + "MaxKeys"},
	})
}

// A composition reports the first budget out of range, and where it is.
func TestAllOfFields(t *testing.T) {
	checkFields(t, []fieldCase{
		{"every budget in range", hedge.AllOf(&hedge.RatioBudget{}, &hedge.Breaker{}), ""},
		{"the second out of range", hedge.AllOf(&hedge.RatioBudget{}, &hedge.InflightLimit{Max: -1}), "InflightLimit.Max"},
		{"nested", hedge.AllOf(&hedge.Breaker{}, hedge.AllOf(&hedge.TokenBucket{MaxTokens: 2000})), "TokenBucket.MaxTokens"},
	})
	err := hedge.Policy[int]{Budget: hedge.AllOf(nil, &hedge.RatioBudget{}, &hedge.InflightLimit{Max: -1})}.Validate()
	if !strings.Contains(err.Error(), "AllOf's budget 2") {
		t.Errorf("Validate: %q, want it to say which of AllOf's arguments it is", err)
	}
}

// The zero value of every budget is ready: it passes Validate, hears every
// outcome without panicking, and grants a hedge once calls have funded it.
func TestBudgetZeroValuesGrant(t *testing.T) {
	for name, b := range map[string]hedge.Budget{
		"RatioBudget":   new(hedge.RatioBudget),
		"TokenBucket":   new(hedge.TokenBucket),
		"InflightLimit": new(hedge.InflightLimit),
		"Breaker":       new(hedge.Breaker),
		"WinRateBudget": new(hedge.WinRateBudget),
	} {
		t.Run(name, func(t *testing.T) {
			if err := (hedge.Policy[int]{Budget: b}).Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			ctx := context.Background()
			for range 10 { // a RatioBudget's default funds a hedge per ten calls
				if !b.Allow(ctx, 0) {
					t.Fatal("Allow(0) = false, want the primary granted")
				}
			}
			if !b.Allow(ctx, 1) {
				t.Fatal("Allow(1) = false after ten calls, want the hedge granted")
			}
			b.Done(ctx, 1, hedge.Accept)
			for _, o := range []hedge.Outcome{hedge.Accept, hedge.Retryable, hedge.Terminal, hedge.Canceled, hedge.Failed, hedge.TimedOut} {
				b.Done(ctx, 0, o)
			}
		})
	}
}

// Policy.Validate names the Policy's own fields, and the settings of the
// delays of this package, as Do reports them.
func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    hedge.Policy[int]
		want string // "" for no error
	}{
		{"zero", hedge.Policy[int]{}, ""},
		{"Auto", hedge.Auto[int](), ""},
		{"largest MaxAttempts", hedge.Policy[int]{MaxAttempts: hedge.MaxAttemptsLimit}, ""},
		{"MaxAttempts above the limit", hedge.Policy[int]{MaxAttempts: 20}, "hedge: invalid policy: Policy.MaxAttempts 20 is above MaxAttemptsLimit 10"},
		{"negative MaxAttempts", hedge.Policy[int]{MaxAttempts: -1}, "hedge: invalid policy: Policy.MaxAttempts -1 is negative"},
		{"negative Timeout", hedge.Policy[int]{Timeout: -time.Second}, "hedge: invalid policy: Policy.Timeout -1s is negative"},
		{"negative Fixed delay", hedge.Policy[int]{Delay: hedge.Fixed(-time.Second)}, ""},
		{"Percentile out of range", hedge.Policy[int]{Delay: &hedge.Percentile{Quantile: 2}}, "Percentile.Quantile"},
		{"Adaptive out of range", hedge.Policy[int]{Delay: &hedge.Adaptive{Load: 3}}, "Adaptive.Load"},
		{"Adaptive budget out of range", hedge.Policy[int]{Budget: &hedge.Adaptive{Load: -1}}, "Adaptive.Load"},
		{"MaxAttempts that cuts an Adaptive's plans", hedge.Policy[int]{Delay: &hedge.Adaptive{}, MaxAttempts: 2}, "MaxAttempts 2 cuts"},
		{"Keyed of a Percentile out of range", hedge.Policy[int]{Delay: &hedge.Keyed{New: func(string) hedge.Delay { return &hedge.Percentile{Quantile: -1} }}}, "Percentile.Quantile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			_, doErr := hedge.Do(context.Background(), tt.p, func(context.Context) (int, error) { return 1, nil })
			if tt.want == "" {
				if err != nil || doErr != nil {
					t.Fatalf("Validate: %v, Do: %v; want both nil", err, doErr)
				}
				return
			}
			if !errors.Is(err, hedge.ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate: %v, want an ErrInvalidPolicy that says %q", err, tt.want)
			}
			if doErr == nil || doErr.Error() != err.Error() {
				t.Errorf("Do: %v, want Validate's error", doErr)
			}
		})
	}
}

// Do reads a budget's fields once, on its first use: a Do on a budget out
// of range fails from its first call, and validation allocates nothing
// per call once the budget is in use.
func TestBudgetCheckedOnce(t *testing.T) {
	b := &hedge.RatioBudget{}
	p := hedge.Policy[int]{Budget: b, MaxAttempts: 1}
	fn := func(context.Context) (int, error) { return 1, nil }
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { p.Validate() }); n != 0 {
		t.Errorf("Validate of a budget in use: %v allocations, want 0", n)
	}
	b.Ratio = -1 // too late: read on first use
	if _, err := hedge.Do(ctx, p, fn); err != nil {
		t.Errorf("Do after the fields changed: %v, want the fields read once", err)
	}
}

// noHedges grants every primary and refuses every hedge: a composition's
// refusing member.
type noHedges struct{}

func (noHedges) Allow(_ context.Context, k int) bool      { return k < 1 }
func (noHedges) Done(context.Context, int, hedge.Outcome) {}

// A retry loop on a budget out of range ends at its first try, with the
// budget's error, and runs nothing.
func TestTriesInvalidBudget(t *testing.T) {
	ran := false
	try := hedge.Tries(context.Background(), &hedge.TokenBucket{TokenRatio: -1}, func(context.Context) (int, error) {
		ran = true
		return 1, nil
	}, nil)
	_, err := try()
	if !errors.Is(err, hedge.ErrInvalidBudget) || !strings.Contains(err.Error(), "TokenBucket.TokenRatio -1") || ran {
		t.Errorf("first try: %v, op ran: %t; want the budget's error and no run", err, ran)
	}
}
