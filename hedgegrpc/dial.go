package hedgegrpc

import (
	"net/url"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// DialOptions returns every dial option that hedges a channel to target:
//
//	conn, err := grpc.NewClient(target, append(in.DialOptions(target), creds)...)
//
// They are, in order: Unary, with grpc.WithChainUnaryInterceptor; Stream,
// with grpc.WithChainStreamInterceptor; Config.ServiceConfig, if set,
// with grpc.WithDefaultServiceConfig; and, with grpc.WithResolvers, the
// channel's resolver builder wrapped so that the service configs its
// resolvers deliver reach the Interceptor (see below). A grpc.DialOption
// carries one setting, and grpc-go lets no other package combine
// several, hence a slice.
//
// Interceptors chained after the Interceptor's (metrics, logging,
// credentials) see each attempt as a call of its own, as A6 counts
// attempts; the caller, and interceptors before it, see one hedged call.
// A tied unary call's attempts, once the method's servers signal starts,
// are streams (see Interceptor.Unary): the stream interceptors see them,
// not the unary ones.
//
// The resolver: target must be the one given to grpc.NewClient. Its
// scheme names the builder to wrap, among resolvers and then grpc-go's
// registry; for a target with no registered scheme, DialOptions wraps the
// builders of the schemes grpc-go falls back to ("dns" for NewClient,
// "passthrough" for the deprecated Dial, or the one
// resolver.SetDefaultScheme set). Give resolvers (a resolver/manual
// builder, say) here instead of to grpc.WithResolvers: an unwrapped
// builder of the same scheme passed before these options would shadow
// the wrapped one. A service config the resolver delivers then replaces
// the hedging policies, method by method, for the calls that start
// after it: the document's methodConfig entries, with their hedging,
// timeouts and retries, and its retryThrottling, with New's Observer,
// MaxAttemptsLimit and Delays kept. As in grpc-go,
// a state without a config, a resolver error and an invalid config keep
// the policies in force, and grpc.WithDisableServiceConfig makes the
// channel ignore the resolver's configs, the hedging included. A document
// whose hedging parts are invalid (ParseServiceConfig's error) is invalid
// as a whole, as gRPC treats any invalid service config, although
// grpc-go alone would ignore the hedging parts: the channel keeps its
// previous config, or, if the resolver never sent a valid one, grpc-go
// fails the channel's calls until it does.
//
// Use the options for one channel only: the Interceptor holds its token
// bucket and follows its resolver.
func (in *Interceptor) DialOptions(target string, resolvers ...resolver.Builder) []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(in.Unary),
		grpc.WithChainStreamInterceptor(in.Stream),
	}
	if in.serviceConfig != "" {
		opts = append(opts, grpc.WithDefaultServiceConfig(in.serviceConfig))
	}
	if bs := in.builders(target, resolvers); len(bs) > 0 {
		opts = append(opts, grpc.WithResolvers(bs...))
	}
	return opts
}

// builders returns the resolver builders a channel to target may use,
// each wrapped: those given, and the registered one target names, or
// else those of the schemes grpc-go falls back to.
func (in *Interceptor) builders(target string, given []resolver.Builder) []resolver.Builder {
	var out []resolver.Builder
	schemes := map[string]bool{}
	add := func(b resolver.Builder) {
		if b != nil && !schemes[b.Scheme()] {
			schemes[b.Scheme()] = true
			out = append(out, &follower{Builder: b, in: in})
		}
	}
	for _, b := range given {
		add(b)
	}
	if u, err := url.Parse(target); err == nil && u.Scheme != "" {
		if schemes[u.Scheme] {
			return out
		}
		if b := resolver.Get(u.Scheme); b != nil {
			add(b)
			return out
		}
	}
	add(resolver.Get("dns"))
	add(resolver.Get(resolver.GetDefaultScheme()))
	return out
}

// follower is a resolver builder whose resolvers report their service
// configs to an Interceptor as well as to the channel.
type follower struct {
	resolver.Builder
	in *Interceptor
}

// Build builds the wrapped builder's resolver on a ClientConn that
// passes the configs it delivers on to the Interceptor; on the channel's
// own when the channel ignores service configs.
func (f *follower) Build(t resolver.Target, cc resolver.ClientConn, opts resolver.BuildOptions) (resolver.Resolver, error) {
	if opts.DisableServiceConfig {
		return f.Builder.Build(t, cc, opts)
	}
	return f.Builder.Build(t, &followedConn{ClientConn: cc, in: f.in}, opts)
}

// followedConn is the channel's side of a resolver, with the
// Interceptor listening in.
type followedConn struct {
	resolver.ClientConn
	in *Interceptor
}

// parsed is a service config that both grpc-go and ParseServiceConfig
// accepted: grpc-go's, which UpdateState hands back to grpc-go unwrapped,
// and this package's reading of it.
type parsed struct {
	serviceconfig.Config
	doc document
}

// ParseServiceConfig parses js with grpc-go's parser and with
// ParseServiceConfig. A document either refuses is refused.
func (c *followedConn) ParseServiceConfig(js string) *serviceconfig.ParseResult {
	r := c.ClientConn.ParseServiceConfig(js)
	if r == nil || r.Err != nil {
		return r
	}
	doc, err := parseDocument(js)
	if err != nil {
		return &serviceconfig.ParseResult{Err: err}
	}
	return &serviceconfig.ParseResult{Config: parsed{Config: r.Config, doc: doc}}
}

// UpdateState makes a valid config parsed here the Interceptor's, and
// passes the state on with grpc-go's own config in it.
func (c *followedConn) UpdateState(s resolver.State) error {
	if sc := s.ServiceConfig; sc != nil && sc.Err == nil {
		if p, ok := sc.Config.(parsed); ok {
			c.in.follow(p.doc)
			s.ServiceConfig = &serviceconfig.ParseResult{Config: p.Config}
		}
	}
	return c.ClientConn.UpdateState(s)
}
