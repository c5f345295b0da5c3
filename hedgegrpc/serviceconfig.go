package hedgegrpc

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tailcut/hedge"
)

// ParseServiceConfig reads the hedging parts of a gRPC service config in
// its JSON form (gRFC A6): every methodConfig entry, under each of its
// names, and retryThrottling. An entry with a hedgingPolicy gives its
// names that policy; an entry without one (a timeout only, a
// retryPolicy, ...) gives them a policy of MaxAttempts 1, since the most
// specific entry decides, whatever it holds: its methods are not hedged,
// even under a service or default entry that hedges. Other fields
// (loadBalancingConfig, timeout, retryPolicy, ...) are grpc-go's: the
// Config keeps the whole document in ServiceConfig, and
// Interceptor.DialOptions gives it to grpc-go as the channel's default
// service config, so one document configures both. It returns an error
// wrapping ErrInvalidConfig for a document A6 does not allow: an entry
// with both retryPolicy and hedgingPolicy, a name given twice in the
// document (whatever policy, if any, each entry holds: A6 gives a method
// one policy, and grpc-go refuses such a document as well), a method
// without a service, maxAttempts below 2, a hedgingDelay that is not a
// non-negative proto3 duration ("0.5s"), a timeout that is not a proto3
// duration, an unknown status code, or a retryThrottling outside its
// bounds. maxAttempts above the limit is not an error here: New treats
// it as Config.MaxAttemptsLimit.
//
// A6 allows a fractional maxTokens; this package's token bucket counts
// whole tokens, so ParseServiceConfig rejects one.
func ParseServiceConfig(js string) (Config, error) {
	doc, err := parseDocument(js)
	return doc.hedging, err
}

// document is a service config as this package reads it: the hedging
// parts, and what each methodConfig entry tells grpc-go that the
// hedging must respect.
type document struct {
	hedging Config
	entries map[string]entry // by name, as Config.Methods keys
}

// entry is what grpc-go makes of one methodConfig entry, as far as the
// hedging depends on it.
type entry struct {
	timeout    time.Duration // grpc-go's deadline for each call it makes, when hasTimeout
	hasTimeout bool          // a timeout that is not negative: grpc-go ignores those
	retries    bool          // a retryPolicy: grpc-go retries the entry's methods
	retryable  uint32        // its retryableStatusCodes, bit c for code c
}

func parseDocument(js string) (document, error) {
	var doc struct {
		MethodConfig []struct {
			Name          []serviceConfigName
			Timeout       *string
			RetryPolicy   json.RawMessage
			HedgingPolicy *struct {
				MaxAttempts         *float64
				HedgingDelay        *string
				NonFatalStatusCodes []codes.Code
			}
		}
		RetryThrottling *struct {
			MaxTokens  *float64
			TokenRatio *float64
		}
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		return document{}, fmt.Errorf("%w: service config: %w", ErrInvalidConfig, err)
	}
	var cfg Config
	var entries map[string]entry
	claimed := map[string]int{}
	for i, mc := range doc.MethodConfig {
		where := fmt.Sprintf("methodConfig[%d]", i)
		// Every entry claims its names before its policy is looked at:
		// a retry-only entry, or one with neither policy, gives its
		// methods their config as surely as a hedging entry does.
		keys, err := claimNames(claimed, i, mc.Name)
		if err != nil {
			return document{}, err
		}
		e, err := parseEntry(mc.Timeout, mc.RetryPolicy)
		if err != nil {
			return document{}, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, where, err)
		}
		p := HedgingPolicy{MaxAttempts: 1} // not hedged: gRPC's own retryPolicy, or neither
		if hp := mc.HedgingPolicy; hp != nil {
			if e.retries {
				return document{}, fmt.Errorf("%w: %s has both retryPolicy and hedgingPolicy", ErrInvalidConfig, where)
			}
			switch n := hp.MaxAttempts; {
			case n == nil:
				return document{}, fmt.Errorf("%w: %s: hedgingPolicy has no maxAttempts", ErrInvalidConfig, where)
			case *n != math.Trunc(*n):
				return document{}, fmt.Errorf("%w: %s: maxAttempts %v is not an integer", ErrInvalidConfig, where, *n)
			case *n < 2:
				return document{}, fmt.Errorf("%w: %s: maxAttempts %v is below 2", ErrInvalidConfig, where, *n)
			default:
				// Clamped before the conversion: New caps it far lower anyway.
				p.MaxAttempts = int(math.Min(*n, 1e6))
			}
			if hp.HedgingDelay != nil {
				d, err := parseDuration(*hp.HedgingDelay)
				if err != nil {
					return document{}, fmt.Errorf("%w: %s: hedgingDelay: %w", ErrInvalidConfig, where, err)
				}
				p.HedgingDelay = d
			}
			p.NonFatalStatusCodes = hp.NonFatalStatusCodes
		}
		for _, key := range keys {
			if cfg.Methods == nil {
				cfg.Methods, entries = map[string]HedgingPolicy{}, map[string]entry{}
			}
			cfg.Methods[key] = p
			entries[key] = e
		}
	}
	if t := doc.RetryThrottling; t != nil {
		switch {
		case t.MaxTokens == nil || t.TokenRatio == nil:
			return document{}, fmt.Errorf("%w: retryThrottling needs maxTokens and tokenRatio", ErrInvalidConfig)
		case *t.MaxTokens <= 0 || *t.MaxTokens > 1000:
			return document{}, fmt.Errorf("%w: retryThrottling maxTokens %v is outside (0, 1000]", ErrInvalidConfig, *t.MaxTokens)
		case *t.MaxTokens != math.Trunc(*t.MaxTokens):
			return document{}, fmt.Errorf("%w: retryThrottling maxTokens %v is not a whole number of tokens", ErrInvalidConfig, *t.MaxTokens)
		}
		cfg.RetryThrottling = &RetryThrottling{MaxTokens: int(*t.MaxTokens), TokenRatio: *t.TokenRatio}
		if err := cfg.RetryThrottling.validate(); err != nil {
			return document{}, err
		}
	}
	// Everything else New checks: report it now, not at New.
	if _, err := compile(Config{Methods: cfg.Methods, MaxAttemptsLimit: hedge.MaxAttemptsLimit}, nil, nil); err != nil {
		return document{}, err
	}
	cfg.ServiceConfig = js
	return document{hedging: cfg, entries: entries}, nil
}

// parseEntry reads what grpc-go makes of an entry's timeout and
// retryPolicy. grpc-go checks the rest of the retryPolicy.
func parseEntry(timeout *string, retryPolicy json.RawMessage) (entry, error) {
	var e entry
	if timeout != nil {
		d, err := parseTimeout(*timeout)
		if err != nil {
			return entry{}, fmt.Errorf("timeout: %w", err)
		}
		e.timeout, e.hasTimeout = d, d >= 0
	}
	if len(retryPolicy) == 0 || string(retryPolicy) == "null" {
		return e, nil
	}
	var rp struct{ RetryableStatusCodes []codes.Code }
	if err := json.Unmarshal(retryPolicy, &rp); err != nil {
		return entry{}, fmt.Errorf("retryPolicy: %w", err)
	}
	e.retries = true
	for _, c := range rp.RetryableStatusCodes {
		if c < 32 {
			e.retryable |= 1 << c
		}
	}
	return e, nil
}

// serviceConfigName is one name of a methodConfig entry: a service and
// a method, a service alone for all its methods, or neither for every
// method.
type serviceConfigName struct {
	Service string
	Method  string
}

// claimNames checks the names of methodConfig[entry] and records each in
// claimed, which maps a name to the entry that gave it. It returns the
// names as Config.Methods keys. A name may appear once in the whole
// document: twice is an error even when the entries agree, as in grpc-go.
func claimNames(claimed map[string]int, entry int, names []serviceConfigName) ([]string, error) {
	keys := make([]string, 0, len(names))
	for _, n := range names {
		if n.Service == "" && n.Method != "" {
			return nil, fmt.Errorf("%w: methodConfig[%d] names method %q without a service", ErrInvalidConfig, entry, n.Method)
		}
		key := n.Service
		if n.Method != "" {
			key += "/" + n.Method
		}
		// Claimed by its full path, "/service/method" or "/service/",
		// which grpc-go compares too: key alone would merge service
		// "a/b" with method b of service a.
		path := "/" + n.Service + "/" + n.Method
		switch first, dup := claimed[path]; {
		case dup && first == entry:
			return nil, fmt.Errorf("%w: methodConfig[%d] names %q twice", ErrInvalidConfig, entry, key)
		case dup:
			return nil, fmt.Errorf("%w: methodConfig[%d] names %q, which methodConfig[%d] named: a method has one policy", ErrInvalidConfig, entry, key, first)
		}
		claimed[path] = entry
		keys = append(keys, key)
	}
	return keys, nil
}

// parseTimeout reads a proto3 JSON Duration as grpc-go reads a method's
// timeout: decimal seconds with up to nine fractional digits, an "s"
// suffix and an optional "-", up to 10,000 years, clamped to what a
// time.Duration holds.
func parseTimeout(s string) (time.Duration, error) {
	body, neg := strings.CutPrefix(s, "-")
	whole, frac, _ := strings.Cut(strings.TrimSuffix(body, "s"), ".")
	if !strings.HasSuffix(body, "s") {
		return 0, fmt.Errorf("%q is not decimal seconds ending in \"s\"", s)
	}
	if whole == "" && frac == "" || !digits(whole) || !digits(frac) || len(frac) > 9 {
		return 0, fmt.Errorf("%q is not decimal seconds with at most nine decimals", s)
	}
	secs, err := strconv.ParseInt("0"+whole, 10, 64)
	if err != nil || secs > maxProtoSeconds {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	nanos, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	const maxSecs, maxNanos = math.MaxInt64 / int64(time.Second), math.MaxInt64 % int64(time.Second)
	d := time.Duration(math.MaxInt64)
	if secs < maxSecs || secs == maxSecs && nanos < maxNanos {
		d = time.Duration(secs)*time.Second + time.Duration(nanos)
	}
	if neg {
		return -d, nil
	}
	return d, nil
}

// maxProtoSeconds is the most seconds a proto3 Duration holds, 10,000
// years.
const maxProtoSeconds = 315_576_000_000

// parseDuration reads a proto3 JSON Duration that must not be negative:
// decimal seconds with up to nine fractional digits and an "s" suffix,
// such as "0.5s", ".5s" or "2s".
func parseDuration(s string) (time.Duration, error) {
	body, ok := strings.CutSuffix(s, "s")
	if !ok {
		return 0, fmt.Errorf("%q is not decimal seconds ending in \"s\"", s)
	}
	if strings.HasPrefix(body, "-") {
		return 0, fmt.Errorf("%q is negative", s)
	}
	whole, frac, _ := strings.Cut(body, ".")
	if whole == "" && frac == "" || !digits(whole) || !digits(frac) || len(frac) > 9 {
		return 0, fmt.Errorf("%q is not decimal seconds with at most nine decimals", s)
	}
	var secs, nanos int64
	if whole != "" {
		n, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || n > math.MaxInt64/int64(time.Second)-1 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		secs = n
	}
	if frac != "" {
		n, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		nanos = n
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos), nil
}

// digits reports whether s holds only ASCII digits; "" does.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
