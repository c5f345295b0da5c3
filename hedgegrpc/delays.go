package hedgegrpc

import (
	"reflect"
	"slices"
	"strings"

	"github.com/tailcut/hedge"
)

// Range calls f with the key and the delay source of each delay that a
// Delay of the Config passed to New learns, until f returns false: what
// hedgeotel.WithDelays reads a channel's learned delays from. It is
// Config.Range, less the names that the config a resolver delivered no
// longer hedges. It is safe to call concurrently with calls; the zero
// Interceptor calls f for nothing.
func (in *Interceptor) Range(f func(key string, d hedge.Delay) bool) {
	t := in.table()
	if t == nil {
		return
	}
	rangeDelays(in.delays, func(name string) bool {
		m := t.methods[name]
		return m != nil && m.hedged()
	}, f)
}

// Range calls f with the key and the delay source of each delay that a
// Delay of c.Methods learns, until f returns false: what
// hedgeotel.WithDelays reads them from. Made from the Config, the
// Observer can watch the delays of the channel it observes:
//
//	cfg := hedgegrpc.Config{Methods: methods}
//	obs, err := hedgeotel.New(hedgeotel.WithKey(hedgegrpc.Method), hedgeotel.WithDelays(cfg))
//	cfg.Observer = obs
//	in, err := hedgegrpc.New(cfg)
//
// A Delay that keeps a state per key (a hedge.Adaptive or a hedge.Keyed
// whose Key is Method) passes on its own keys, the full method names
// that Method gives its calls, and the state it shares between calls of
// no key of their own (all of them, for one without a Key) under the
// name it serves. A Delay of one state, such as a *hedge.Percentile,
// comes under that name: the full method name ("/pkg.Service/Method")
// for a method's name, the service's name ("pkg.Service") for a
// service's, and "" for the default name. A Delay under several names
// comes once per name, its keys once in all. Names come in order, each
// service before its methods. Names without a Delay (a fixed
// HedgingDelay) or that do not hedge have nothing to learn, and so do the
// Methods of a ServiceConfig, which sets no Delay. It is safe to call
// concurrently with calls once nothing writes c.Methods.
func (c Config) Range(f func(key string, d hedge.Delay) bool) {
	delays := map[string]hedge.Delay{}
	for name, p := range c.Methods {
		if key, err := methodKey(name); err == nil && p.Delay != nil && p.MaxAttempts > 1 {
			delays[key] = p.Delay
		}
	}
	rangeDelays(delays, func(string) bool { return true }, f)
}

// rangeDelays is Range over delays by name (without a leading slash), of
// the names hedged says are.
func rangeDelays(delays map[string]hedge.Delay, hedged func(name string) bool, f func(key string, d hedge.Delay) bool) {
	names := make([]string, 0, len(delays))
	for name := range delays {
		if hedged(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var ranged []hedge.Delay // delays whose keys were passed on
	for _, name := range names {
		d, key := delays[name], nameKey(name)
		keyed, ok := d.(interface {
			Range(func(string, hedge.Delay) bool)
		})
		if !ok {
			if !f(key, d) {
				return
			}
			continue
		}
		again := slices.ContainsFunc(ranged, func(o hedge.Delay) bool { return same(o, d) })
		if !again {
			ranged = append(ranged, d)
		}
		more := true
		keyed.Range(func(k string, kd hedge.Delay) bool {
			switch {
			case k == "":
				k = key // the state of calls of no key of their own
			case again:
				return true
			}
			more = f(k, kd)
			return more
		})
		if !more {
			return
		}
	}
}

// nameKey is the key Range passes a name's delay under: a method's name
// as Method spells it, with its leading slash; a service's name, or "",
// as it is.
func nameKey(name string) string {
	if strings.Contains(name, "/") {
		return "/" + name
	}
	return name
}

// same reports whether a and b are the same delay source, without
// comparing values of a type that == would panic on.
func same(a, b hedge.Delay) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}
