package hedgegrpc

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tailcut/hedge"
)

// method is what the calls of one name are made with: a validated
// policy, merged with what grpc-go's service config says of the name.
type method struct {
	unary  hedge.Policy[*unaryAttempt]  // Budget is set per call; unused when not hedged
	stream hedge.Policy[*streamAttempt] // likewise
	max    int                          // attempts per call, after the cap; 1: sent once, not hedged
	// fixed is the delay of every hedge when the policy gives no Delay of
	// its own and hedgingDelay is above 0; 0 otherwise. A unary call of
	// such a method runs its primary on the caller's goroutine until the
	// first hedge is due (see lead.go).
	fixed time.Duration
	// nonFatal has bit c set for a code c that lets a hedged call go on,
	// and that drains the token bucket, hedged or not.
	nonFatal uint32
	// signals is set once a server of the method has sent the start
	// signal: from then on, the attempts of its tied calls watch their
	// headers (invokeTied).
	signals atomic.Bool
	// guard is the policy's Delay when it is a hedge.Budget with a
	// Release method too, as a hedge.Adaptive is: it then bounds the
	// method's attempts beside the token bucket. Nil otherwise.
	guard guard
}

// guard is a budget that can take back a grant: what a learned delay
// that keeps its own bound, as hedge.Adaptive does, is besides.
type guard interface {
	hedge.Budget
	Release(ctx context.Context, k int)
}

// unhedged is the method of a call that no name hedges and no entry of
// grpc-go's config gives codes to count.
var unhedged = &method{max: 1}

// hedged reports whether m's calls are hedged.
func (m *method) hedged() bool { return m.max > 1 }

// leads reports whether a call in ctx runs its primary on the caller's
// goroutine, ahead of hedge.Do (see lead.go): at a fixed delay, unless
// ctx carries an attempt number, as a later try of a retry loop does.
func (m *method) leads(ctx context.Context) bool { return m.fixed > 0 && hedge.Attempt(ctx) == 0 }

// outcome is the policies' classifier: OK is accepted, a non-fatal code
// is retryable, and any other code is terminal.
func (m *method) outcome(err error) hedge.Outcome {
	if err == nil {
		return hedge.Accept
	}
	if m.isNonFatal(codeOf(err)) {
		return hedge.Retryable
	}
	return hedge.Terminal
}

func (m *method) classifyStream(_ *streamAttempt, err error) hedge.Outcome { return m.outcome(err) }

func (m *method) isNonFatal(c codes.Code) bool { return c < 32 && m.nonFatal&(1<<c) != 0 }

// newMethod returns the method of max attempts per call, hedged at delay,
// with the codes of nonFatal, and timeout (0: none) as the bound of the
// whole call. fixed is delay's own value when it is a fixed one of the
// policy's hedgingDelay, 0 otherwise.
func newMethod(max int, nonFatal uint32, delay hedge.Delay, fixed, timeout time.Duration) *method {
	m := &method{max: max, nonFatal: nonFatal, fixed: fixed}
	m.guard, _ = delay.(guard)
	if max > 1 {
		m.unary = hedge.Policy[*unaryAttempt]{Delay: delay, MaxAttempts: max, Timeout: timeout, Classify: m.classifyUnary}
		m.stream = hedge.Policy[*streamAttempt]{Delay: delay, MaxAttempts: max, Timeout: timeout, Classify: m.classifyStream}
	}
	return m
}

// maxCode is one past the last code gRPC defines (Unauthenticated).
const maxCode = codes.Unauthenticated + 1

// table is what calls of one channel read: the methods by name, with
// leading slashes removed, and the token bucket. A table never changes;
// a new service config from the resolver makes a new one.
type table struct {
	methods    map[string]*method
	bucket     *hedge.TokenBucket // nil: no throttling
	throttling RetryThrottling    // the bucket's; zero: none
}

// lookup returns the method of a full method name ("/svc/method"): the
// one of its most specific name, as grpc-go picks a method config; nil
// if no name covers it, or if t is nil.
func (t *table) lookup(full string) *method {
	if t == nil || len(t.methods) == 0 {
		return nil
	}
	m, _ := mostSpecific(t.methods, strings.TrimPrefix(full, "/"))
	return m
}

// mostSpecific returns the value of names for name ("svc/method",
// "svc" or ""): the name's own, else its service's, else the default.
func mostSpecific[V any](names map[string]V, name string) (V, bool) {
	if v, ok := names[name]; ok {
		return v, true
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		if v, ok := names[name[:i]]; ok {
			return v, true
		}
	}
	v, ok := names[""]
	return v, ok
}

// compile validates cfg's policies and throttling and returns them as a
// table, merged with entries, the methodConfig entries of the service
// config grpc-go applies (nil: none). The table keeps prev's token
// bucket when the throttling is the same: a resolver that sends its
// config again does not refill the bucket that failures drained.
func compile(cfg Config, entries map[string]entry, prev *table) (*table, error) {
	limit := cfg.MaxAttemptsLimit
	switch {
	case limit == 0:
		limit = DefaultMaxAttemptsLimit
	case limit < 2 || limit > hedge.MaxAttemptsLimit:
		return nil, fmt.Errorf("%w: Config.MaxAttemptsLimit %d is outside 2..%d", ErrInvalidConfig, limit, hedge.MaxAttemptsLimit)
	}
	t := &table{}
	if r := cfg.RetryThrottling; r != nil {
		if err := r.validate(); err != nil {
			return nil, err
		}
		t.throttling = *r
		if prev != nil && prev.bucket != nil && prev.throttling == *r {
			t.bucket = prev.bucket
		} else {
			b := &hedge.TokenBucket{MaxTokens: r.MaxTokens, TokenRatio: r.TokenRatio}
			if err := (hedge.Policy[struct{}]{Budget: b}).Validate(); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
			}
			t.bucket = b
		}
	}
	policies := make(map[string]*method, len(cfg.Methods))
	for name, p := range cfg.Methods {
		key, err := methodKey(name)
		if err != nil {
			return nil, err
		}
		if _, dup := policies[key]; dup {
			return nil, fmt.Errorf("%w: method %q is named twice", ErrInvalidConfig, key)
		}
		m, err := p.compile(limit)
		if err != nil {
			return nil, fmt.Errorf("%w (method %q)", err, name)
		}
		m.unary.Observer = cfg.Observer
		m.stream.Observer = cfg.Observer
		policies[key] = m
	}
	t.methods = merge(policies, entries)
	return t, nil
}

// merge returns the methods of the names of policies and of entries:
// for each, the policy of its most specific name among policies, under
// the entry of its most specific name among entries. A name that only
// one of the two has thus gets the other's most specific name for it,
// so that a lookup of any method finds in one step what the two lookups
// would: the hedging policy that covers it, and the timeout and retries
// that grpc-go gives it.
func merge(policies map[string]*method, entries map[string]entry) map[string]*method {
	if len(entries) == 0 {
		return policies
	}
	methods := make(map[string]*method, len(policies)+len(entries))
	add := func(name string) {
		if _, done := methods[name]; done {
			return
		}
		m, _ := mostSpecific(policies, name)
		e, ok := mostSpecific(entries, name)
		if ok {
			m = e.apply(m)
		}
		if m == nil {
			m = unhedged
		}
		methods[name] = m
	}
	for name := range policies {
		add(name)
	}
	for name := range entries {
		add(name)
	}
	return methods
}

// apply returns m (nil: no policy) as grpc-go's entry e shapes its
// calls. grpc-go retries the methods of an entry with a retryPolicy: A6
// gives a method retries or hedging, never both, so they are not hedged,
// and the retryable codes drain the token bucket. A timeout bounds each
// hedged call as a whole; one of 0 fails every call at once, which
// grpc-go does on its own.
func (e entry) apply(m *method) *method {
	switch {
	case e.retries:
		return &method{max: 1, nonFatal: e.retryable}
	case m == nil || !m.hedged() || !e.hasTimeout:
		return m
	case e.timeout == 0:
		return &method{max: 1, nonFatal: m.nonFatal}
	}
	bounded := newMethod(m.max, m.nonFatal, m.unary.Delay, m.fixed, e.timeout)
	bounded.unary.Observer, bounded.stream.Observer = m.unary.Observer, m.stream.Observer
	return bounded
}
