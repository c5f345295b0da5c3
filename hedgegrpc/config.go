package hedgegrpc

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tailcut/hedge"
)

// DefaultMaxAttemptsLimit is the largest MaxAttempts a HedgingPolicy gets
// when Config.MaxAttemptsLimit is 0: gRFC A6's client-side cap. A policy
// asking for more gets this many, because a service config may come from
// DNS, and a client must not let a stranger multiply its load.
const DefaultMaxAttemptsLimit = 5

// ErrInvalidConfig is wrapped by the error New and ParseServiceConfig
// return for a configuration they cannot honour. The message names the
// field, and the method for a HedgingPolicy's.
var ErrInvalidConfig = errors.New("hedgegrpc: invalid config")

// Config is the hedging configuration of one channel (one server name):
// which methods to hedge and how, and how to throttle. It is a plain
// value; New validates it and copies what it needs, so changing a Config
// after New changes nothing. The zero Config is valid and hedges nothing.
type Config struct {
	// Methods maps method names to their hedging policy. A name is
	// "package.Service/Method" for one method, "package.Service" for every
	// method of a service without a name of its own, or "" for every
	// method without a more specific name; the most specific name decides,
	// whatever its policy holds, as in a gRPC service config: a policy
	// with MaxAttempts 1 keeps the methods under its name unhedged, even
	// when a less specific name hedges. A leading "/" is accepted, so
	// generated FullMethodName constants work as names. Methods without a
	// policy are called once, unhedged.
	Methods map[string]HedgingPolicy

	// RetryThrottling, if set, throttles hedges on the channel with gRPC's
	// token bucket (A6): every call of the channel, hedged or not, counts
	// in it, failures with a non-fatal code draining it and successes
	// refilling it, and no hedge starts while half of it or less is left.
	// Nil means no throttling.
	RetryThrottling *RetryThrottling

	// MaxAttemptsLimit caps every policy's MaxAttempts; larger values are
	// treated as the limit, as A6 asks. 0 means DefaultMaxAttemptsLimit
	// (5). Raise it, up to hedge.MaxAttemptsLimit, to allow more; it must
	// be at least 2.
	MaxAttemptsLimit int

	// Observer, if set, receives a hedge.Report for every hedged call
	// (*hedge.Stats counts hedge rate, win rate and amplification). Its
	// BudgetRefusals count hedges that throttling, server pushback or a
	// commit held back. For a stream, the report covers the race until the call
	// committed to one attempt. It must be safe for concurrent use.
	Observer hedge.Observer

	// DisableTies, if set, keeps the channel's calls from asking servers
	// for the start signal (TieKey): a server's Admission still serves
	// primaries first, and turns hedges away, but no call is tied, and
	// every unary attempt goes through the unary interceptors chained
	// after the Interceptor. The zero Config ties (see
	// Interceptor.Unary).
	DisableTies bool

	// ServiceConfig is a whole gRPC service config in JSON, the document
	// ParseServiceConfig read. DialOptions gives it to grpc-go as the
	// channel's default service config (grpc.WithDefaultServiceConfig),
	// so that one document sets grpc-go's load balancing, timeouts and
	// retries and this package's hedging. When Methods and
	// RetryThrottling are both nil, New takes them from it; otherwise
	// they govern the hedging, and the document goes to grpc-go. Either
	// way, the document's timeout for a hedged method bounds the whole
	// call, every attempt included (grpc-go alone would give each attempt
	// a timeout of its own), and a method it gives a retryPolicy is not
	// hedged (grpc-go retries it; A6 gives a method one or the other). ""
	// means no default service config. New returns an error wrapping
	// ErrInvalidConfig for a document ParseServiceConfig refuses;
	// grpc.NewClient refuses what grpc-go's own parser does.
	ServiceConfig string
}

// HedgingPolicy is gRFC A6's hedgingPolicy for one method or service: send
// the call, and send another copy every HedgingDelay until one answers OK
// or MaxAttempts copies are out. The zero value is invalid (MaxAttempts
// must be at least 1).
type HedgingPolicy struct {
	// MaxAttempts bounds the attempts of one call, the original included.
	// 1 sends each call once: the policy of a name that a service config
	// gives no hedgingPolicy, which keeps a less specific name's hedging
	// off its methods. It must be at least 1; values above
	// Config.MaxAttemptsLimit are treated as that limit.
	MaxAttempts int

	// HedgingDelay is how long an attempt runs before the next is sent.
	// 0 sends every attempt at once; it must not be negative.
	HedgingDelay time.Duration

	// NonFatalStatusCodes are the codes that let the other attempts go
	// on: such a failure starts the next attempt at once. Any other code
	// ends the call with that failure and cancels the other attempts. OK
	// is not allowed. An empty list makes every failure fatal, which
	// hedges only against slowness (gRPC Java accepts that too, although
	// A6's config comment calls the field required).
	NonFatalStatusCodes []codes.Code

	// Delay, if set, replaces HedgingDelay with a delay source of the core
	// module, such as &hedge.Percentile{} to hedge at the learned p95 of
	// this method. &hedge.Adaptive{} is the production setup: a learned
	// plan, and, as a Delay that is also a Budget, its own bound on extra
	// attempts, its win rate and its breaker beside the channel's token
	// bucket (set MaxAttempts to 3, or more, for its plans of two
	// hedges, and keep codes.Unavailable among NonFatalStatusCodes, so
	// that a hedge a Shedder turns away leaves the primary running). One
	// Delay serves every method under this name, and a learned one
	// learns from all of them unless it keys its state by Method, as
	// &hedge.Adaptive{Key: hedgegrpc.Method} does, or each method has its
	// own name and its own Delay. It must be safe for concurrent use.
	Delay hedge.Delay
}

// RetryThrottling is gRFC A6's retryThrottling: a token bucket of
// MaxTokens that every failure with a non-fatal code (or a pushback that
// says not to retry) drains by one and every success refills by
// TokenRatio, whatever the method, hedged or not. For a method that is
// not hedged, the non-fatal codes are its policy's (that of a name with
// MaxAttempts 1), or the retryableStatusCodes of the retryPolicy grpc-go
// gives it; its call counts once, however often grpc-go retried it. No
// hedge starts while MaxTokens/2 or fewer tokens are left. The zero value
// is invalid.
type RetryThrottling struct {
	// MaxTokens is the bucket's size, in (0, 1000]. It starts full.
	MaxTokens int
	// TokenRatio is what one success refills: greater than 0, with at most
	// three decimals, as A6 supports.
	TokenRatio float64
}

// methodKey checks a Config.Methods name and returns it without a
// leading slash.
func methodKey(name string) (string, error) {
	key := name
	if strings.HasPrefix(key, "/") {
		// Only a full method name has a leading slash: "/pkg.Svc/Method".
		key = key[1:]
		if !strings.Contains(key, "/") {
			return "", fmt.Errorf("%w: method name %q: a leading slash must be followed by service/method", ErrInvalidConfig, name)
		}
	}
	svc, meth, hasMethod := strings.Cut(key, "/")
	switch {
	case key == "":
		return "", nil
	case svc == "":
		return "", fmt.Errorf("%w: method name %q has a method but no service", ErrInvalidConfig, name)
	case hasMethod && (meth == "" || strings.Contains(meth, "/")):
		return "", fmt.Errorf("%w: method name %q is not service or service/method", ErrInvalidConfig, name)
	}
	return key, nil
}

func (p HedgingPolicy) compile(limit int) (*method, error) {
	if p.MaxAttempts < 1 {
		return nil, fmt.Errorf("%w: HedgingPolicy.MaxAttempts %d is below 1 (1 switches hedging off, 2 or more hedge)", ErrInvalidConfig, p.MaxAttempts)
	}
	if p.HedgingDelay < 0 {
		return nil, fmt.Errorf("%w: HedgingPolicy.HedgingDelay %v is negative", ErrInvalidConfig, p.HedgingDelay)
	}
	var nonFatal uint32
	for _, c := range p.NonFatalStatusCodes {
		switch {
		case c == codes.OK:
			return nil, fmt.Errorf("%w: HedgingPolicy.NonFatalStatusCodes holds OK, which is not a failure", ErrInvalidConfig)
		case c >= maxCode:
			return nil, fmt.Errorf("%w: HedgingPolicy.NonFatalStatusCodes holds %d, which is not a gRPC status code", ErrInvalidConfig, uint32(c))
		}
		nonFatal |= 1 << c
	}
	attempts := min(p.MaxAttempts, limit)
	delay, fixed := p.Delay, time.Duration(0)
	if delay == nil {
		delay, fixed = hedge.Fixed(p.HedgingDelay), p.HedgingDelay
	} else if err := checkDelay(delay, attempts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return newMethod(attempts, nonFatal, delay, fixed, 0), nil
}

// checkDelay reports the error hedge.Do would return, from every call,
// for a Delay with bad settings (a Percentile with Quantile 2, say), or
// one that max attempts would cut (a hedge.Adaptive, whose plans of two
// hedges a max of 2 cuts): a bad setting is then an error at
// construction, not a failure of every later call.
func checkDelay(d hedge.Delay, max int) error {
	if err := (hedge.Policy[struct{}]{Delay: d, MaxAttempts: max}).Validate(); err != nil {
		return fmt.Errorf("%w (HedgingPolicy.Delay)", err)
	}
	return nil
}

func (t *RetryThrottling) validate() error {
	switch r := t.TokenRatio; {
	case t.MaxTokens <= 0 || t.MaxTokens > 1000:
		return fmt.Errorf("%w: RetryThrottling.MaxTokens %d is outside (0, 1000]", ErrInvalidConfig, t.MaxTokens)
	case math.IsNaN(r) || math.IsInf(r, 0) || r <= 0:
		return fmt.Errorf("%w: RetryThrottling.TokenRatio %v is not above 0", ErrInvalidConfig, r)
	case math.Round(r*1000)/1000 != r:
		// m/1000 is correctly rounded, so it equals r exactly when r is
		// the double nearest a decimal of three places, as JSON's 0.1 is.
		return fmt.Errorf("%w: RetryThrottling.TokenRatio %v has more than three decimals", ErrInvalidConfig, r)
	}
	return nil
}
