package hedge_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

func TestBadInput(t *testing.T) {
	ok := func(context.Context) (int, error) { return 1, nil }
	tests := []struct {
		name string
		p    hedge.Policy[int]
		fn   func(context.Context) (int, error)
		want error
	}{
		{"nil fn", hedge.Policy[int]{}, nil, hedge.ErrNilFunc},
		{"negative MaxAttempts", hedge.Policy[int]{MaxAttempts: -1}, ok, hedge.ErrInvalidPolicy},
		{"MaxAttempts above the limit", hedge.Policy[int]{MaxAttempts: hedge.MaxAttemptsLimit + 1}, ok, hedge.ErrInvalidPolicy},
		{"absurd MaxAttempts", hedge.Policy[int]{MaxAttempts: 1 << 62}, ok, hedge.ErrInvalidPolicy},
		{"negative Timeout", hedge.Policy[int]{Timeout: -time.Second}, ok, hedge.ErrInvalidPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := hedge.Do(context.Background(), tt.p, tt.fn); !errors.Is(err, tt.want) {
				t.Errorf("Do = %v, want %v", err, tt.want)
			}
		})
	}
	// Rejecting a huge MaxAttempts costs a handful of allocations (the
	// error message), nothing in proportion to it.
	huge := hedge.Policy[int]{MaxAttempts: 1 << 62}
	if n := testing.AllocsPerRun(100, func() { hedge.Do(context.Background(), huge, ok) }); n > 8 {
		t.Errorf("rejecting MaxAttempts 1<<62 made %v allocations", n)
	}
}

func TestMaxAttemptsLimitIsAllowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		n := 0
		p := hedge.Policy[int]{Delay: hedge.Fixed(time.Millisecond), MaxAttempts: hedge.MaxAttemptsLimit, Timeout: time.Second}
		_, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			mu.Lock()
			n++
			mu.Unlock()
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if err == nil || n != hedge.MaxAttemptsLimit {
			t.Errorf("Do = %v after %d attempts, want every attempt to fail", err, n)
		}
	})
}

// ledger is a Budget that grants a fixed number of extra attempts and
// records every call Do makes on it.
type ledger struct {
	mu       sync.Mutex
	grants   int
	inflight int // extra attempts granted and not yet done
	log      []string
	wait     time.Duration // how long Allow takes to answer for an extra attempt
	slowDone bool          // Done takes as long, for every attempt
}

func (l *ledger) Allow(_ context.Context, k int) bool {
	if k > 0 && l.wait > 0 {
		time.Sleep(l.wait) // a remote budget: the claim stays open meanwhile
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if k == 0 {
		l.log = append(l.log, "call")
		return true
	}
	if l.grants == 0 {
		l.log = append(l.log, "refuse "+itoa(k))
		return false
	}
	l.grants--
	l.inflight++
	l.log = append(l.log, "allow "+itoa(k))
	return true
}

func (l *ledger) Done(_ context.Context, k int, o hedge.Outcome) {
	if l.slowDone {
		time.Sleep(l.wait)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if k > 0 {
		l.inflight--
	}
	l.log = append(l.log, "done "+itoa(k)+" "+o.String())
}

func itoa(k int) string { return string(rune('0' + k)) }

func TestBudget(t *testing.T) {
	tests := []struct {
		name   string
		grants int
		steps  []step
		want   []string
		report hedge.Report
	}{{
		name:   "a granted hedge wins; the primary is reported cancelled",
		grants: 5,
		steps:  []step{{after: time.Second}, {after: 50 * ms}, {}},
		want:   []string{"call", "allow 1", "done 1 Accept", "done 0 Canceled"},
		report: hedge.Report{Attempts: 2, Started: starts(0, 100*ms), Winner: 1, Primary: 150 * ms, Elapsed: 150 * ms},
	}, {
		name:   "a refused hedge: the primary runs alone",
		grants: 0,
		steps:  []step{{after: time.Second}, {}, {}},
		want:   []string{"call", "refuse 1", "done 0 Accept"},
		report: hedge.Report{Attempts: 1, Winner: 0, Primary: time.Second, PrimaryAnswered: true, BudgetRefusals: 1, Elapsed: time.Second},
	}, {
		name:   "retryable failures drain; the refusal ends the call with the last",
		grants: 1,
		steps:  []step{{after: 10 * ms, err: errBusy}, {after: 10 * ms, err: errBusy}, {}},
		want:   []string{"call", "done 0 Retryable", "allow 1", "done 1 Retryable", "refuse 2"},
		report: hedge.Report{
			Attempts: 2, Started: starts(0, 10*ms), Retry: [hedge.MaxAttemptsLimit]bool{1: true},
			Winner: 1, Outcome: hedge.Retryable,
			Primary: 10 * ms, PrimaryAnswered: true, BudgetRefusals: 1, Elapsed: 20 * ms,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := &ledger{grants: tt.grants}
				var got hedge.Report
				p := hedge.Policy[int]{
					Delay: hedge.Fixed(100 * ms), MaxAttempts: 3, Budget: l,
					Observer: observerFunc(func(r hedge.Report) { got = r }),
				}
				r := newRecorder(tt.steps...)
				hedge.Do(t.Context(), p, r.fn)
				synctest.Wait()
				l.mu.Lock()
				defer l.mu.Unlock()
				if diff := cmp.Diff(tt.want, l.log); diff != "" {
					t.Errorf("budget calls (-want +got)\n%s", diff)
				}
				if l.inflight != 0 {
					t.Errorf("%d permits outlive the call", l.inflight)
				}
				if diff := cmp.Diff(tt.report, got); diff != "" {
					t.Errorf("report (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// starts makes a Report's Started.
func starts(at ...time.Duration) (s [hedge.MaxAttemptsLimit]time.Duration) {
	copy(s[:], at)
	return s
}

// observerFunc is an Observer for tests that do not need the context.
type observerFunc func(hedge.Report)

func (f observerFunc) Observe(_ context.Context, r hedge.Report) { f(r) }

func TestStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s hedge.Stats
		p := hedge.Policy[int]{Delay: hedge.Fixed(100 * ms), MaxAttempts: 3, Timeout: time.Second, Observer: &s}
		for _, steps := range [][]step{
			{{after: 10 * ms}},                        // fast: no hedge
			{{after: time.Second}, {after: 10 * ms}},  // hedge wins
			{{after: 150 * ms}, {after: time.Second}}, // hedged, primary wins
			{{after: 2 * time.Second}, {after: 2 * time.Second}, {after: 2 * time.Second}}, // deadline
		} {
			hedge.Do(t.Context(), p, newRecorder(steps...).fn)
		}
		snap := s.Snapshot()
		want := hedge.Snapshot{Calls: 4, Attempts: 1 + 2 + 2 + 3, Hedged: 3, Failed: 1}
		want.Wins[0], want.Wins[1] = 2, 1
		if diff := cmp.Diff(want, snap); diff != "" {
			t.Errorf("snapshot (-want +got)\n%s", diff)
		}
		if got := [3]float64{snap.HedgeRate(), snap.WinRate(), snap.Amplification()}; got != [3]float64{0.75, 1.0 / 3, 2} {
			t.Errorf("hedge rate, win rate, amplification = %v", got)
		}
	})
}

func TestMockClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := clock.NewMock()
		started := make(chan int, 3)
		p := hedge.Policy[int]{Delay: hedge.Fixed(100 * ms), MaxAttempts: 3, Timeout: time.Second, Clock: mock}
		type res struct {
			v   int
			err error
		}
		done := make(chan res, 1)
		go func() {
			v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				k := hedge.Attempt(ctx)
				started <- k
				if k == 1 {
					return k, nil
				}
				<-ctx.Done()
				return k, ctx.Err()
			})
			done <- res{v, err}
		}()
		synctest.Wait()
		if got := len(started); got != 1 {
			t.Fatalf("%d attempts before the mock clock moved, want 1", got)
		}
		mock.Add(99 * ms)
		synctest.Wait()
		if got := len(started); got != 1 {
			t.Fatalf("%d attempts at 99ms of mock time, want 1", got)
		}
		mock.Add(1 * ms)
		synctest.Wait()
		if got := (res{1, nil}); <-done != got {
			t.Errorf("want attempt 1 to win once the mock reached 100ms")
		}
	})
}

func TestMockClockTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := clock.NewMock()
		p := hedge.Policy[int]{MaxAttempts: 1, Timeout: time.Second, Clock: mock}
		done := make(chan error, 1)
		go func() {
			_, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				<-ctx.Done()
				return 0, ctx.Err()
			})
			done <- err
		}()
		synctest.Wait()
		mock.Add(time.Second)
		synctest.Wait()
		if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Do = %v, want DeadlineExceeded after a second of mock time", err)
		}
	})
}

// With an injected clock, attempts still report a real-time deadline:
// their I/O runs on the real clock.
func TestMockClockReportsRealDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		for _, tt := range []struct {
			name    string
			timeout time.Duration
			want    time.Time
		}{
			{"Timeout", 10 * time.Second, time.Now().Add(10 * time.Second)},
			{"ctx's deadline", 0, time.Now().Add(time.Minute)},
		} {
			p := hedge.Policy[time.Time]{MaxAttempts: 1, Timeout: tt.timeout, Clock: clock.NewMock()}
			got, _ := hedge.Do(parent, p, func(ctx context.Context) (time.Time, error) {
				d, _ := ctx.Deadline()
				return d, nil
			})
			if !got.Equal(tt.want) {
				t.Errorf("%s: attempt deadline %v, want %v", tt.name, got, tt.want)
			}
		}
	})
}
