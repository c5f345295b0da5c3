package hedge_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// A key of an Adaptive whose primaries spend a third or more of their
// time waiting for a worker, as their start signals tell it, sends no
// hedge while an attempt of the call has started: the hedge would race
// running work, and whichever copy lost, both ran. A hedge due while the
// primary still waits goes out, as a tie makes it cost nothing. A key
// whose primaries start at once hedges running work, as a key that hears
// no start signal does.
func TestAdaptiveTiedHoldsHedgesAgainstRunningWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiting float64 // the share of its latency a primary waits before its start
		running hedge.Report
	}{
		{"primaries start at once", 0, hedge.Report{Attempts: 2, Winner: 1}},
		{"primaries wait two thirds of their time", 2.0 / 3, hedge.Report{Attempts: 1, Winner: 0, BudgetRefusals: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// A clock that stands still: calls one after another are no surge.
				a := &hedge.Adaptive{Clock: clock.NewMock()}
				ctx := context.Background()
				settle(a, ctx)
				var r hedge.Report
				p := hedge.Policy[int]{Delay: a, Budget: a, Observer: hedge.ObserverFunc(func(_ context.Context, got hedge.Report) {
					r = got
				})}
				calls90Tied(t, p, tc.waiting, 0, 1000)
				plan := savedPlan(t, a, ctx)
				// The primary waits (forever if negative), reports its
				// start, and works; a hedge starts at once and answers
				// after a millisecond.
				probe := func(queue time.Duration) hedge.Report {
					r = hedge.Report{}
					hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
						k := hedge.Attempt(ctx)
						if k > 0 {
							hedge.Started(ctx)
							return k, lab.Wait(ctx, ms)
						}
						if queue < 0 {
							<-ctx.Done()
							return -1, ctx.Err()
						}
						if err := lab.Wait(ctx, queue); err != nil {
							return -1, err
						}
						hedge.Started(ctx)
						return k, lab.Wait(ctx, 10*plan.Delay)
					})
					synctest.Wait()
					return hedge.Report{Attempts: r.Attempts, Winner: r.Winner, BudgetRefusals: r.BudgetRefusals}
				}
				if diff := cmp.Diff(tc.running, probe(0)); diff != "" {
					t.Errorf("a primary that started at once (-want +got)\n%s", diff)
				}
				if diff := cmp.Diff(hedge.Report{Attempts: 2, Winner: 1}, probe(-1)); diff != "" {
					t.Errorf("a primary that waits (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// A start signal reaches the client a round trip after the request left
// it, queue or no queue. A key whose servers start every request at once,
// but whose latency is mostly that round trip (here 20 ms of the 90/10
// upstream's 20–45 ms), waits for no worker: it still hedges a primary
// whose execution turns slow.
func TestAdaptiveTiedRoundTripIsNoQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt = 20 * ms
		a := &hedge.Adaptive{Clock: clock.NewMock()}
		ctx := context.Background()
		settle(a, ctx)
		save(a, ctx)
		var r hedge.Report
		p := hedge.Policy[int]{Delay: a, Budget: a, Observer: hedge.ObserverFunc(func(_ context.Context, got hedge.Report) {
			r = got
		})}
		for i := range 600 {
			hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				d := lab.FastSlow.Latency(i, hedge.Attempt(ctx))
				if err := lab.Wait(ctx, rtt); err != nil { // the request, and the signal back
					return -1, err
				}
				hedge.Started(ctx)
				return i, lab.Wait(ctx, d-rtt)
			})
			synctest.Wait()
		}
		plan := savedPlan(t, a, ctx)
		r = hedge.Report{}
		hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			if err := lab.Wait(ctx, rtt); err != nil {
				return -1, err
			}
			hedge.Started(ctx)
			if k := hedge.Attempt(ctx); k > 0 {
				return k, lab.Wait(ctx, ms)
			}
			return 0, lab.Wait(ctx, 10*plan.Delay) // an execution turned slow
		})
		synctest.Wait()
		want := hedge.Report{Attempts: 2, Winner: 1}
		if diff := cmp.Diff(want, hedge.Report{Attempts: r.Attempts, Winner: r.Winner, BudgetRefusals: r.BudgetRefusals}); diff != "" {
			t.Errorf("a slow execution behind a round trip (-want +got)\n%s", diff)
		}
	})
}

// calls90Tied makes calls [from, to) of the 90/10 upstream through p, one
// after another, in a synctest bubble; each primary reports its start
// once it has waited the share waiting of its latency, and each hedge at
// once.
func calls90Tied(t *testing.T, p hedge.Policy[int], waiting float64, from, to int) {
	for i := from; i < to; i++ {
		hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			d := lab.FastSlow.Latency(i, hedge.Attempt(ctx))
			var queue time.Duration
			if hedge.Attempt(ctx) == 0 {
				queue = time.Duration(waiting * float64(d))
			}
			if err := lab.Wait(ctx, queue); err != nil {
				return -1, err
			}
			hedge.Started(ctx)
			return i, lab.Wait(ctx, d-queue)
		})
		synctest.Wait()
	}
}

// An attempt owed to a retryable result is asked for as always, also
// once the key queues and another attempt of the call runs: here a hedge
// sent against the running primary before the key learned that calls
// queue, and turned away by its server after it did.
func TestAdaptiveQueueingKeyStillRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &hedge.Adaptive{Clock: clock.NewMock()}
		ctx := context.Background()
		settle(a, ctx)
		p := hedge.Policy[int]{Delay: a, Budget: a}
		calls90Tied(t, p, 0, 0, 1000)
		savedPlan(t, a, ctx)
		var r hedge.Report
		probe := p
		probe.Observer = hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got })
		turnAway := make(chan struct{})
		sent := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			hedge.Do(t.Context(), probe, func(ctx context.Context) (int, error) {
				switch k := hedge.Attempt(ctx); k {
				case 0: // starts at once, and works for an hour
					hedge.Started(ctx)
					return k, lab.Wait(ctx, time.Hour)
				case 1: // waits, and is turned away
					close(sent)
					<-turnAway
					return -1, errors.New("turned away")
				default:
					hedge.Started(ctx)
					return k, nil
				}
			})
		}()
		<-sent
		calls90Tied(t, p, 2.0/3, 1000, 2000) // the key learns that calls queue
		close(turnAway)
		<-done
		want := hedge.Report{Attempts: 3, Winner: 2}
		if diff := cmp.Diff(want, hedge.Report{Attempts: r.Attempts, Winner: r.Winner, BudgetRefusals: r.BudgetRefusals}); diff != "" {
			t.Errorf("report (-want +got)\n%s", diff)
		}
	})
}

// A transport may wrap one of an Adaptive's two roles in a hook of its
// own, as hedgehttp's Delay adds pushback to a route's Adaptive and
// hedgegrpc's Budget adds the token bucket to a method's: the Adaptive
// in the other role still learns where its primaries' time goes, and
// holds hedges against started work back while they queue.
func TestAdaptiveTiedThroughAWrapper(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy func(a *hedge.Adaptive) hedge.Policy[int]
	}{
		{"Delay wrapped", func(a *hedge.Adaptive) hedge.Policy[int] {
			return hedge.Policy[int]{Delay: wrappedDelay{a}, Budget: a}
		}},
		{"Budget wrapped", func(a *hedge.Adaptive) hedge.Policy[int] {
			return hedge.Policy[int]{Delay: a, Budget: wrappedBudget{a}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &hedge.Adaptive{Clock: clock.NewMock()}
				ctx := context.Background()
				settle(a, ctx)
				p := tc.policy(a)
				var r hedge.Report
				p.Observer = hedge.ObserverFunc(func(_ context.Context, got hedge.Report) { r = got })
				calls90Tied(t, p, 2.0/3, 0, 1000)
				plan := savedPlan(t, a, ctx)
				r = hedge.Report{}
				hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
					hedge.Started(ctx)
					if k := hedge.Attempt(ctx); k > 0 {
						return k, lab.Wait(ctx, ms)
					}
					return 0, lab.Wait(ctx, 10*plan.Delay)
				})
				synctest.Wait()
				want := hedge.Report{Attempts: 1, Winner: 0, BudgetRefusals: 1}
				if diff := cmp.Diff(want, hedge.Report{Attempts: r.Attempts, Winner: r.Winner, BudgetRefusals: r.BudgetRefusals}); diff != "" {
					t.Errorf("a primary that started at once (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// wrappedDelay is an Adaptive's Delay and Learner behind a hook of a
// transport's own.
type wrappedDelay struct{ a *hedge.Adaptive }

func (w wrappedDelay) Next(ctx context.Context, k int) time.Duration { return w.a.Next(ctx, k) }
func (w wrappedDelay) Learn(ctx context.Context, primary time.Duration, complete bool) {
	w.a.Learn(ctx, primary, complete)
}

// wrappedBudget is an Adaptive's Budget behind a hook of a transport's
// own.
type wrappedBudget struct{ a *hedge.Adaptive }

func (w wrappedBudget) Allow(ctx context.Context, k int) bool { return w.a.Allow(ctx, k) }
func (w wrappedBudget) Done(ctx context.Context, k int, o hedge.Outcome) {
	w.a.Done(ctx, k, o)
}
func (w wrappedBudget) Release(ctx context.Context, k int) { w.a.Release(ctx, k) }
