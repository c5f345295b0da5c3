package hedge_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// step scripts one attempt: how long it takes, what it returns, and
// whether it honours its context.
type step struct {
	after  time.Duration
	err    error
	ignore bool // keeps running after its context is cancelled
	panic  any
}

// recorder runs scripted attempts and notes, in virtual time since the
// call began, when each started and when its context was cancelled.
type recorder struct {
	t0       time.Time
	steps    []step
	mu       sync.Mutex
	started  []time.Duration
	canceled map[int]time.Duration
	causes   map[int]error
}

func newRecorder(steps ...step) *recorder {
	return &recorder{t0: time.Now(), steps: steps, canceled: map[int]time.Duration{}, causes: map[int]error{}}
}

func (r *recorder) since() time.Duration { return time.Since(r.t0) }

// fn returns the attempt number as its value.
func (r *recorder) fn(ctx context.Context) (int, error) {
	k := hedge.Attempt(ctx)
	r.mu.Lock()
	r.started = append(r.started, r.since())
	r.mu.Unlock()
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.canceled[k] = r.since()
		r.causes[k] = ctx.Err()
		r.mu.Unlock()
	})
	s := r.steps[k]
	if s.ignore {
		time.Sleep(s.after)
	} else if err := lab.Wait(ctx, s.after); err != nil {
		return k, err
	}
	if s.panic != nil {
		panic(s.panic)
	}
	return k, s.err
}

func (r *recorder) starts() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.started...)
}

func (r *recorder) cancels() map[int]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[int]time.Duration{}
	for k, v := range r.canceled {
		m[k] = v
	}
	return m
}

var errBusy = errors.New("busy")

// outcome is what a test observes of one call.
type outcome struct {
	Value    int
	Err      string
	At       time.Duration
	Starts   []time.Duration
	Canceled map[int]time.Duration
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestSemantics(t *testing.T) {
	p := hedge.Policy[int]{Delay: hedge.Fixed(100 * ms), MaxAttempts: 3}
	tests := []struct {
		name  string
		p     hedge.Policy[int]
		steps []step
		want  outcome
	}{{
		name:  "primary answers before the delay",
		p:     p,
		steps: []step{{after: 50 * ms}, {}, {}},
		want:  outcome{Value: 0, At: 50 * ms, Starts: []time.Duration{0}, Canceled: map[int]time.Duration{}},
	}, {
		name:  "hedge wins and the primary is cancelled",
		p:     p,
		steps: []step{{after: 300 * ms}, {after: 50 * ms}, {}},
		want: outcome{Value: 1, At: 150 * ms, Starts: []time.Duration{0, 100 * ms},
			Canceled: map[int]time.Duration{0: 150 * ms}},
	}, {
		name:  "a retryable error starts the next attempt at once",
		p:     hedge.Policy[int]{Delay: hedge.Fixed(100 * ms), MaxAttempts: 4},
		steps: []step{{after: 30 * ms, err: errBusy}, {after: 500 * ms}, {after: 500 * ms}, {after: 100 * ms}},
		want: outcome{Value: 3, At: 330 * ms, Starts: []time.Duration{0, 30 * ms, 130 * ms, 230 * ms},
			Canceled: map[int]time.Duration{0: 330 * ms, 1: 330 * ms, 2: 330 * ms}},
	}, {
		name:  "every attempt retryable returns the last",
		p:     p,
		steps: []step{{after: 30 * ms, err: errBusy}, {after: 40 * ms, err: errBusy}, {after: 10 * ms, err: fmt.Errorf("last: %w", errBusy)}},
		want: outcome{Value: 2, Err: "last: busy", At: 80 * ms, Starts: []time.Duration{0, 30 * ms, 70 * ms},
			Canceled: map[int]time.Duration{0: 70 * ms, 1: 80 * ms}},
	}, {
		name:  "a terminal error returns at once and cancels the rest",
		p:     p,
		steps: []step{{after: 400 * ms}, {after: 20 * ms, err: hedge.Permanent(errBusy)}, {}},
		want: outcome{Value: 1, Err: "busy", At: 120 * ms, Starts: []time.Duration{0, 100 * ms},
			Canceled: map[int]time.Duration{0: 120 * ms}},
	}, {
		name:  "timeout with a function that ignores its context",
		p:     hedge.Policy[int]{Delay: hedge.Fixed(50 * ms), MaxAttempts: 3, Timeout: 100 * ms},
		steps: []step{{after: time.Second, ignore: true}, {after: time.Second, ignore: true}, {}},
		want: outcome{Err: "context deadline exceeded", At: 100 * ms, Starts: []time.Duration{0, 50 * ms},
			Canceled: map[int]time.Duration{0: 100 * ms, 1: 100 * ms}},
	}, {
		name:  "no hedge when the deadline is too close",
		p:     hedge.Policy[int]{Delay: hedge.Fixed(80 * ms), MaxAttempts: 3, Timeout: 100 * ms},
		steps: []step{{after: 90 * ms}, {}, {}},
		// The winner's context keeps the call's deadline after Do returns.
		want: outcome{Value: 0, At: 90 * ms, Starts: []time.Duration{0}, Canceled: map[int]time.Duration{0: 100 * ms}},
	}, {
		name:  "MaxAttempts 1 never hedges",
		p:     hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), MaxAttempts: 1},
		steps: []step{{after: 500 * ms}},
		want:  outcome{Value: 0, At: 500 * ms, Starts: []time.Duration{0}, Canceled: map[int]time.Duration{}},
	}, {
		name:  "zero delay starts every attempt at once",
		p:     hedge.Policy[int]{Delay: hedge.Fixed(0), MaxAttempts: 3},
		steps: []step{{after: 30 * ms}, {after: 20 * ms}, {after: 10 * ms}},
		want: outcome{Value: 2, At: 10 * ms, Starts: []time.Duration{0, 0, 0},
			Canceled: map[int]time.Duration{0: 10 * ms, 1: 10 * ms}},
	}, {
		name:  "negative delay: no timed hedge, a retryable error still starts the next",
		p:     hedge.Policy[int]{Delay: hedge.Fixed(-1), MaxAttempts: 3},
		steps: []step{{after: 200 * ms, err: errBusy}, {after: 500 * ms}, {}},
		want:  outcome{Value: 1, At: 700 * ms, Starts: []time.Duration{0, 200 * ms}, Canceled: map[int]time.Duration{0: 700 * ms}},
	}, {
		name:  "zero policy hedges once after DefaultDelay",
		p:     hedge.Policy[int]{},
		steps: []step{{after: time.Second}, {after: time.Second}},
		want: outcome{Value: 0, At: time.Second, Starts: []time.Duration{0, hedge.DefaultDelay},
			Canceled: map[int]time.Duration{1: time.Second}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRecorder(tt.steps...)
				v, err := hedge.Do(t.Context(), tt.p, r.fn)
				got := outcome{Value: v, Err: errString(err), At: r.since()}
				// Let the losers finish: nothing may start after Do returned.
				time.Sleep(2 * time.Second)
				synctest.Wait()
				got.Starts, got.Canceled = r.starts(), r.cancels()
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			})
		})
	}
}
