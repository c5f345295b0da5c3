package hedge_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

type stopped struct{ err error }

func (s stopped) Error() string { return "stop: " + s.err.Error() }
func (s stopped) Unwrap() error { return s.err }

func markStop(err error) error { return stopped{err} }

// Tries draws a retry loop's tries on a budget as Do draws its attempts:
// Allow(0), whose answer it ignores, then Allow(k) for each retry, and
// Done(k, o) after every try. A refused retry does not run, and its error,
// marked by stop, wraps ErrRefused and the last try's error.
func TestTriesShareTheBudget(t *testing.T) {
	b := &releasing{}
	refuse := &refusing{releasing: b, from: 2}
	runs := 0
	try := hedge.Tries(context.Background(), refuse, func(context.Context) (int, error) { runs++; return 0, errBusy }, markStop)
	var errs []error
	for range 3 {
		_, err := try()
		errs = append(errs, err)
	}
	want := []string{"allow 0", "done 0 Retryable", "allow 1", "done 1 Retryable", "allow 2"}
	if diff := cmp.Diff(want, b.log); diff != "" {
		t.Errorf("budget heard (-want +got):\n%s", diff)
	}
	if runs != 2 {
		t.Errorf("op ran %d times, want 2: the refused retry must not run", runs)
	}
	var s stopped
	if errs[0] != errBusy || errs[1] != errBusy || !errors.As(errs[2], &s) ||
		!errors.Is(errs[2], hedge.ErrRefused) || !errors.Is(errs[2], errBusy) {
		t.Errorf("errors %v: want busy, busy, then a stopped refusal wrapping busy", errs)
	}
}

// A Permanent error ends the loop: Tries passes it through stop, and the
// budget hears Terminal.
func TestTriesStopOnPermanent(t *testing.T) {
	b := &releasing{}
	try := hedge.Tries(context.Background(), b, func(context.Context) (int, error) { return 0, hedge.Permanent(errBusy) }, markStop)
	_, err := try()
	var s stopped
	if !errors.As(err, &s) || !errors.Is(err, errBusy) {
		t.Errorf("err = %v, want it stopped", err)
	}
	if diff := cmp.Diff([]string{"allow 0", "done 0 Terminal"}, b.log); diff != "" {
		t.Errorf("budget heard (-want +got):\n%s", diff)
	}
}

// refusing is a recording budget that refuses retries from the from-th.
type refusing struct {
	*releasing
	from int
}

func (r *refusing) Allow(ctx context.Context, k int) bool {
	r.releasing.Allow(ctx, k)
	return k < r.from
}

// A retry loop with backoff around Do: with Retryable, each of its tries
// makes Do start a second attempt at once, so four tries send eight
// requests. Failed keeps Do to one attempt a try, and leaves the retrying
// to the loop.
func TestFailedLeavesTheRetryToTheLoop(t *testing.T) {
	for _, tt := range []struct {
		o    hedge.Outcome
		want int
	}{{hedge.Retryable, 8}, {hedge.Failed, 4}} {
		synctest.Test(t, func(t *testing.T) {
			sent := 0
			p := hedge.Policy[int]{Delay: hedge.Fixed(time.Hour), Classify: func(_ int, err error) hedge.Outcome {
				if err != nil {
					return tt.o
				}
				return hedge.Accept
			}}
			for range 4 { // the loop's tries, its backoff left out
				hedge.Do(t.Context(), p, func(context.Context) (int, error) { sent++; return 0, errBusy })
			}
			if sent != tt.want {
				t.Errorf("%v: %d requests for 4 tries, want %d", tt.o, sent, tt.want)
			}
		})
	}
}

// Failed starts nothing at once, but the attempts in flight run on and win.
func TestFailedLetsTheOthersRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.Policy[string]{Delay: hedge.Fixed(10 * ms), Classify: func(_ string, err error) hedge.Outcome {
			if err != nil {
				return hedge.Failed
			}
			return hedge.Accept
		}}
		var o hedge.Outcome
		p.Observer = observerFunc(func(r hedge.Report) { o = r.Outcome })
		start := time.Now()
		v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (string, error) {
			if hedge.Attempt(ctx) == 0 {
				time.Sleep(20 * ms)
				return "", errBusy // the hedge, started at 10ms, is still running
			}
			time.Sleep(30 * ms)
			return fmt.Sprint("hedge ", hedge.Attempt(ctx)), nil
		})
		if at := time.Since(start); v != "hedge 1" || o != hedge.Accept || err != nil || at != 40*ms {
			t.Errorf("Do = %q, %v, outcome %v at %v; want hedge 1 accepted at 40ms", v, err, o, at)
		}
	})
}
