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
// *hedge.Planner are. Current must be safe for concurrent use; a
// negative answer means it sends no hedge.
type CurrentDelay interface {
	Current() time.Duration
}

// Delays is a set of delay sources by key, such as the delay a client
// learns for each of its routes: *hedge.Keyed is one. Range calls f with
// each key and its delay until f returns false; the delay that keys past
// a bound share comes last, under OverflowKey (a *hedge.Keyed passes it
// under "", which WithDelays reads as OverflowKey). Range must be safe for
// concurrent use, and its keys should be those the Observer's Key gives
// the calls that each delay schedules.
type Delays interface {
	Range(f func(key string, d hedge.Delay) bool)
}

// watched is a delay source the hedge.delay gauge reports: one source
// under one key, or a set of them.
type watched struct {
	key  string
	one  CurrentDelay
	many Delays
	err  error
}

// WithDelay reports d's current delay as the gauge hedge.delay under key,
// at every collection, and its ceiling as hedge.delay.ceiling if it is a
// *hedge.Percentile or a *hedge.Planner. Use the key the Observer's Key
// gives the calls that d schedules, so that a route's delay sits beside
// its latency. A nil d, or a nil pointer, makes New fail.
func WithDelay(key string, d CurrentDelay) Option {
	return func(c *config) {
		w := watched{key: key, one: d}
		if isNil(d) {
			w.err = fmt.Errorf("%w: WithDelay(%q) of a nil delay (%T)", ErrInvalidOption, key, d)
		}
		c.watch = append(c.watch, w)
	}
}

// WithDelays reports the current delay of every key of ds as the gauge
// hedge.delay, and its ceiling as hedge.delay.ceiling, under that key, at
// every collection: hedgeotel.WithDelays(keyed) for a *hedge.Keyed, and
// likewise for a hedgehttp.Transport's routes and a hedgegrpc.Config's or
// Interceptor's methods, which have the same Range. A key whose delay is
// not a CurrentDelay, such as a hedge.Fixed, is left out.
// Keys past the Observer's MaxKeys are reported under OverflowKey, as is
// the overflow delay of ds; set both bounds alike. A nil ds, or a nil
// pointer, makes New fail.
func WithDelays(ds Delays) Option {
	return func(c *config) {
		w := watched{many: ds}
		if isNil(ds) {
			w.err = fmt.Errorf("%w: WithDelays of a nil set of delays (%T)", ErrInvalidOption, ds)
		}
		c.watch = append(c.watch, w)
	}
}

// observeDelays is the gauges' callback. It runs at collection, not on
// any call's path.
func (o *Observer) observeDelays(_ context.Context, obs metric.Observer) error {
	for _, w := range o.watch {
		if w.one != nil {
			o.observeDelay(obs, w.key, w.one)
			continue
		}
		// A Keyed passes its overflow delay last, under "", after the
		// keys that filled it; a key "" of its own comes among them.
		limit := -1
		if k, ok := w.many.(*hedge.Keyed); ok {
			limit = k.MaxKeys
			if limit == 0 {
				limit = 64
			}
		}
		seen := 0
		w.many.Range(func(key string, d hedge.Delay) bool {
			if key == "" && limit >= 0 && seen >= limit {
				key = OverflowKey
			}
			seen++
			if c, ok := d.(CurrentDelay); ok && !isNil(c) {
				o.observeDelay(obs, key, c)
			}
			return true
		})
	}
	return nil
}

// observeDelay reports d under key: its current delay unless it sends no
// hedge, and its ceiling if it has one.
func (o *Observer) observeDelay(obs metric.Observer, key string, d CurrentDelay) {
	k := o.keys.of(key)
	if cur := d.Current(); cur >= 0 {
		obs.ObserveFloat64(o.delay, cur.Seconds(), k.plain...)
	}
	if c, ok := ceilingOf(d); ok {
		obs.ObserveFloat64(o.ceiling, c.Seconds(), k.plain...)
	}
}

// defaultCeiling is the Ceiling that hedge.Percentile and hedge.Planner
// document for their zero field.
const defaultCeiling = 10 * time.Second

// ceilingOf is the most d may hedge at, if d says.
func ceilingOf(d CurrentDelay) (time.Duration, bool) {
	var c time.Duration
	switch d := d.(type) {
	case *hedge.Percentile:
		c = d.Ceiling
	case *hedge.Planner:
		c = d.Ceiling
	default:
		return 0, false
	}
	if c == 0 {
		c = defaultCeiling
	}
	return c, c > 0 // a negative Ceiling is a setting Do rejects
}
