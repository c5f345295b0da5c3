package hedge_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// response stands in for an *http.Response: a status and a body that must
// be closed exactly once unless it is returned.
type response struct {
	attempt int
	status  int
}

type closer struct {
	mu     sync.Mutex
	closed map[int]int // attempt → times discarded
}

func (c *closer) discard(r *response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed[r.attempt]++
}

func classify503(r *response, err error) hedge.Outcome {
	if err == nil && r.status == 503 {
		return hedge.Retryable
	}
	return hedge.Classify(r, err)
}

func TestDiscard(t *testing.T) {
	type attempt struct {
		after  time.Duration
		status int
	}
	tests := []struct {
		name     string
		timeout  time.Duration
		attempts []attempt
		want     int         // the attempt whose response Do returns; -1 for none
		early    map[int]int // attempt → times discarded when Do returns
		closed   map[int]int // attempt → times discarded in the end
	}{{
		name:     "a loser that answers late",
		attempts: []attempt{{300 * ms, 200}, {50 * ms, 200}, {500 * ms, 200}},
		want:     1,
		early:    map[int]int{},
		closed:   map[int]int{0: 1},
	}, {
		name:     "superseded retryable responses",
		attempts: []attempt{{30 * ms, 503}, {30 * ms, 503}, {30 * ms, 200}},
		want:     2,
		early:    map[int]int{0: 1, 1: 1},
		closed:   map[int]int{0: 1, 1: 1},
	}, {
		name:     "every response retryable: the last is returned",
		attempts: []attempt{{30 * ms, 503}, {30 * ms, 503}, {30 * ms, 503}},
		want:     2,
		early:    map[int]int{0: 1, 1: 1},
		closed:   map[int]int{0: 1, 1: 1},
	}, {
		name:     "a kept retryable response when the deadline passes",
		timeout:  200 * ms,
		attempts: []attempt{{30 * ms, 503}, {400 * ms, 200}, {400 * ms, 200}},
		want:     -1,
		early:    map[int]int{0: 1},
		closed:   map[int]int{0: 1, 1: 1, 2: 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &closer{closed: map[int]int{}}
				p := hedge.Policy[*response]{
					Delay: hedge.Fixed(100 * ms), MaxAttempts: 3, Timeout: tt.timeout,
					Classify: classify503, Discard: c.discard,
				}
				resp, err := hedge.Do(t.Context(), p, func(ctx context.Context) (*response, error) {
					k := hedge.Attempt(ctx)
					time.Sleep(tt.attempts[k].after) // ignores ctx: answers late
					return &response{attempt: k, status: tt.attempts[k].status}, nil
				})
				got := -1
				if err == nil {
					got = resp.attempt
				}
				c.mu.Lock()
				if diff := cmp.Diff(tt.early, c.closed); diff != "" {
					t.Errorf("discarded when Do returned (-want +got)\n%s", diff)
				}
				c.mu.Unlock()
				time.Sleep(time.Second)
				synctest.Wait()
				if got != tt.want {
					t.Errorf("returned attempt %d (err %v), want %d", got, err, tt.want)
				}
				c.mu.Lock()
				defer c.mu.Unlock()
				if diff := cmp.Diff(tt.closed, c.closed); diff != "" {
					t.Errorf("discarded (-want +got)\n%s", diff)
				}
			})
		})
	}
}

// A value fn returned is discarded even when the classifier panics on it.
func TestDiscardWhenClassifierPanics(t *testing.T) {
	c := &closer{closed: map[int]int{}}
	p := hedge.Policy[*response]{
		MaxAttempts: 1, Discard: c.discard,
		Classify: func(*response, error) hedge.Outcome { panic("classify") },
	}
	func() {
		defer func() { recover() }()
		hedge.Do(context.Background(), p, func(context.Context) (*response, error) { return &response{}, nil })
	}()
	if diff := cmp.Diff(map[int]int{0: 1}, c.closed); diff != "" {
		t.Errorf("discarded (-want +got)\n%s", diff)
	}
}

// A slow Discard (draining a body) delays neither the next attempt nor
// Do's return at the deadline.
func TestSlowDiscardDelaysNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var starts []time.Duration
		p := hedge.Policy[*response]{
			Delay: hedge.Fixed(-1), MaxAttempts: 3, Timeout: 100 * ms, Classify: classify503,
			Discard: func(*response) { time.Sleep(200 * ms) },
		}
		_, err := hedge.Do(t.Context(), p, func(ctx context.Context) (*response, error) {
			mu.Lock()
			starts = append(starts, time.Since(start))
			mu.Unlock()
			time.Sleep(10 * ms)
			if hedge.Attempt(ctx) == 2 {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return &response{status: 503}, nil
		})
		if at := time.Since(start); at != 100*ms || err == nil {
			t.Errorf("Do returned %v at %v, want the deadline at 100ms", err, at)
		}
		time.Sleep(time.Second)
		if diff := cmp.Diff([]time.Duration{0, 10 * ms, 20 * ms}, starts); diff != "" {
			t.Errorf("attempt starts (-want +got)\n%s", diff)
		}
	})
}
