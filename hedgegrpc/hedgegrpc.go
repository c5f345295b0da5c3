// Package hedgegrpc hedges grpc-go calls, unary and streaming, as gRFC A6
// specifies hedging, on top of the hedge module. grpc-go implements A6's
// retries but not its hedging; this package is the missing half, as a
// pair of client interceptors. One service config sets both grpc-go and
// the hedging, and one call installs everything on a channel:
//
//	cfg, err := hedgegrpc.ParseServiceConfig(`{
//	  "loadBalancingConfig": [{"round_robin": {}}],
//	  "methodConfig": [{
//	    "name": [{"service": "example.Profiles"}],
//	    "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.05s",
//	                      "nonFatalStatusCodes": ["UNAVAILABLE"]}
//	  }],
//	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
//	}`)
//	in, err := hedgegrpc.New(cfg)
//	conn, err := grpc.NewClient(target, append(in.DialOptions(target), creds)...)
//
// For a hedged method, the interceptors send the call, and another copy
// every hedgingDelay, up to maxAttempts, all under one deadline: the
// caller's, or the method's timeout in the service config, counted from
// the start of the call, if that comes first (grpc-go alone would give
// each copy a timeout of its own).
// The first copy to answer (OK, for a unary call, or response headers
// with CommitOnHeaders on the channel; response headers, for a stream)
// wins and cancels the others. A non-fatal code starts the next
// copy at once (later ones follow at hedgingDelay from there); any other
// code cancels the others and is returned. When every copy failed, the
// last failure is returned. Copies after the first carry
// grpc-previous-rpc-attempts. Server pushback (grpc-retry-pushback-ms)
// and retryThrottling are honoured as A6 says; see Interceptor.
//
// A unary attempt collects a header, trailer and peer of its own, and
// receives into a reply of its own, except a primary that runs on the
// caller's goroutine (hedged at a fixed delay), which receives into the
// caller's; only the winner's are copied to the caller's reply and to its
// grpc.Header, grpc.Trailer and grpc.Peer options. A call whose primary
// answers before the first hedge is due costs little more than a plain
// one; see Interceptor.Unary. A stream buffers what the caller sends and
// replays it to every attempt until one commits; see Interceptor.Stream.
//
// The channel's resolver may deliver a service config of its own (DNS
// TXT records, xDS, a control plane): the options DialOptions returns
// follow it, method by method, as grpc-go does, so the hedging changes
// when the config does.
//
// A method's most specific methodConfig entry decides, whatever it holds,
// as grpc-go applies that entry: a method whose own entry has a timeout
// or a retryPolicy but no hedgingPolicy is not hedged, though its
// service's entry hedges. Hedge only idempotent methods: a hedged call
// may run several times on the server. A6 allows a method retries or
// hedging, not both: ParseServiceConfig refuses an entry with both, and a
// method that grpc-go retries is never hedged.
//
// Hedges reach other backends only if the channel's load balancer spreads
// picks: with round_robin, successive attempts of a call go to successive
// backends; with pick_first, grpc-go's default, every attempt goes to the
// one backend it is connected to, and hedging protects against a slow
// request, not a slow server.
package hedgegrpc

import (
	"sync"
	"sync/atomic"

	"github.com/tailcut/hedge"
)

// Interceptor hedges the calls of one channel. Make one per
// grpc.ClientConn with New and install it with DialOptions: A6 throttles
// per server name, and the Interceptor holds that channel's token bucket
// and follows that channel's resolver. It is safe for concurrent use. The
// zero Interceptor hedges nothing until a resolver delivers a config.
//
// Throttling: with Config.RetryThrottling, a failure with a non-fatal code
// drains one token, an OK answer refills TokenRatio, fatal failures and
// cancelled losers change nothing, and no hedge starts while MaxTokens/2
// or fewer tokens are left. The first attempt always goes out. A stream
// counts once it ends: OK refills, a non-fatal code drains. Calls that
// are not hedged count as well, once each, as A6 counts every call of the
// channel: OK refills, and a failure drains if its code is non-fatal for
// the method (see RetryThrottling) or its pushback says not to retry.
//
// Pushback: when an attempt fails and its trailer holds
// grpc-retry-pushback-ms, a negative or malformed value stops the call's
// hedging: no further attempt starts, but the ones in flight run on, and
// the failure counts against the token bucket even if its code is fatal
// (A6). A value of n ms, on a non-fatal failure, starts the next attempt n
// ms after that failure arrived, and later ones at hedgingDelay after
// that; no attempt starts in between, not even for another non-fatal
// failure. If every attempt has started already, there is nothing to
// wait for; if the n ms reach past the call's deadline, no attempt could
// start in time, and the call stops hedging. On a fatal failure, n
// changes nothing: the call ends with it.
type Interceptor struct {
	serviceConfig string                 // Config.ServiceConfig, for grpc-go
	limit         int                    // Config.MaxAttemptsLimit
	observer      hedge.Observer         // Config.Observer
	untied        bool                   // Config.DisableTies
	delays        map[string]hedge.Delay // Config.Methods' Delays, by name: kept under a resolver's config

	mu  sync.Mutex            // orders the updates of cur
	cur atomic.Pointer[table] // what calls read: New's config, or the resolver's latest
}

// New validates cfg and returns an Interceptor for one channel. An invalid
// cfg is an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Interceptor, error) {
	var entries map[string]entry
	if cfg.ServiceConfig != "" {
		doc, err := parseDocument(cfg.ServiceConfig)
		if err != nil {
			return nil, err
		}
		if cfg.Methods == nil && cfg.RetryThrottling == nil {
			cfg.Methods, cfg.RetryThrottling = doc.hedging.Methods, doc.hedging.RetryThrottling
		}
		entries = doc.entries
	}
	t, err := compile(cfg, entries, nil)
	if err != nil {
		return nil, err
	}
	in := &Interceptor{serviceConfig: cfg.ServiceConfig, limit: cfg.MaxAttemptsLimit, observer: cfg.Observer, untied: cfg.DisableTies}
	for name, p := range cfg.Methods {
		if p.Delay != nil {
			key, _ := methodKey(name) // compile checked it
			if in.delays == nil {
				in.delays = map[string]hedge.Delay{}
			}
			in.delays[key] = p.Delay
		}
	}
	in.cur.Store(t)
	return in, nil
}

// table returns the policies calls use now; nil for the zero Interceptor
// before any config came.
func (in *Interceptor) table() *table { return in.cur.Load() }

// follow makes a service config that the channel's resolver delivered
// the config of later calls, the hedging parts and what grpc-go makes of
// its entries, as grpc-go makes the rest of it its own. Calls in flight
// keep the policy they started with. The Observer and MaxAttemptsLimit
// stay New's, and a Delay New's Config gave a name stays with that name:
// they are the client's, not the service owner's.
func (in *Interceptor) follow(doc document) {
	in.mu.Lock()
	defer in.mu.Unlock()
	methods := make(map[string]HedgingPolicy, len(doc.hedging.Methods))
	for name, p := range doc.hedging.Methods {
		if d := in.delays[name]; d != nil {
			p.Delay = d
		}
		methods[name] = p
	}
	t, err := compile(Config{Methods: methods, RetryThrottling: doc.hedging.RetryThrottling,
		MaxAttemptsLimit: in.limit, Observer: in.observer}, doc.entries, in.cur.Load())
	if err != nil {
		return // not reached: ParseServiceConfig compiled the document already
	}
	in.cur.Store(t)
}
