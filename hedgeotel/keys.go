package hedgeotel

import (
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tailcut/hedge"
)

// The attribute keys the Observer and the span helpers set.
const (
	// KeyAttr names the route or method of a call (WithKey).
	KeyAttr = attribute.Key("hedge.key")
	// OutcomeAttr is how the returned result was classified: accept,
	// retryable, terminal, or canceled when the caller's context or the
	// deadline ended the call.
	OutcomeAttr = attribute.Key("hedge.outcome")
	// WinnerAttr is the attempt whose accepted answer a call returned, 0
	// for the primary.
	WinnerAttr = attribute.Key("hedge.winner")
	// AttemptAttr is the attempt a span belongs to, 0 for the primary.
	AttemptAttr = attribute.Key("hedge.attempt")
	// SupersededAttr is true on the span of an attempt that lost the race:
	// the call returned another attempt's answer and cancelled it.
	SupersededAttr = attribute.Key("hedge.superseded")
)

// otherKey is the key of calls past MaxKeys distinct keys.
const otherKey = "other"

// outcomeNames are hedge.Outcome's values as OpenTelemetry spells
// attribute values: lower case.
var outcomeNames = [...]string{
	hedge.Accept:    "accept",
	hedge.Retryable: "retryable",
	hedge.Terminal:  "terminal",
	hedge.Canceled:  "canceled",
}

// outcomeIndex maps an Outcome to its place in keyed.calls. Do reports
// no other values; a classifier's answer out of range counts as
// Terminal, as Do treats it.
func outcomeIndex(o hedge.Outcome) int {
	if o < 0 || int(o) >= len(outcomeNames) {
		return int(hedge.Terminal)
	}
	return int(o)
}

// keyed is one key's counts and measurement options. The options are
// made once, and a measurement passes a slice of them as it is, so
// recording allocates neither a Set nor a variadic slice. The counters
// are atomic: only the duration goes through the SDK on a call's path,
// and the counters reach it at collection, through observable counters.
type keyed struct {
	calls [len(outcomeNames)][]metric.RecordOption // hedge.key, hedge.outcome
	plain []metric.ObserveOption                   // hedge.key
	won   [hedge.MaxAttemptsLimit][]metric.ObserveOption

	attempts, hedges, hedged, refusals, skips, opens atomic.Int64
	wins                                             [hedge.MaxAttemptsLimit]atomic.Int64
}

func newKeyed(name string, extra []attribute.KeyValue) *keyed {
	set := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		all := append([]attribute.KeyValue(nil), extra...)
		if name != "" {
			all = append(all, KeyAttr.String(name))
		}
		return metric.WithAttributeSet(attribute.NewSet(append(all, kv...)...))
	}
	k := &keyed{}
	for o, n := range outcomeNames {
		k.calls[o] = []metric.RecordOption{set(OutcomeAttr.String(n))}
	}
	k.plain = []metric.ObserveOption{set()}
	for w := range k.won {
		k.won[w] = []metric.ObserveOption{set(WinnerAttr.Int(w))}
	}
	return k
}

// keys finds a key's options. Keys are added as they are met, up to max,
// into a map that is copied on write, so that finding one takes no lock.
type keys struct {
	max   int
	extra []attribute.KeyValue

	mu    sync.Mutex // serialises additions
	known atomic.Pointer[map[string]*keyed]
	other *keyed
}

func newKeys(max int, extra []attribute.KeyValue) *keys {
	ks := &keys{max: max, extra: extra, other: newKeyed(otherKey, extra)}
	ks.known.Store(&map[string]*keyed{})
	return ks
}

func (ks *keys) of(name string) *keyed {
	known := *ks.known.Load()
	if k, ok := known[name]; ok {
		return k
	}
	if len(known) >= ks.max {
		return ks.other // without the lock: past the bound, every new key comes here
	}
	return ks.add(name)
}

func (ks *keys) add(name string) *keyed {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	old := *ks.known.Load()
	if k, ok := old[name]; ok {
		return k
	}
	if len(old) >= ks.max {
		return ks.other
	}
	known := maps.Clone(old)
	k := newKeyed(name, ks.extra)
	known[name] = k
	ks.known.Store(&known)
	return k
}

// each calls f with every key that has counts: the known ones and
// "other".
func (ks *keys) each(f func(*keyed)) {
	for _, k := range *ks.known.Load() {
		f(k)
	}
	f(ks.other)
}
