package hedge_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// retryLoop is the loop of a retry library, its backoff left out: it calls
// try up to max times, until a nil error or one marked by markStop.
func retryLoop[T any](try func() (T, error), max int) (v T, tries int, err error) {
	for tries < max {
		tries++
		if v, err = try(); err == nil || errors.As(err, new(stopped)) {
			break
		}
	}
	return v, tries, err
}

// A retry loop around Do on one RatioBudget of 0.1 counts each call once:
// 100 calls deposit 10 attempts, and send 10 hedges. Counted by the loop
// and by Do both, the calls deposited 20, and sent 20 hedges.
func TestTriesCountACallOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		ratio := &hedge.RatioBudget{Ratio: 0.1, Window: 10 * time.Second}
		hedges := 0
		p := hedge.Policy[int]{
			Delay: hedge.Fixed(10 * ms), Budget: ratio,
			Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) { hedges += r.Attempts - 1 }),
		}
		slowPrimary := func(ctx context.Context) (int, error) {
			if hedge.Attempt(ctx) == 0 {
				time.Sleep(50 * ms) // every call wants its hedge
			}
			return 1, nil
		}
		for range 100 {
			try := hedge.Tries(ctx, ratio, func(ctx context.Context) (int, error) {
				return hedge.Do(ctx, p, slowPrimary)
			}, markStop)
			if _, _, err := retryLoop(try, 3); err != nil {
				t.Fatal(err)
			}
		}
		if hedges != 10 {
			t.Errorf("100 calls sent %d hedges on a ratio of 0.1, want 10", hedges)
		}
		time.Sleep(time.Second) // the primaries that lost
	})
}

// One failed request costs a TokenBucket one token, whichever of the loop
// and Do counts it; its retries cost one each, until the bucket is down to
// half and refuses them.
func TestTriesChargeAFailedRequestOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		bucket := &hedge.TokenBucket{MaxTokens: 10, TokenRatio: 0.1}
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Budget: bucket}
		down := func(context.Context) (int, error) { return 0, errBusy }
		try := hedge.Tries(ctx, bucket, func(ctx context.Context) (int, error) { return hedge.Do(ctx, p, down) }, markStop)
		try()
		if got := bucket.Tokens(); got != 9 {
			t.Errorf("after one failed request: %v tokens, want 9", got)
		}
		_, tries, err := retryLoop(try, 10)
		if got := bucket.Tokens(); got != 5 || tries != 5 || !errors.Is(err, hedge.ErrRefused) {
			t.Errorf("then %d tries: %v, %v tokens; want 5 tries, the last refused, and 5 tokens", tries, err, got)
		}
	})
}

// A retry loop spreads its tries over replicas as hedges are spread:
// Attempt continues across the loop's tries, in Do and outside it.
func TestTriesSpreadOverReplicas(t *testing.T) {
	type trace struct {
		Attempts []int
		At       []time.Duration
		V        string
	}
	replicas := []string{"a", "b", "c", "d", "e"}
	tests := []struct {
		name  string
		delay time.Duration
		up    string // the one replica that answers
		doOp  bool   // op calls Do
		want  trace
	}{
		{"one attempt a try", time.Hour, "c", true, trace{[]int{0, 1, 2}, []time.Duration{0, 15 * ms, 30 * ms}, "c"}},
		{"a hedge in each try", 10 * ms, "d", true,
			trace{[]int{0, 1, 2, 3}, []time.Duration{0, 10 * ms, 25 * ms, 35 * ms}, "d"}},
		{"op without Do", time.Hour, "c", false, trace{[]int{0, 1, 2}, []time.Duration{0, 15 * ms, 30 * ms}, "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var (
					mu  sync.Mutex
					got trace
				)
				fetch := func(ctx context.Context) (string, error) {
					k := hedge.Attempt(ctx)
					mu.Lock()
					got.Attempts = append(got.Attempts, k)
					got.At = append(got.At, time.Since(start))
					mu.Unlock()
					time.Sleep(15 * ms)
					if r := replicas[k%len(replicas)]; r == tt.up {
						return r, nil
					}
					return "", errBusy
				}
				p := hedge.Policy[string]{Delay: hedge.Fixed(tt.delay)}
				op := fetch
				if tt.doOp {
					op = func(ctx context.Context) (string, error) { return hedge.Do(ctx, p, fetch) }
				}
				v, _, err := retryLoop(hedge.Tries(t.Context(), nil, op, markStop), 5)
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the losers are through
				mu.Lock()
				defer mu.Unlock()
				got.V = v
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}

// What the budget hears from a loop around Do: the loop asks for each try,
// Do reports every attempt, the tries' included, under the loop's
// numbers. A Do on a budget of its own counts each try as a call of its
// own, and the loop reports its tries to its budget itself.
func TestTriesHandTheCountToDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		fetch := func(ctx context.Context) (int, error) {
			switch hedge.Attempt(ctx) {
			case 0:
				time.Sleep(20 * ms) // its hedge starts at 10ms
				return 0, errBusy
			case 1:
				return 0, errBusy
			}
			return 2, nil
		}
		loop := &releasing{}
		p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: loop}
		op := func(ctx context.Context) (int, error) { return hedge.Do(ctx, p, fetch) }
		if v, tries, err := retryLoop(hedge.Tries(ctx, loop, op, markStop), 5); v != 2 || tries != 2 || err != nil {
			t.Errorf("loop = %d, %v after %d tries; want 2 after 2", v, err, tries)
		}
		want := []string{"allow 0", "allow 1", "done 1 Retryable", "done 0 Retryable", "allow 2", "done 2 Accept"}
		if diff := cmp.Diff(want, loop.log); diff != "" {
			t.Errorf("one budget: it heard (-want +got)\n%s", diff)
		}

		loop, own := &releasing{}, &releasing{}
		p.Budget = own
		if v, tries, err := retryLoop(hedge.Tries(ctx, loop, op, markStop), 5); v != 2 || tries != 2 || err != nil {
			t.Errorf("loop = %d, %v after %d tries; want 2 after 2", v, err, tries)
		}
		want = []string{"allow 0", "done 0 Retryable", "allow 2", "done 2 Accept"}
		if diff := cmp.Diff(want, loop.log); diff != "" {
			t.Errorf("two budgets: the loop's heard (-want +got)\n%s", diff)
		}
		want = []string{"allow 0", "allow 1", "done 1 Retryable", "done 0 Retryable", "allow 0", "done 0 Accept"}
		if diff := cmp.Diff(want, own.log); diff != "" {
			t.Errorf("two budgets: Do's heard (-want +got)\n%s", diff)
		}
	})
}

// The loop ends on what Do says is final: a terminal result, and an error
// that the policy's classifier accepted (a 404 that is an answer). A call
// that Do could not run (bad input) is terminal too, and its grant is
// given back.
func TestTriesEndOnDosVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		errNotFound := errors.New("not found")
		tests := []struct {
			name string
			p    hedge.Policy[int]
			err  error
			log  []string
		}{
			{"terminal", hedge.Policy[int]{}, hedge.Permanent(errBusy), []string{"allow 0", "done 0 Terminal"}},
			{"an accepted error", hedge.Policy[int]{Classify: func(_ int, err error) hedge.Outcome {
				if errors.Is(err, errNotFound) {
					return hedge.Accept
				}
				return hedge.Classify(0, err)
			}}, errNotFound, []string{"allow 0", "done 0 Accept"}},
			{"bad input", hedge.Policy[int]{MaxAttempts: -1}, nil, []string{"allow 0", "release 0"}},
		}
		for _, tt := range tests {
			b := &releasing{}
			runs := 0
			op := func(ctx context.Context) (int, error) {
				runs++
				return hedge.Do(ctx, tt.p, func(context.Context) (int, error) { return 0, tt.err })
			}
			_, tries, err := retryLoop(hedge.Tries(ctx, b, op, markStop), 5)
			if !errors.As(err, new(stopped)) || tries != 1 || runs != 1 {
				t.Errorf("%s: %v after %d tries; want it stopped after 1", tt.name, err, tries)
			}
			if diff := cmp.Diff(tt.log, b.log); diff != "" {
				t.Errorf("%s: the budget heard (-want +got)\n%s", tt.name, diff)
			}
		}
	})
}
