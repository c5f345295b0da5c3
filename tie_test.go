package hedge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/hedge"
)

// outcomeLog records what the budget hears, per attempt.
type outcomeLog struct {
	mu   sync.Mutex
	done map[int]hedge.Outcome
}

func (l *outcomeLog) Allow(context.Context, int) bool { return true }

func (l *outcomeLog) Done(_ context.Context, k int, o hedge.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.done[k]; ok {
		panic(fmt.Sprintf("Done(%d) twice", k))
	}
	l.done[k] = o
}

// Every attempt of a call answers at the same instant, all accepted: one
// wins, and the budget hears Accept for it and Canceled for every other,
// however the answers race. A loser that checked whether it was cancelled
// before the winner was chosen used to report Accept too.
func TestTieLosersReachTheBudgetAsCanceled(t *testing.T) {
	const calls, attempts = 300, hedge.MaxAttemptsLimit
	synctest.Test(t, func(t *testing.T) {
		for i := range calls {
			log := &outcomeLog{done: map[int]hedge.Outcome{}}
			var winner int
			p := hedge.Policy[int]{
				Delay: hedge.Fixed(0), MaxAttempts: attempts, Budget: log,
				Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) { winner = r.Winner }),
			}
			v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				time.Sleep(10 * ms) // every attempt wakes at 10ms
				return hedge.Attempt(ctx), nil
			})
			if err != nil || v != winner {
				t.Fatalf("call %d: Do = %d, %v; the report says attempt %d won", i, v, err, winner)
			}
			synctest.Wait() // the losers are through
			log.mu.Lock()
			for k := range attempts {
				want := hedge.Canceled
				if k == winner {
					want = hedge.Accept
				}
				if got, ok := log.done[k]; !ok || got != want {
					t.Errorf("call %d, won by attempt %d: the budget heard %v for attempt %d, want %v", i, winner, got, k, want)
				}
			}
			log.mu.Unlock()
			if t.Failed() {
				return
			}
		}
	})
}

// slowDone takes a while to hear how an attempt ended, and notes when it
// has, and what went to Discard.
type slowDone struct {
	wait      time.Duration
	start     time.Time
	mu        sync.Mutex
	heard     time.Duration // when Done returned, from start
	discarded []int
}

func (*slowDone) Allow(context.Context, int) bool { return true }

func (s *slowDone) Done(context.Context, int, hedge.Outcome) {
	time.Sleep(s.wait)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard = time.Since(s.start)
}

func (s *slowDone) discard(v int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discarded = append(s.discarded, v)
}

// The winner's Done comes after the decision, and Do waits for it, so
// that the budget is settled when Do returns; but not past the deadline,
// which then ends the call as it would have before the answer, handing
// the value to Discard.
func TestDoWaitsForTheWinnersDoneUntilTheDeadline(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		want    string
		at      time.Duration
		discard []int
	}{
		{"no deadline", 0, "1 <nil>", 60 * ms, nil},
		{"a Timeout during Done", 30 * ms, "0 context deadline exceeded", 30 * ms, []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				b := &slowDone{wait: 50 * ms, start: start}
				p := hedge.Policy[int]{MaxAttempts: 1, Timeout: tt.timeout, Budget: b, Discard: b.discard}
				v, err := hedge.Do(t.Context(), p, func(context.Context) (int, error) {
					time.Sleep(10 * ms)
					return 1, nil
				})
				at := time.Since(start)
				if got := fmt.Sprint(v, " ", err); got != tt.want || at != tt.at {
					t.Errorf("Do = %s at %v, want %s at %v", got, at, tt.want, tt.at)
				}
				time.Sleep(time.Second)
				b.mu.Lock()
				defer b.mu.Unlock()
				if b.heard != 60*ms || fmt.Sprint(b.discarded) != fmt.Sprint(tt.discard) {
					t.Errorf("Done returned at %v, discarded %v; want 60ms and %v", b.heard, b.discarded, tt.discard)
				}
			})
		})
	}
}
