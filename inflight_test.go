package hedge_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

func TestInflightLimit(t *testing.T) {
	l := &hedge.InflightLimit{Max: 2}
	var got []bool
	got = append(got, l.Allow(context.Background(), 0), l.Allow(context.Background(), 1), l.Allow(context.Background(), 2), l.Allow(context.Background(), 1)) // the primary takes no permit
	l.Done(context.Background(), 0, hedge.Accept)                                                                                                             // nor returns one
	got = append(got, l.Allow(context.Background(), 1))
	l.Done(context.Background(), 2, hedge.Terminal)
	got = append(got, l.Allow(context.Background(), 1), l.Allow(context.Background(), 1))
	if diff := cmp.Diff([]bool{true, true, true, false, false, true, false}, got); diff != "" {
		t.Errorf("grants (-want +got)\n%s", diff)
	}
	for range 5 {
		l.Done(context.Background(), 1, hedge.Canceled) // more returns than permits out
	}
	if n := l.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after every permit came back, want 0", n)
	}
	if n := askHedges(l, 3); n != 2 {
		t.Errorf("%d of 3 hedges granted after stray returns, want 2: they must not raise the cap", n)
	}

	if n := askHedges(&hedge.InflightLimit{}, 20); n != 10 {
		t.Errorf("the zero limit granted %d of 20 hedges, want its default 10", n)
	}
}

// Do returns every permit as soon as its attempt's function returns,
// however the attempt or the call ended.
func TestInflightLimitThroughDo(t *testing.T) {
	slow := func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	answer := func(ctx context.Context) (int, error) { return hedge.Attempt(ctx), nil }
	tests := []struct {
		name           string
		policy         hedge.Policy[int]
		primary, hedge func(context.Context) (int, error)
		want           string // how Do ended
	}{
		{"the hedge wins; the cancelled primary holds no permit", hedge.Policy[int]{},
			slow, answer, "returned"},
		{"the primary wins; the hedge is cancelled", hedge.Policy[int]{},
			func(context.Context) (int, error) { time.Sleep(20 * ms); return 0, nil }, slow, "returned"},
		{"the hedge fails retryably; its permit passes to the next", hedge.Policy[int]{MaxAttempts: 3},
			slow, func(context.Context) (int, error) { return 0, errBusy }, "returned"},
		{"the hedge panics", hedge.Policy[int]{},
			slow, func(context.Context) (int, error) { panic(errBusy) }, "panicked"},
		{"the hedge calls runtime.Goexit", hedge.Policy[int]{},
			slow, func(context.Context) (int, error) { runtime.Goexit(); return 0, nil }, "goexit"},
		{"the deadline passes", hedge.Policy[int]{Timeout: 50 * ms}, slow, slow, "returned"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := &hedge.InflightLimit{Max: 1}
				p := tt.policy
				p.Delay, p.Budget = hedge.Fixed(10*ms), l
				var held []int // permits taken while each hedge ran
				fn := func(ctx context.Context) (int, error) {
					switch k := hedge.Attempt(ctx); k {
					case 0:
						return tt.primary(ctx)
					case 1:
						held = append(held, l.InFlight())
						return tt.hedge(ctx)
					default:
						held = append(held, l.InFlight())
						return answer(ctx)
					}
				}
				got := "goexit"
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() {
						if recover() != nil {
							got = "panicked"
						}
					}()
					hedge.Do(t.Context(), p, fn)
					got = "returned"
				}()
				<-done
				synctest.Wait() // every function has returned
				if got != tt.want {
					t.Errorf("Do %s, want %s", got, tt.want)
				}
				for k, n := range held {
					if n != 1 {
						t.Errorf("hedge %d ran with %d permits taken, want 1", k+1, n)
					}
				}
				if n := l.InFlight(); n != 0 {
					t.Errorf("%d permits still taken once every function returned", n)
				}
			})
		})
	}
}

// Two calls share one permit: the first call's hedge takes it, so the
// second call's hedge is refused until it comes back.
func TestInflightLimitSharedByCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &hedge.InflightLimit{Max: 1}
		reports := make(chan hedge.Report, 3)
		p := hedge.Policy[int]{
			Delay: hedge.Fixed(10 * ms), Budget: l,
			Observer: observerFunc(func(r hedge.Report) { reports <- r }),
		}
		// Every attempt answers 100 ms after it starts.
		fn := func(ctx context.Context) (int, error) {
			if err := lab.Wait(ctx, 100*ms); err != nil {
				return 0, err
			}
			return hedge.Attempt(ctx), nil
		}
		go hedge.Do(t.Context(), p, fn)
		time.Sleep(5 * ms)
		go hedge.Do(t.Context(), p, fn) // its hedge is due at 15 ms, while the first's runs
		first, second := <-reports, <-reports
		if first.Attempts != 2 || second.Attempts != 1 || second.BudgetRefusals != 1 {
			t.Errorf("first call %+v, second %+v; want the second's hedge refused", first, second)
		}
		synctest.Wait()
		if n := l.InFlight(); n != 0 {
			t.Errorf("%d permits still taken", n)
		}
		// The permit is back: a third call hedges again.
		hedge.Do(t.Context(), p, fn)
		if r := <-reports; r.Attempts != 2 {
			t.Errorf("third call %+v, want it hedged", r)
		}
	})
}

// Release returns a granted hedge's permit, as Done does; the primary's
// Release and stray ones change nothing.
func TestInflightLimitRelease(t *testing.T) {
	ctx := context.Background()
	l := &hedge.InflightLimit{Max: 2}
	l.Allow(ctx, 1)
	l.Allow(ctx, 2)
	l.Release(ctx, 0)
	if n := l.InFlight(); n != 2 {
		t.Fatalf("after the primary's Release: %d permits taken, want 2", n)
	}
	l.Release(ctx, 2)
	if n := l.InFlight(); n != 1 {
		t.Fatalf("after one Release: %d permits taken, want 1", n)
	}
	for range 3 {
		l.Release(ctx, 1)
	}
	if n, granted := l.InFlight(), askHedges(l, 3); n != 0 || granted != 2 {
		t.Errorf("after stray Releases: %d taken, then %d of 3 granted; want 0 and 2", n, granted)
	}
}
