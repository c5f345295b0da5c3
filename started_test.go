package hedge_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// stage is what one attempt meets at a server: it waits in the queue for
// queue (forever if negative), reports its start, then works for work.
// ignore makes it run on when cancelled, as work that cannot be stopped.
type stage struct {
	queue, work time.Duration
	ignore      bool
}

// server plays stages through fn and notes, per attempt, when its fn
// returned and with which cause its context had ended by then.
type server struct {
	stages []stage
	report func(ctx context.Context) // how a start is reported; nil: hedge.Started(ctx)
	t0     time.Time

	mu    sync.Mutex
	ended map[int]string
}

func newServer(stages ...stage) *server {
	return &server{stages: stages, t0: time.Now(), ended: map[int]string{}}
}

func (s *server) fn(ctx context.Context) (int, error) {
	k := hedge.Attempt(ctx)
	st := s.stages[k]
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.ended[k] = fmt.Sprintf("%v %v", time.Since(s.t0), context.Cause(ctx))
	}()
	wait := func(d time.Duration) error {
		if st.ignore {
			time.Sleep(d)
			return nil
		}
		return lab.Wait(ctx, d)
	}
	if st.queue < 0 {
		<-ctx.Done()
		return -1, ctx.Err()
	}
	if err := wait(st.queue); err != nil {
		return -1, err
	}
	if s.report != nil {
		s.report(ctx)
	} else {
		hedge.Started(ctx)
	}
	if err := wait(st.work); err != nil {
		return -1, err
	}
	return k, nil
}

func (s *server) endings() map[int]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

var superseded = hedge.ErrSuperseded.Error()

type probeKey struct{}

// The primary waits in a queue; the first hedge starts at once but works
// slowly; the second waits a while, starts and answers; the third waits.
// Each start cancels the attempts still queued then, at once, and no
// other: the first hedge runs on until the second's answer decides the
// call, and the hedges after a start still come at their delays. The
// start is reported on fn's goroutine, from another one as a transport
// does, or on a context derived from the attempt's.
func TestStartedCancelsOnlyQueuedAttempts(t *testing.T) {
	reporters := map[string]func(ctx context.Context){
		"fn": hedge.Started,
		"another goroutine": func(ctx context.Context) {
			done := make(chan struct{})
			go func() { defer close(done); hedge.Started(ctx) }()
			<-done
		},
		"derived context": func(ctx context.Context) {
			ctx, cancel := context.WithCancel(context.WithValue(ctx, probeKey{}, 1))
			defer cancel()
			hedge.Started(ctx)
		},
	}
	for name, report := range reporters {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServer(
					stage{queue: -1},
					stage{queue: 2 * ms, work: 90 * ms},
					stage{queue: 15 * ms, work: 10 * ms},
					stage{queue: -1},
				)
				s.report = report
				var r hedge.Report
				p := hedge.Policy[int]{
					Delay: hedge.Fixed(10 * ms), MaxAttempts: 4,
					Observer: hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got }),
				}
				v, err := hedge.Do(t.Context(), p, s.fn)
				at := time.Since(s.t0)
				synctest.Wait()
				if v != 2 || err != nil || at != 45*ms {
					t.Errorf("Do = %d, %v at %v; want 2, nil at 45ms", v, err, at)
				}
				want := map[int]string{
					0: "12ms " + superseded, // tied by attempt 1's start
					1: "45ms " + superseded, // started: lost the race
					2: "45ms <nil>",
					3: "35ms " + superseded, // tied by attempt 2's start
				}
				if diff := cmp.Diff(want, s.endings()); diff != "" {
					t.Errorf("attempts' ends (-want +got)\n%s", diff)
				}
				wantReport := hedge.Report{
					Attempts: 4, Winner: 2, Tied: 2, Primary: 12 * ms, Elapsed: 45 * ms,
					Started: [hedge.MaxAttemptsLimit]time.Duration{0, 10 * ms, 20 * ms, 30 * ms},
				}
				if diff := cmp.Diff(wantReport, r); diff != "" {
					t.Errorf("report (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// A start reported twice, after the call, by an attempt that a tie
// cancelled, or with a context that belongs to no call or to a call that
// has ended, cancels nothing.
func TestStartedNoOps(t *testing.T) {
	var ended context.Context // an attempt's context of a call that has ended
	synctest.Test(t, func(t *testing.T) {
		hedge.Do(t.Context(), hedge.Policy[int]{}, func(ctx context.Context) (int, error) {
			ended = ctx
			return 0, nil
		})
	})
	var none context.Context
	tests := []struct {
		name   string
		stages []stage
		// report is how attempt k reports its start.
		report func(ctx context.Context)
		want   map[int]string
		tied   int
	}{{
		name: "twice: the second, after a hedge came, cancels nothing",
		stages: []stage{
			{queue: -1},
			{queue: 1 * ms, work: 29 * ms},
			{queue: 5 * ms, work: 50 * ms},
		},
		report: func(ctx context.Context) {
			hedge.Started(ctx)
			if hedge.Attempt(ctx) == 1 {
				go func() {
					time.Sleep(13 * ms) // at 24ms, attempt 2 queued since 20ms
					hedge.Started(ctx)
				}()
			}
		},
		want: map[int]string{0: "11ms " + superseded, 1: "40ms <nil>", 2: "40ms " + superseded},
		tied: 1,
	}, {
		name: "by a tied attempt that runs on",
		stages: []stage{
			{queue: 15 * ms, work: 5 * ms, ignore: true},
			{queue: 1 * ms, work: 29 * ms},
		},
		want: map[int]string{0: "20ms " + superseded, 1: "40ms <nil>"},
		tied: 1,
	}, {
		name:   "with a context of no call, or of one that ended",
		stages: []stage{{queue: 15 * ms, work: 30 * ms}, {queue: 1 * ms, work: 60 * ms}},
		report: func(context.Context) {
			hedge.Started(context.Background())
			hedge.Started(none)
			hedge.Started(ended)
		},
		want: map[int]string{0: "45ms <nil>", 1: "45ms " + superseded},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServer(tt.stages...)
				s.report = tt.report
				var mu sync.Mutex
				var discarded []int
				var r hedge.Report
				p := hedge.Policy[int]{
					Delay: hedge.Fixed(10 * ms), MaxAttempts: len(tt.stages),
					Discard:  func(v int) { mu.Lock(); discarded = append(discarded, v); mu.Unlock() },
					Observer: hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got }),
				}
				hedge.Do(t.Context(), p, s.fn)
				time.Sleep(time.Second)
				if diff := cmp.Diff(tt.want, s.endings()); diff != "" {
					t.Errorf("attempts' ends (-want +got)\n%s", diff)
				}
				if r.Tied != tt.tied {
					t.Errorf("Report.Tied = %d, want %d", r.Tied, tt.tied)
				}
				// A tied attempt that ran on returned its value: it was
				// not the caller's, so it went to Discard.
				var wantDiscarded []int
				for k, st := range tt.stages {
					if st.ignore {
						wantDiscarded = append(wantDiscarded, k)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(wantDiscarded, discarded); diff != "" {
					t.Errorf("discarded (-want +got)\n%s", diff)
				}
			})
		})
	}
	// Once the call has ended, its winner's context is the caller's to
	// use, and a start reported on it changes nothing.
	synctest.Test(t, func(t *testing.T) {
		var winner context.Context
		hedge.Do(t.Context(), hedge.Policy[int]{}, func(ctx context.Context) (int, error) {
			winner = ctx
			return 0, nil
		})
		hedge.Started(winner)
		if err := winner.Err(); err != nil {
			t.Errorf("the winner's context ended with %v after a start reported once Do returned", err)
		}
	})
}

// A tied attempt that runs on, its work not cancellable, is out of the
// race: when the attempt that started fails and nothing more may start,
// Do returns that failure at once, without waiting for the tied one,
// whose value goes to Discard.
func TestStartedTiedAttemptDoesNotHoldTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var discarded []string
		p := hedge.Policy[string]{
			Delay: hedge.Fixed(10 * ms), MaxAttempts: 2,
			Discard: func(v string) { mu.Lock(); discarded = append(discarded, v); mu.Unlock() },
		}
		v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (string, error) {
			if hedge.Attempt(ctx) == 0 {
				time.Sleep(50 * ms) // queued, then run to the end however cancelled
				return "primary", nil
			}
			hedge.Started(ctx)
			time.Sleep(5 * ms)
			return "hedge", errBusy
		})
		if at := time.Since(start); v != "hedge" || !errors.Is(err, errBusy) || at != 15*ms {
			t.Errorf("Do = %q, %v at %v; want the hedge's failure at 15ms", v, err, at)
		}
		time.Sleep(time.Second)
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]string{"primary"}, discarded); diff != "" {
			t.Errorf("discarded (-want +got)\n%s", diff)
		}
	})
}

// releaseLog is a Budget that grants everything and notes what it hears,
// Release included.
type releaseLog struct {
	mu  sync.Mutex
	log []string
}

func (l *releaseLog) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, s)
}

func (l *releaseLog) Allow(_ context.Context, k int) bool {
	l.note(fmt.Sprint("allow ", k))
	return true
}

func (l *releaseLog) Done(_ context.Context, k int, o hedge.Outcome) {
	l.note(fmt.Sprint("done ", k, " ", o))
}

func (l *releaseLog) Release(_ context.Context, k int) { l.note(fmt.Sprint("release ", k)) }

// A tied attempt did no work: its grant is given back, as for an attempt
// that never ran, not reported as a lost race. The primary, which Allow
// does not charge for, hears Done(Canceled) when it is the one tied.
func TestStartedGivesTiedGrantsBack(t *testing.T) {
	tests := []struct {
		name   string
		stages []stage
		want   []string
	}{{
		name:   "a queued hedge",
		stages: []stage{{queue: 15 * ms, work: 15 * ms}, {queue: -1}},
		want:   []string{"allow 0", "allow 1", "release 1", "done 0 Accept"},
	}, {
		name:   "the queued primary",
		stages: []stage{{queue: -1}, {queue: 5 * ms, work: 15 * ms}},
		want:   []string{"allow 0", "allow 1", "done 0 Canceled", "done 1 Accept"},
	}, {
		name:   "a queued hedge that runs on after the call",
		stages: []stage{{queue: 15 * ms, work: 5 * ms}, {queue: 10 * ms, work: 100 * ms, ignore: true}},
		want:   []string{"allow 0", "allow 1", "done 0 Accept", "release 1"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServer(tt.stages...)
				b := &releaseLog{}
				p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Budget: b}
				hedge.Do(t.Context(), p, s.fn)
				time.Sleep(time.Second)
				b.mu.Lock()
				defer b.mu.Unlock()
				if diff := cmp.Diff(tt.want, b.log); diff != "" {
					t.Errorf("the budget heard (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// A RatioBudget with room for one hedge a second: a hedge that a tie
// cancelled gave its attempt back, so the next call may hedge too; a
// hedge that ran and lost spent it.
func TestStartedRefundsARatioBudget(t *testing.T) {
	tests := []struct {
		name   string
		stages []stage
		want   int // attempts of the second call
	}{
		{"tied", []stage{{queue: 15 * ms, work: 15 * ms}, {queue: -1}}, 2},
		{"lost", []stage{{queue: 0, work: 30 * ms}, {queue: 0, work: 90 * ms}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &hedge.RatioBudget{Ratio: 0.001, MinPerSecond: 1, Window: time.Second} // a hedge a second; calls fund next to none
				var r hedge.Report
				p := hedge.Policy[int]{
					Delay: hedge.Fixed(10 * ms), Budget: b,
					Observer: hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got }),
				}
				hedge.Do(t.Context(), p, newServer(tt.stages...).fn)
				if r.Attempts != 2 {
					t.Fatalf("the first call started %d attempts, want 2", r.Attempts)
				}
				synctest.Wait()
				hedge.Do(t.Context(), p, newServer(tt.stages...).fn)
				if r.Attempts != tt.want {
					t.Errorf("the second call started %d attempts, want %d", r.Attempts, tt.want)
				}
				time.Sleep(time.Second)
			})
		})
	}
}

// A WinRateBudget that holds credit for one hedge and learns from the
// last hedge alone: a hedge that a tie cancelled did not lose a race, so
// every call may hedge; hedges that ran and lost stop the next ones.
func TestStartedIsNoLostRaceForAWinRateBudget(t *testing.T) {
	tests := []struct {
		name   string
		stages []stage
		want   []int // attempts of each call
	}{
		{"tied", []stage{{queue: 15 * ms, work: 15 * ms}, {queue: -1}}, []int{2, 2, 2, 2}},
		{"lost", []stage{{queue: 0, work: 30 * ms}, {queue: 0, work: 90 * ms}}, []int{2, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &hedge.WinRateBudget{Burst: 1, Samples: 1, Probe: 0.001}
				var got []int
				p := hedge.Policy[int]{
					Delay: hedge.Fixed(10 * ms), Budget: b,
					Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) { got = append(got, r.Attempts) }),
				}
				for range tt.want {
					hedge.Do(t.Context(), p, newServer(tt.stages...).fn)
					time.Sleep(time.Second) // every attempt has ended
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("attempts per call (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// learnLog is a fixed delay that notes what its Learner hears.
type learnLog struct {
	hedge.Delay
	heard []string
}

func (l *learnLog) Learn(_ context.Context, primary time.Duration, complete bool) {
	l.heard = append(l.heard, fmt.Sprint(primary, " ", complete))
}

// A tied primary had waited in a queue until the tie, and would have
// taken longer: the Learner hears that as a lower bound, not the time
// until the decision.
func TestStartedTiedPrimaryIsALowerBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &learnLog{Delay: hedge.Fixed(10 * ms)}
		var r hedge.Report
		p := hedge.Policy[int]{
			Delay:    d,
			Observer: hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got }),
		}
		hedge.Do(t.Context(), p, newServer(stage{queue: -1}, stage{queue: 2 * ms, work: 20 * ms}).fn)
		if diff := cmp.Diff([]string{"12ms false"}, d.heard); diff != "" {
			t.Errorf("the Learner heard (-want +got)\n%s", diff)
		}
		if r.Primary != 12*ms || r.PrimaryAnswered || r.Tied != 1 {
			t.Errorf("Report: Primary %v, PrimaryAnswered %v, Tied %d; want 12ms, false, 1", r.Primary, r.PrimaryAnswered, r.Tied)
		}
	})
}

// A tied attempt that panics still reaches the caller with its panic, as
// any attempt's panic does before the decision.
func TestStartedTiedAttemptPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms)}
		defer func() {
			pe, ok := recover().(*hedge.PanicError)
			if !ok || pe.Attempt != 0 || pe.Value != "queued" {
				t.Errorf("Do panicked with %v, want attempt 0's panic", pe)
			}
		}()
		hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			if hedge.Attempt(ctx) == 0 {
				<-ctx.Done()
				panic("queued")
			}
			hedge.Started(ctx)
			return 1, lab.Wait(ctx, time.Second)
		})
		t.Error("Do returned")
	})
}

// grantLog is a budget with a Release method that counts, per attempt, what it hears after
// granting it.
type grantLog struct {
	mu    sync.Mutex
	heard map[int]int // Done or Release calls per attempt
}

func (g *grantLog) Allow(context.Context, int) bool { return true }

func (g *grantLog) Done(_ context.Context, k int, _ hedge.Outcome) { g.hear(k) }

func (g *grantLog) Release(_ context.Context, k int) { g.hear(k) }

func (g *grantLog) hear(k int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heard[k]++
}

// counts is a copy of what the budget heard, read under its lock: a tied
// attempt's Release may run on a goroutine of its own.
func (g *grantLog) counts() map[int]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.heard)
}

// Every attempt of a call starts at one instant and reports its start at
// once, in whatever order the goroutines run, and answers or is tied in
// the same instant (a tie may come before an attempt's fn ran at all):
// whatever the order, Do returns one attempt's value, every other value
// fn returned goes to Discard exactly once, and the budget hears of
// every attempt exactly once.
func TestStartedRacesWithAnswers(t *testing.T) {
	const calls, attempts = 300, 4
	synctest.Test(t, func(t *testing.T) {
		tied := 0
		for i := range calls {
			var mu sync.Mutex
			var discarded, produced []int
			b := &grantLog{heard: map[int]int{}}
			var r hedge.Report
			p := hedge.Policy[int]{
				Delay: hedge.Fixed(0), MaxAttempts: attempts, Budget: b,
				Discard:  func(v int) { mu.Lock(); discarded = append(discarded, v); mu.Unlock() },
				Observer: hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got }),
			}
			v, err := hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				switch {
				case i%3 == 2:
					// Only the primary reports a start, once every attempt
					// is in flight: the others are tied, whatever the order.
					if hedge.Attempt(ctx) == 0 {
						time.Sleep(ms)
						hedge.Started(ctx)
					}
				case i%2 == 0:
					hedge.Started(ctx)
				default:
					go hedge.Started(ctx) // as a transport does, on a goroutine of its own
				}
				time.Sleep(10 * ms) // runs on when tied: the work cannot be stopped
				mu.Lock()
				produced = append(produced, hedge.Attempt(ctx))
				mu.Unlock()
				return hedge.Attempt(ctx), nil
			})
			time.Sleep(time.Second)
			mu.Lock()
			all := append([]int{v}, discarded...)
			slices.Sort(all)
			slices.Sort(produced)
			if err != nil || v != r.Winner || !slices.Equal(all, produced) {
				t.Fatalf("call %d: Do = %d, %v, report's winner %d, discarded %v, produced %v", i, v, err, r.Winner, discarded, produced)
			}
			mu.Unlock()
			if diff := cmp.Diff(map[int]int{0: 1, 1: 1, 2: 1, 3: 1}, b.counts()); diff != "" {
				t.Fatalf("call %d: the budget heard, per attempt (-want +got)\n%s", i, diff)
			}
			tied += r.Tied
		}
		if tied == 0 {
			t.Errorf("no attempt was tied in %d calls", calls)
		}
	})
}
