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
// When the policy hedges at a fixed hedgingDelay above 0 (it has no
// Delay of its own), the primary runs on the caller's goroutine, with
// req and reply as they are, and a call it answers before the first
// hedge is due costs little more than a plain one: no goroutine, no copy.
// When a hedge falls due first, hedge.Do takes over the race, the primary
// running on as its attempt 0; Unary returns once the call is decided and
// the primary's invoker has returned, which it does at once when its
// context is cancelled, as grpc-go's does. With any other policy, every
// attempt, the primary included, runs under hedge.Do from the start.
// Attempts other than such a primary send a copy of req, taken before
// they start, and receive into replies of their own: a loser may still be
// sending or receiving after Unary returns, when the caller is free to
// reuse req and reply. The copy costs one proto.Clone per hedged call.
//
// Ties: the attempts of a call that hedge.Do runs from the start ask
// the server for the start signal (TieKey). A server whose Admission
// admits an attempt sends headers with StartedKey as the handler
// starts. Once a server of the method has done so, the attempts of its
// later calls are made as grpc-go makes a unary call, on a stream of a
// unary method's shape (grpc.ClientConn.NewStream), so that each sees
// its response headers as they arrive, not only with its answer: an
// attempt whose server signals its start reports hedge.Started, and the
// call cancels its attempts that have not started, which leave their
// server's queue without running. An attempt that started is never
// cancelled so, and hedges still start at their delays, in case the
// execution turns slow, unless a hedge.Adaptive whose calls queue holds
// them back (see hedge.Adaptive). Such attempts go through the channel's
// stream interceptors, not through the unary interceptors chained after
// the Interceptor. Against servers without Admission, which send no signal,
// attempts go through invoker as they would untied; Config.DisableTies
// keeps them there. A method hedged at a
// fixed hedgingDelay above 0 does not tie: its primary runs on the
// caller's goroutine, through invoker. Against a server that answers at
// once, asking costs a call 2 allocations more than an untied one, and
// a tied call against a server that signals 14 (TestTiedUnaryAllocs).
//
// An attempt commits the call, as A6 says, once the server has sent
// response headers, other than the start signal's, which says only that
// the handler started. Unary learns of them when the attempt ends, unless
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
// *hedge.PanicError; if it calls runtime.Goexit, so does Unary.
func (in *Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	t := in.table()
	m := t.lookup(method)
	msg, ok := reply.(proto.Message)
	reqMsg, reqOK := req.(proto.Message)
	if m == nil || !m.hedged() || !ok || !reqOK || proto.Size(reqMsg)+frameHeader > bufferLimit(opts) {
		return t.once(ctx, m, method, req, reply, cc, invoker, opts)
	}
	c := &call{invoker: invoker, cc: cc, method: method, callerReq: reqMsg, reply: msg, untied: in.untied}
	c.m, c.bucket = m, t.bucket
	c.ctx = callCtx{ctx, method, c}
	c.rest, c.out = split(opts)
	var a *unaryAttempt
	var err error
	if m.leads(ctx) {
		a, err = c.lead()
	} else {
		c.copyForAttempts()
		a, err = c.race(m.unary)
	}
	if a != nil && c.out != nil {
		c.out.deliver(&a.received)
	}
	if err == nil && a.reply != msg {
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

// race runs the call's attempts through hedge.Do under p, and returns the
// attempt whose answer the call returns (nil for a context's error) and
// the call's error, as grpc-go returns it.
func (c *call) race(p hedge.Policy[*unaryAttempt]) (*unaryAttempt, error) {
	p.Budget = &c.throttle
	a, err := hedge.Do(&c.ctx, p, c.attempt)
	if err != nil {
		if cerr := callError(c.ctx.Context, err); cerr != nil {
			return nil, cerr // no attempt's answer: the call's deadline passed, or the caller gave up
		}
	}
	return a, err
}

// copyForAttempts copies what attempts read of the caller's before the
// first of those hedge.Do runs starts: losers may run on after Unary
// returns, when the caller may change req and reuse its options' slice.
func (c *call) copyForAttempts() {
	c.req = proto.Clone(c.callerReq)
	c.replyType = c.reply.ProtoReflect().Type()
	c.opts = own(c.rest, c.out)
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
	callerReq proto.Message     // the caller's request, which only a primary on its goroutine sends
	reply     proto.Message     // the caller's reply
	rest      []grpc.CallOption // the caller's options less those in out; may be the caller's slice
	out       *outputs          // nil: the caller asked for none
	watch     atomic.Pointer[watch]
	untied    bool // Config.DisableTies: no attempt asks for the start signal

	// What the attempts that hedge.Do runs read, copied before the first
	// of them starts (copyForAttempts); they only read it.
	req       proto.Message            // a copy of the caller's
	replyType protoreflect.MessageType // the caller's reply's, which attempts never touch
	opts      []grpc.CallOption        // a copy of rest

	primary // the primary, when it runs on the caller's goroutine
}

// attempt is the function hedge.Do runs for each attempt.
func (c *call) attempt(ctx context.Context) (*unaryAttempt, error) {
	k := hedge.Attempt(ctx)
	if k == 0 && c.leading {
		return c.follow(ctx)
	}
	growStack(0) // before the invoker, while the stack is shallow
	c.started.Add(1)
	a := &unaryAttempt{reply: c.replyType.New().Interface()}
	// A slice per attempt: attempts appending to the shared c.opts would
	// race for its spare capacity.
	untied := c.untied || c.startedFirst
	opts := c.ask(make([]grpc.CallOption, 0, len(c.opts)+3), c.opts, a, !untied)
	var err error
	switch {
	case untied:
		err = c.invoker(withPreviousAttempts(ctx, k), c.method, c.req, a.reply, c.cc, opts...)
	case c.m.signals.Load():
		err = c.invokeTied(askStart(ctx, k), c.req, a.reply, opts, false)
	default:
		err = c.invoker(askStart(ctx, k), c.method, c.req, a.reply, c.cc, opts...)
		if startSignal(a.header) {
			c.m.signals.Store(true) // the method's later calls watch their headers
		}
	}
	c.untag(k)
	if !c.committed(k, a) {
		return a, err
	}
	return a, c.settle(ctx, k, a, err)
}

// ask returns buf with opts and the options that collect into a what the
// call needs of an attempt: always the trailer, for a pushback; the
// header, which tells a failure after headers, which A6 commits to, from
// one with trailers only, when it can change an outcome (a failure whose
// code would let the call go on), and when tied, since it tells whether
// the method's servers signal starts; and what the caller asked for.
func (c *call) ask(buf, opts []grpc.CallOption, a *unaryAttempt, tied bool) []grpc.CallOption {
	return c.out.ask(append(buf, opts...), &a.received, true, c.m.nonFatal != 0 || tied)
}

// committed notes in a whether the call had committed to an attempt
// (CommitOnHeaders) when attempt k ended, and reports false if it had
// committed to another: a then decides nothing.
func (c *call) committed(k int, a *unaryAttempt) bool {
	switch n := c.commit.Load(); {
	case n == 0:
	case int(n) == k+1:
		a.commit = committedHere
	default:
		a.commit = committedElsewhere
		c.lost.Or(1 << k)
		return false
	}
	return true
}

// settle applies what attempt k's failure says beyond its code, and
// returns err: a failure after response headers, which committed the call
// to it (A6), drains the token bucket if its code is non-fatal, although
// it ends the call; any other failure obeys its pushback, which may wait
// (only for a failure that lets the call go on: see throttle.pushback).
func (c *call) settle(ctx context.Context, k int, a *unaryAttempt, err error) error {
	switch {
	case err == nil:
	case a.commit == committedHere, commits(a.header):
		if c.m.isNonFatal(codeOf(err)) {
			c.drains.Or(1 << k)
		}
	default:
		err = c.pushback(ctx, k, a.trailer, err)
	}
	return err
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
	case err != nil && (a.commit == committedHere || commits(a.header)):
		return hedge.Terminal
	}
	return m.outcome(err)
}
