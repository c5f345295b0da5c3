package hedgegrpc

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tailcut/hedge"
)

// Unary is a grpc.UnaryClientInterceptor. It hedges method as its policy
// says. It calls invoker once, unhedged, for a method without a policy
// that hedges; for a request or reply that is not a proto.Message (a
// custom codec's), which it could neither copy nor make afresh for each
// attempt; and for a request whose proto.Size, plus the 5 bytes of its
// frame header, exceeds the call's grpc.MaxRetryRPCBufferSize
// (DefaultMaxRetryRPCBufferSize without it), which A6 sends once and
// never again, as grpc-go's retries do. Those calls count in the token
// bucket too.
//
// Attempts send a copy of req, taken before the first one starts, and
// receive into replies of their own: a loser may still be sending or
// receiving after Unary returns, when the caller is free to reuse req and
// reply. The copy costs one proto.Clone per call.
//
// An attempt commits the call, as A6 says, once the server has sent
// response headers. Unary learns of them when the attempt ends, unless
// the channel has CommitOnHeaders, since grpc-go shows a unary call's
// headers before its answer to its stats handlers alone. So a failure
// that came after headers ends the call, whatever its code, as grpc-go's
// own retries stop at one (a handler that sets headers before it fails
// sends them first: fail with trailers only to be hedged); but without
// CommitOnHeaders, a primary that sent its headers early and answers late
// is still hedged, and a hedge that answers first wins. Servers send a
// unary call's headers with its answer unless a handler sends them early,
// so the two rarely differ.
//
// The method's timeout in grpc-go's service config bounds the whole
// call, as A6 says, not each attempt, as grpc-go alone would: when it
// passes, Unary returns a status error with codes.DeadlineExceeded. So
// does it when the caller's context's deadline passes, and one with
// codes.Canceled when the caller cancels it, as grpc-go does. If an
// attempt (that is, invoker) panics, Unary panics with a
// *hedge.PanicError.
func (in *Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	t := in.table()
	m := t.lookup(method)
	msg, ok := reply.(proto.Message)
	reqMsg, reqOK := req.(proto.Message)
	if m == nil || !m.hedged() || !ok || !reqOK || proto.Size(reqMsg)+frameHeader > bufferLimit(opts) {
		return t.once(ctx, m, method, req, reply, cc, invoker, opts)
	}
	// Everything attempts read of the caller's is copied here, before the
	// first starts: losers may run on after Unary returns.
	c := &call{invoker: invoker, cc: cc, method: method,
		req: proto.Clone(reqMsg), replyType: msg.ProtoReflect().Type()}
	c.m, c.bucket = m, t.bucket
	c.ctx = callCtx{ctx, method, c}
	c.opts, c.out = split(opts)
	p := m.unary
	p.Budget = &c.throttle
	a, err := hedge.Do(&c.ctx, p, c.attempt)
	if err != nil {
		if cerr := callError(ctx, err); cerr != nil {
			a, err = nil, cerr // no attempt's answer: the call's deadline passed, or the caller gave up
		}
	}
	if a != nil && c.out != nil {
		c.out.deliver(&a.received)
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

// unaryAttempt is what one attempt received: a reply of its own, and its
// own header, trailer and peer, so that attempts share nothing they write.
type unaryAttempt struct {
	reply proto.Message
	received
	commit commitState // what CommitOnHeaders had seen when the attempt ended
}

// commitState is whether a call had committed when one of its attempts
// ended, and to which attempt.
type commitState int8

const (
	uncommitted commitState = iota
	committedHere
	committedElsewhere
)

// call is one hedged unary call. Its throttle is the call's hedge.Budget.
type call struct {
	throttle
	ctx       callCtx // the caller's context, with the method: Do runs the call under it
	invoker   grpc.UnaryInvoker
	cc        *grpc.ClientConn
	method    string
	req       proto.Message            // a copy of the caller's; attempts only read it
	replyType protoreflect.MessageType // the caller's reply's, which attempts never touch
	opts      []grpc.CallOption        // a copy of the caller's, less those in out
	out       *outputs                 // nil: the caller asked for none
	watch     atomic.Pointer[watch]    // made when CommitOnHeaders tags the first attempt
}

// attempt is the function hedge.Do runs for each attempt.
func (c *call) attempt(ctx context.Context) (*unaryAttempt, error) {
	growStack(0) // before the invoker, while the stack is shallow
	k := hedge.Attempt(ctx)
	c.started.Add(1)
	a := &unaryAttempt{reply: c.replyType.New().Interface()}
	// A slice per attempt: attempts appending to the shared c.opts would
	// race for its spare capacity.
	// The header tells a failure after headers, which A6 commits to,
	// from one with trailers only; it changes the outcome only of a
	// failure whose code would let the call go on.
	opts := c.out.ask(append(make([]grpc.CallOption, 0, len(c.opts)+3), c.opts...), &a.received, true, c.m.nonFatal != 0)
	err := c.invoker(withPreviousAttempts(ctx, k), c.method, c.req, a.reply, c.cc, opts...)
	c.untag(k)
	switch n := c.commit.Load(); {
	case n == 0:
	case int(n) == k+1:
		a.commit = committedHere
	default:
		a.commit = committedElsewhere
		c.lost.Or(1 << k)
		return a, err
	}
	switch {
	case err == nil:
	case a.commit == committedHere, a.header != nil:
		// The server sent headers before it failed, which committed the
		// call to this attempt (A6): classify ends the call with it.
		if c.m.isNonFatal(codeOf(err)) {
			c.drains.Or(1 << k)
		}
	default:
		err = c.pushback(ctx, k, a.trailer, err)
	}
	return a, err
}

// classifyUnary is the unary policies' classifier: the method's, except
// that a failure that came after response headers ends the call, as
// grpc-go's own retries stop at one, and that an attempt that ended after
// another committed the call decides nothing: the committed one's answer
// ends the call.
func (m *method) classifyUnary(a *unaryAttempt, err error) hedge.Outcome {
	switch {
	case a.commit == committedElsewhere:
		return hedge.Failed
	case err != nil && (a.commit == committedHere || a.header != nil):
		return hedge.Terminal
	}
	return m.outcome(err)
}
