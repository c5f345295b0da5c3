package hedgeotel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tailcut/hedge"
)

// CurrentDelay is a delay source that can say what it hedges at now
// without being asked for a call's delay: *hedge.Percentile and
// *hedge.Planner are. Current must be safe for concurrent use.
type CurrentDelay interface {
	Current() time.Duration
}

// watched is a delay source the hedge.delay gauge reports: one source
// under one key, or every key of a Keyed.
type watched struct {
	key   string
	one   CurrentDelay
	keyed *hedge.Keyed
	err   error
}

// WithDelay reports d's current delay as the gauge hedge.delay under key,
// at every collection. Use the key the Observer's Key gives the calls
// that d schedules, so that a route's delay sits beside its latency. A
// nil d makes New fail.
func WithDelay(key string, d CurrentDelay) Option {
	return func(c *config) {
		w := watched{key: key, one: d}
		if d == nil {
			w.err = fmt.Errorf("%w: WithDelay(%q) of a nil delay", ErrInvalidOption, key)
		}
		c.watch = append(c.watch, w)
	}
}

// WithKeyed reports the current delay of every key of k as the gauge
// hedge.delay, under that key, at every collection: the keys it walks
// with Range, whose delays are CurrentDelays (a key whose delay is not,
// such as a hedge.Fixed, is left out). The overflow delay, shared by keys
// past k.MaxKeys, is reported under "other", as are keys past the
// Observer's own MaxKeys; set both bounds alike. A nil k makes New fail.
func WithKeyed(k *hedge.Keyed) Option {
	return func(c *config) {
		w := watched{keyed: k}
		if k == nil {
			w.err = fmt.Errorf("%w: WithKeyed(nil)", ErrInvalidOption)
		}
		c.watch = append(c.watch, w)
	}
}

// observeDelays is the gauge's callback. It runs at collection, not on
// any call's path.
func (o *Observer) observeDelays(_ context.Context, obs metric.Observer) error {
	for _, w := range o.watch {
		if w.one != nil {
			obs.ObserveFloat64(o.delay, seconds(w.one.Current()), o.keys.of(w.key).plain...)
			continue
		}
		// Range passes the overflow delay last, under "", after the keys
		// that filled the Keyed; a key "" of its own comes among them.
		limit := w.keyed.MaxKeys
		if limit == 0 {
			limit = 64
		}
		seen := 0
		w.keyed.Range(func(key string, d hedge.Delay) bool {
			if key == "" && seen >= limit {
				key = otherKey
			}
			seen++
			if c, ok := d.(CurrentDelay); ok {
				obs.ObserveFloat64(o.delay, seconds(c.Current()), o.keys.of(key).plain...)
			}
			return true
		})
	}
	return nil
}
