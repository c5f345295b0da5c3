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
	// retryable, terminal, failed, or canceled when the caller's context
	// or the deadline ended the call.
	OutcomeAttr = attribute.Key("hedge.outcome")
	// WinnerAttr is the attempt whose accepted answer a call returned, 0
	// for the primary.
	WinnerAttr = attribute.Key("hedge.winner")
	// RoleAttr is what an attempt of a hedged call did: winner, the
	// attempt whose accepted answer the call returned, or loser, an
	// attempt still running when the call was decided.
	RoleAttr = attribute.Key("hedge.role")
	// AttemptAttr is the attempt a span belongs to, 0 for the primary.
	AttemptAttr = attribute.Key("hedge.attempt")
	// SupersededAttr is true on the span of an attempt that lost the race
	// (the call returned another attempt's answer and cancelled it), and
	// on the measurements that AttemptMeterProvider's instruments make for
	// it.
	SupersededAttr = attribute.Key("hedge.superseded")
)

// OverflowKey is the hedge.key of calls past MaxKeys distinct keys, and
// of the delay a hedge.Keyed shares between the keys past its own bound.
// hedgehttp.Transport names its overflow route the same. No route can
// have this name: an http.ServeMux pattern and a method-and-host route
// hold a "/" or a space, and a gRPC method starts with "/".
const OverflowKey = "(other)"

// outcomeNames are hedge.Outcome's values as OpenTelemetry spells
// attribute values: lower case. A test checks that every Outcome that
// String names is here.
var outcomeNames = [...]string{
	hedge.Accept:    "accept",
	hedge.Retryable: "retryable",
	hedge.Terminal:  "terminal",
	hedge.Canceled:  "canceled",
	hedge.Failed:    "failed",
}

// outcomeIndex maps an Outcome to its place in keyed.calls. A
// classifier's answer out of range counts as Terminal, as Do treats it.
func outcomeIndex(o hedge.Outcome) int {
	if o < 0 || int(o) >= len(outcomeNames) {
		return int(hedge.Terminal)
	}
	return int(o)
}

// roles are the values of hedge.role, by their index in keyed.role.
const (
	roleWinner = iota
	roleLoser
	roles
)

var roleNames = [roles]string{roleWinner: "winner", roleLoser: "loser"}

// keyed is one key's counts and measurement options. The options are
// made once, and a measurement passes a slice of them as it is, so
// recording allocates neither a Set nor a variadic slice. The counters
// are atomic: only the histograms go through the SDK on a call's path,
// and the counters reach it at collection, through observable counters.
type keyed struct {
	calls [len(outcomeNames)][]metric.RecordOption // hedge.key, hedge.outcome
	rec   []metric.RecordOption                    // hedge.key
	role  [roles][]metric.RecordOption             // hedge.key, hedge.role
	plain []metric.ObserveOption                   // hedge.key
	won   [hedge.MaxAttemptsLimit][]metric.ObserveOption

	attempts, hedged, retries, refusals, skips, opens, panics atomic.Int64
	wins                                                      [hedge.MaxAttemptsLimit]atomic.Int64
	// reach is the most attempts a call of the key has started: the
	// winners below it (and 0 and 1 always) are reported, at 0 until one
	// wins, so that a series exists before its first increase.
	reach atomic.Int32
	// seen is set once a call or a delay is reported under the key. Only
	// the overflow key is made before that; it is reported once seen.
	seen atomic.Bool
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
	for r, n := range roleNames {
		k.role[r] = []metric.RecordOption{set(RoleAttr.String(n))}
	}
	plain := set()
	k.rec = []metric.RecordOption{plain}
	k.plain = []metric.ObserveOption{plain}
	for w := range k.won {
		k.won[w] = []metric.ObserveOption{set(WinnerAttr.Int(w))}
	}
	k.reach.Store(2)
	return k
}

// reached raises reach to n attempts.
func (k *keyed) reached(n int) {
	for {
		old := k.reach.Load()
		if int32(n) <= old || k.reach.CompareAndSwap(old, int32(n)) {
			return
		}
	}
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
	ks := &keys{max: max, extra: extra, other: newKeyed(OverflowKey, extra)}
	ks.known.Store(&map[string]*keyed{})
	return ks
}

func (ks *keys) of(name string) *keyed {
	known := *ks.known.Load()
	if k, ok := known[name]; ok {
		return k
	}
	if len(known) >= ks.max || name == OverflowKey {
		return ks.overflow() // without the lock: past the bound, every new key comes here
	}
	return ks.add(name)
}

func (ks *keys) overflow() *keyed {
	if !ks.other.seen.Load() {
		ks.other.seen.Store(true)
	}
	return ks.other
}

func (ks *keys) add(name string) *keyed {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	old := *ks.known.Load()
	if k, ok := old[name]; ok {
		return k
	}
	if len(old) >= ks.max {
		return ks.overflow()
	}
	known := maps.Clone(old)
	k := newKeyed(name, ks.extra)
	k.seen.Store(true)
	known[name] = k
	ks.known.Store(&known)
	return k
}

// each calls f with every key seen: the known ones and, once a call came
// to it, the overflow key.
func (ks *keys) each(f func(*keyed)) {
	for _, k := range *ks.known.Load() {
		f(k)
	}
	if ks.other.seen.Load() {
		f(ks.other)
	}
}
