// Package hedgegrpc hedges unary grpc-go calls as gRFC A6 specifies
// hedging, on top of the hedge module. grpc-go implements A6's retries but
// not its hedging; this package is the missing half, as a client
// interceptor:
//
//	cfg, err := hedgegrpc.ParseServiceConfig(`{
//	  "methodConfig": [{
//	    "name": [{"service": "example.Profiles", "method": "Get"}],
//	    "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.05s",
//	                      "nonFatalStatusCodes": ["UNAVAILABLE"]}
//	  }],
//	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
//	}`)
//	in, err := hedgegrpc.New(cfg)
//	conn, err := grpc.NewClient(target, creds, in.DialOption())
//
// For a hedged method, the interceptor sends the call, and another copy
// every hedgingDelay, up to maxAttempts, all under the caller's deadline.
// An OK answer wins and cancels the others. A non-fatal code starts the
// next copy at once (later ones follow at hedgingDelay from there); any
// other code cancels the others and is returned. When every copy failed,
// the last failure is returned. Copies after the first carry
// grpc-previous-rpc-attempts. Server pushback (grpc-retry-pushback-ms)
// and retryThrottling are honoured as A6 says; see Interceptor.
//
// Each attempt receives into a reply message of its own, with header,
// trailer and peer of its own; only the winner's are copied to the
// caller's reply and to its grpc.Header, grpc.Trailer and grpc.Peer
// options. Attempts share only the request, which gRPC reads and never
// writes.
//
// Streaming calls pass through unhedged: the package installs no stream
// interceptor. A6 hedges a stream by buffering every message the client
// sends, replaying the buffer to each copy, and committing to one copy
// as soon as the caller could see anything of the answer (headers or a
// first message), since the caller cannot take back what it has read.
// That needs the transport's buffers and its commit point, below any
// interceptor; a hedge above the transport would either hand the caller
// two interleaved answer streams or wait for a whole answer first, which
// is a unary call.
//
// Hedge only idempotent methods: a hedged call may run several times on
// the server. Do not also give a hedged method a retryPolicy in the
// channel's service config; A6 allows a method one or the other.
package hedgegrpc

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tailcut/hedge"
)

// The metadata keys of A6.
const (
	previousAttemptsKey = "grpc-previous-rpc-attempts"
	pushbackKey         = "grpc-retry-pushback-ms"
)

// Interceptor hedges the unary calls of one channel. Make one per
// grpc.ClientConn with New: A6 throttles per server name, and the
// Interceptor holds that channel's token bucket. It is safe for
// concurrent use. The zero Interceptor hedges nothing.
//
// Throttling: with Config.RetryThrottling, a failure with a non-fatal code
// drains one token, an OK answer refills TokenRatio, fatal failures and
// cancelled losers change nothing, and no hedge starts while MaxTokens/2
// or fewer tokens are left. The first attempt always goes out.
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
	methods map[string]*method // by name: "", "svc" or "svc/method"
	bucket  *hedge.TokenBucket // nil: no throttling
}

// New validates cfg and returns an Interceptor for one channel. An invalid
// cfg is an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Interceptor, error) {
	methods, bucket, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	return &Interceptor{methods: methods, bucket: bucket}, nil
}

// DialOption installs the interceptor on a channel with
// grpc.WithChainUnaryInterceptor. Interceptors chained after it (metrics,
// logging, credentials) see each attempt as a call of its own, as A6
// counts attempts; the caller, and interceptors before it, see one hedged
// call.
func (in *Interceptor) DialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(in.Unary)
}

// Unary is a grpc.UnaryClientInterceptor. It hedges method as its policy
// says. It calls invoker once, unhedged, for a method without a policy,
// and for a request or reply that is not a proto.Message (a custom
// codec's), which it could neither copy nor make afresh for each attempt.
//
// Attempts send a copy of req, taken before the first one starts, and
// receive into replies of their own: a loser may still be sending or
// receiving after Unary returns, when the caller is free to reuse req and
// reply. The copy costs one proto.Clone per call.
//
// When the caller's context ends first, Unary returns a status error with
// codes.DeadlineExceeded or codes.Canceled, as grpc-go does. If an attempt
// (that is, invoker) panics, Unary panics with a *hedge.PanicError.
func (in *Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	m := in.lookup(method)
	msg, ok := reply.(proto.Message)
	reqMsg, reqOK := req.(proto.Message)
	if m == nil || !ok || !reqOK {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	// Everything attempts read of the caller's is copied here, before the
	// first starts: losers may run on after Unary returns.
	c := &call{m: m, bucket: in.bucket, invoker: invoker, cc: cc, method: method,
		req: proto.Clone(reqMsg), replyType: msg.ProtoReflect().Type()}
	c.ctx = callCtx{ctx, method}
	c.opts, c.out = split(opts)
	p := m.policy
	p.Budget = c
	a, err := hedge.Do(&c.ctx, p, c.attempt)
	if err != nil {
		if cerr := contextError(ctx, err); cerr != nil {
			a, err = nil, cerr // no attempt's answer: the caller's context ended
		}
	}
	if a != nil && c.out != nil {
		c.out.deliver(a)
	}
	if err == nil {
		proto.Reset(msg)
		proto.Merge(msg, a.reply)
	}
	if c.out != nil {
		for _, f := range c.out.finish {
			f(err)
		}
	}
	return err
}

// lookup returns the policy of a full method name ("/svc/method"): the
// method's own, else its service's, else the default; nil if none.
func (in *Interceptor) lookup(full string) *method {
	if len(in.methods) == 0 {
		return nil
	}
	name := strings.TrimPrefix(full, "/")
	if m, ok := in.methods[name]; ok {
		return m
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		if m, ok := in.methods[name[:i]]; ok {
			return m
		}
	}
	return in.methods[""]
}

// attempt is what one attempt received: a reply of its own, and its own
// header, trailer and peer, so that attempts share nothing they write.
type attempt struct {
	reply   proto.Message
	header  metadata.MD
	trailer metadata.MD
	peer    peer.Peer
}

// stopBit in call.held means pushback said: no more hedges for this call.
const stopBit = 1 << 31

// call is one hedged call. It is also the call's hedge.Budget: it wraps
// the channel's token bucket with A6's server pushback, which the core's
// Budget contract makes race-free. Do calls Allow and Done under the
// call's lock, and calls Done for an attempt before it starts the attempt
// that a retryable result lets start at once; so an attempt that waits out
// a pushback holds every other start back until its Done, and the next
// attempt starts exactly when the wait ends.
type call struct {
	ctx       callCtx // the caller's context, with the method: Do runs the call under it
	m         *method
	bucket    *hedge.TokenBucket
	invoker   grpc.UnaryInvoker
	cc        *grpc.ClientConn
	method    string
	req       proto.Message            // a copy of the caller's; attempts only read it
	replyType protoreflect.MessageType // the caller's reply's, which attempts never touch
	opts      []grpc.CallOption        // a copy of the caller's, less those in out
	out       *outputs                 // nil: the caller asked for none
	started   atomic.Int32             // attempts that have called fn
	held      atomic.Uint32            // bit k: attempt k waits out a pushback; stopBit: no more hedges
	stopped   atomic.Uint32            // bit k: attempt k got a pushback that said stop
}

// Allow grants an extra attempt unless pushback holds it back or the
// token bucket refuses it.
func (c *call) Allow(ctx context.Context, k int) bool {
	if k >= 1 && c.held.Load() != 0 {
		return false
	}
	return c.bucket == nil || c.bucket.Allow(ctx, k)
}

// Done ends attempt k's pushback hold and tells the token bucket how it
// ended; a failure whose pushback said stop counts as a failure even when
// its code was fatal.
func (c *call) Done(ctx context.Context, k int, o hedge.Outcome) {
	bit := uint32(1) << k
	if c.held.Load()&bit != 0 {
		c.held.And(^bit)
	}
	if c.bucket == nil {
		return
	}
	if o == hedge.Terminal && c.stopped.Load()&bit != 0 {
		o = hedge.Retryable
	}
	c.bucket.Done(ctx, k, o)
}

// attempt is the function hedge.Do runs for each attempt.
func (c *call) attempt(ctx context.Context) (*attempt, error) {
	k := hedge.Attempt(ctx)
	c.started.Add(1)
	a := &attempt{reply: c.replyType.New().Interface()}
	// A slice per attempt: attempts appending to the shared c.opts would
	// race for its spare capacity.
	opts := make([]grpc.CallOption, len(c.opts), len(c.opts)+3)
	copy(opts, c.opts)
	opts = append(opts, grpc.Trailer(&a.trailer))
	if c.out != nil {
		if len(c.out.headers) > 0 {
			opts = append(opts, grpc.Header(&a.header))
		}
		if len(c.out.peers) > 0 {
			opts = append(opts, grpc.Peer(&a.peer))
		}
	}
	err := c.invoker(withPreviousAttempts(ctx, k), c.method, c.req, a.reply, c.cc, opts...)
	if err != nil {
		err = c.pushback(ctx, k, a.trailer, err)
	}
	return a, err
}

// pushback applies the server's grpc-retry-pushback-ms, if attempt k's
// trailer holds one, and returns err. For a pushback of n ms after a
// non-fatal failure, it returns only after n ms (or when the call ends),
// holding every other start back meanwhile: the core then starts the next
// attempt at once, as for any non-fatal failure, which is n ms after the
// failure came, and schedules the ones after it from there.
func (c *call) pushback(ctx context.Context, k int, trailer metadata.MD, err error) error {
	v := trailer[pushbackKey]
	if len(v) == 0 {
		return err
	}
	ms, perr := strconv.ParseInt(v[0], 10, 32)
	if perr != nil || ms < 0 {
		c.stopped.Or(1 << k)
		c.held.Or(stopBit)
		return err
	}
	d := time.Duration(ms) * time.Millisecond
	if !c.m.isNonFatal(codeOf(err)) || d == 0 || int(c.started.Load()) >= c.m.max || c.held.Load()&stopBit != 0 {
		return err // nothing to wait for: no attempt will follow this one
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
		// No attempt could start before the deadline: waiting would only
		// turn the server's answer into DeadlineExceeded.
		c.held.Or(stopBit)
		return err
	}
	c.held.Or(1 << k)
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	return err
}

// withPreviousAttempts sets grpc-previous-rpc-attempts to k on attempt k's
// outgoing metadata: absent on the first attempt, 1 on the second, and so
// on. A value already there (a proxy forwarding its incoming metadata) is
// replaced, so each attempt says what it is.
func withPreviousAttempts(ctx context.Context, k int) context.Context {
	stale := metadata.ValueFromOutgoingContext(ctx, previousAttemptsKey) != nil
	switch {
	case !stale && k == 0:
		return ctx
	case !stale:
		return metadata.AppendToOutgoingContext(ctx, previousAttemptsKey, strconv.Itoa(k))
	}
	md, _ := metadata.FromOutgoingContext(ctx) // a copy
	if k == 0 {
		delete(md, previousAttemptsKey)
	} else {
		md.Set(previousAttemptsKey, strconv.Itoa(k))
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// outputs are the caller's call options that gRPC would otherwise apply
// once per attempt: each attempt collects into its own, and the winner's
// are copied to these once; OnFinish callbacks run once, with the call's
// result.
type outputs struct {
	headers, trailers []*metadata.MD
	peers             []*peer.Peer
	finish            []func(error)
}

// split copies opts, less the options that must not run per attempt,
// which it returns apart (nil if there are none). The copy is the
// attempts' own: the caller may reuse its slice once Unary returns.
func split(opts []grpc.CallOption) ([]grpc.CallOption, *outputs) {
	i := 0
	for i < len(opts) && !perCall(opts[i]) {
		i++
	}
	if i == len(opts) {
		return slices.Clone(opts), nil
	}
	rest := append([]grpc.CallOption(nil), opts[:i]...)
	out := &outputs{}
	for _, o := range opts[i:] {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			out.headers = append(out.headers, o.HeaderAddr)
		case *grpc.HeaderCallOption:
			out.headers = append(out.headers, o.HeaderAddr)
		case grpc.TrailerCallOption:
			out.trailers = append(out.trailers, o.TrailerAddr)
		case *grpc.TrailerCallOption:
			out.trailers = append(out.trailers, o.TrailerAddr)
		case grpc.PeerCallOption:
			out.peers = append(out.peers, o.PeerAddr)
		case *grpc.PeerCallOption:
			out.peers = append(out.peers, o.PeerAddr)
		case grpc.OnFinishCallOption:
			out.finish = append(out.finish, o.OnFinish)
		case *grpc.OnFinishCallOption:
			out.finish = append(out.finish, o.OnFinish)
		default:
			rest = append(rest, o)
		}
	}
	return rest, out
}

func perCall(o grpc.CallOption) bool {
	switch o.(type) {
	case grpc.HeaderCallOption, *grpc.HeaderCallOption,
		grpc.TrailerCallOption, *grpc.TrailerCallOption,
		grpc.PeerCallOption, *grpc.PeerCallOption,
		grpc.OnFinishCallOption, *grpc.OnFinishCallOption:
		return true
	}
	return false
}

// deliver copies the returned attempt's header, trailer and peer to the
// caller's options.
func (o *outputs) deliver(a *attempt) {
	for _, h := range o.headers {
		*h = a.header
	}
	for _, t := range o.trailers {
		*t = a.trailer
	}
	for _, p := range o.peers {
		*p = a.peer
	}
}

func codeOf(err error) codes.Code { return status.Code(err) }

// contextError returns the call's error as grpc-go's own calls return it
// when the caller's context ends: a status with codes.DeadlineExceeded or
// codes.Canceled and the context's cause as its message. hedge.Do returns
// the cause as it is, or the failure of an attempt that the end of the
// context cut off, whichever it saw first: both mean the same. It returns
// nil for a server's own failure, or an error of another kind, which the
// call returns as it is.
func contextError(ctx context.Context, err error) error {
	ctxErr, cause := ctx.Err(), context.Cause(ctx)
	if ctxErr == nil {
		// The deadline may have passed with ctx's timer yet to fire: the
		// attempts' own timers for it can go off first.
		deadline, ok := ctx.Deadline()
		if !ok || time.Now().Before(deadline) {
			return nil
		}
		ctxErr, cause = context.DeadlineExceeded, context.DeadlineExceeded
	}
	switch st, isStatus := status.FromError(err); {
	case isStatus && st.Code() != codes.Canceled && st.Code() != codes.DeadlineExceeded:
		return nil
	case !isStatus && err != cause && !errors.Is(err, ctxErr):
		return nil
	}
	return status.Error(status.FromContextError(ctxErr).Code(), cause.Error())
}
