package hedge_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

func TestTokenBucket(t *testing.T) {
	const (
		a = hedge.Accept
		r = hedge.Retryable
		x = hedge.Terminal
		c = hedge.Canceled
	)
	repeat := func(o hedge.Outcome, n int) []hedge.Outcome {
		s := make([]hedge.Outcome, n)
		for i := range s {
			s[i] = o
		}
		return s
	}
	type state struct {
		Tokens float64
		Allow  bool
	}
	tests := []struct {
		name      string
		max       int
		ratio     float64
		outcomes  []hedge.Outcome // reported as Done(k, o), k cycling 0, 1, 2
		want      state
		wantFloat bool // what the same sum in float64 would allow
	}{
		{"starts full", 10, 0.1, nil, state{10, true}, true},
		{"a failure of any attempt costs a token", 10, 0.1, []hedge.Outcome{r, r, r}, state{7, true}, true},
		{"terminal and cancelled change nothing", 10, 0.1, []hedge.Outcome{r, x, c, x, c}, state{9, true}, true},
		{"half left refuses: the threshold is strict", 10, 0.1, repeat(r, 5), state{5, false}, false},
		{"six failures, five successes at 0.2: exactly 5, refused", 10, 0.2, append(repeat(r, 6), repeat(a, 5)...), state{5, false}, true},
		{"never below empty", 4, 0.5, repeat(r, 10), state{0, false}, false},
		{"never above full", 4, 0.5, append(repeat(r, 1), repeat(a, 10)...), state{4, true}, true},
		{"refills in thousandths", 3, 0.001, append(repeat(r, 2), repeat(a, 501)...), state{1.501, true}, true},
		{"odd size: 2.5 of 5 refuses", 5, 0.5, append(repeat(r, 3), a), state{2.5, false}, false},
		{"odd size: 2.501 of 5 allows", 5, 0.001, append(repeat(r, 3), repeat(a, 501)...), state{2.501, true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &hedge.TokenBucket{MaxTokens: tt.max, TokenRatio: tt.ratio}
			f := float64(tt.max)
			for i, o := range tt.outcomes {
				b.Done(context.Background(), i%3, o)
				switch o {
				case r:
					f = max(f-1, 0)
				case a:
					f = min(f+tt.ratio, float64(tt.max))
				}
			}
			got := state{b.Tokens(), b.Allow(context.Background(), 1)}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			if !b.Allow(context.Background(), 0) {
				t.Error("Allow(0) = false, want the primary always granted")
			}
			// Shows why the bucket counts in thousandths, not float64.
			if floatAllows := f > float64(tt.max)/2; floatAllows != tt.wantFloat {
				t.Errorf("float64 sum %v allows: %t, test table says %t", f, floatAllows, tt.wantFloat)
			}
		})
	}
}

// Through Do: a retryable primary drains a token, the hedge that wins
// refills tokenRatio, and the primary the win cancelled changes nothing.
func TestTokenBucketThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &hedge.TokenBucket{MaxTokens: 4, TokenRatio: 0.25}
		var got []hedge.Report
		p := hedge.Policy[int]{
			Delay: hedge.Fixed(10 * time.Millisecond), Budget: b,
			Observer: observerFunc(func(r hedge.Report) { got = append(got, r) }),
		}
		failFirst := func(ctx context.Context) (int, error) {
			if hedge.Attempt(ctx) == 0 {
				return 0, errBusy
			}
			return 1, nil
		}
		slowFirst := func(ctx context.Context) (int, error) {
			if hedge.Attempt(ctx) == 0 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 1, nil
		}
		var tokens []float64
		for _, fn := range []func(context.Context) (int, error){failFirst, slowFirst, failFirst, failFirst} {
			hedge.Do(t.Context(), p, fn)
			synctest.Wait()
			tokens = append(tokens, b.Tokens())
		}
		// 4 -1 +0.25; +0.25 (the cancelled primary is free); -1 +0.25;
		// then 2.75 - 1 = 1.75, half or less: the hedge is refused.
		if diff := cmp.Diff([]float64{3.25, 3.5, 2.75, 1.75}, tokens); diff != "" {
			t.Errorf("tokens after each call (-want +got)\n%s", diff)
		}
		if last := got[len(got)-1]; last.Attempts != 1 || last.BudgetRefusals != 1 || last.Outcome != hedge.Retryable {
			t.Errorf("last call: %+v, want the hedge refused and the primary's failure returned", last)
		}
	})
}

// Release changes nothing: Allow took no token, and a hedge that never
// started says nothing about the upstream.
func TestTokenBucketRelease(t *testing.T) {
	ctx := context.Background()
	b := &hedge.TokenBucket{MaxTokens: 4, TokenRatio: 0.5}
	b.Done(ctx, 0, hedge.Retryable)
	for range 10 {
		if b.Allow(ctx, 1) {
			b.Release(ctx, 1)
		}
	}
	if got := b.Tokens(); got != 3 || !b.Allow(ctx, 1) {
		t.Errorf("%v tokens after 10 released hedges, want 3 and hedges granted", got)
	}
}
