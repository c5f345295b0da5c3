package hedgegrpc

import (
	"context"
	"sync"

	"google.golang.org/grpc/stats"

	"github.com/tailcut/hedge"
)

// CommitOnHeaders returns a client stats.Handler that shows hedged unary
// calls their attempts' response headers as they arrive, so that a call
// commits to the first attempt that receives them, as A6 says: no hedge
// starts after that, the other attempts are cancelled, and the call ends
// with that attempt's answer, whatever it is. A start signal (see
// StartedKey) that comes after the commit ties nothing, and the headers
// of an attempt that a start signal tied commit nothing. Install it on
// the hedged channel:
//
//	conn, err := grpc.NewClient(target, append(in.DialOptions(target), creds,
//		grpc.WithStatsHandler(hedgegrpc.CommitOnHeaders()))...)
//
// Without it, a unary call learns of an attempt's headers only when the
// attempt ends (see Interceptor.Unary). It matters for servers that send
// a unary call's headers before its answer (grpc.SendHeader); most send
// them together. It is not among DialOptions because grpc-go builds the
// events of every call of a channel that has a stats handler: a channel
// without one pays 15 allocations and 1.35 KB per call, hedged or not; a
// channel that has one already (otelgrpc's, say) does not. The watch
// itself takes a hedged call 7 allocations more (BenchmarkUnary).
//
// It handles only the RPCs of hedged unary calls, on any channel, and is
// safe for concurrent use.
func CommitOnHeaders() stats.Handler { return headerWatch{} }

type headerWatch struct{}

// TagRPC gives each attempt of a hedged unary call a context that the
// call can cancel when another attempt commits it, and that names the
// attempt to HandleRPC. An RPC that an attempt's interceptors make on the
// way, of another method, is not the attempt's.
func (headerWatch) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if c := unaryCallOf(ctx); c != nil && info.FullMethodName == c.method {
		return c.tag(ctx)
	}
	return ctx
}

// HandleRPC commits a hedged unary call to the attempt whose response
// headers arrived first. A trailers-only response is InTrailer, not
// InHeader: it commits nothing, as A6 says.
func (headerWatch) HandleRPC(ctx context.Context, rs stats.RPCStats) {
	if h, ok := rs.(*stats.InHeader); ok && h.Client && !startSignal(h.Header) {
		if r, ok := ctx.Value(rpcKey{}).(*rpcCtx); ok {
			r.c.headers(r)
		}
	}
}

func (headerWatch) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (headerWatch) HandleConn(context.Context, stats.ConnStats) {}

// rpcCtx is the context TagRPC gives attempt k of call c: the attempt's,
// with a cancel of c's own.
type rpcCtx struct {
	context.Context
	c *call
	k int
}

type rpcKey struct{}

func (r *rpcCtx) Value(key any) any {
	if key == (rpcKey{}) {
		return r
	}
	return r.Context.Value(key)
}

// unaryCallOf returns the hedged unary call ctx belongs to, or nil.
func unaryCallOf(ctx context.Context) *call {
	if c, ok := ctx.Value(methodCtxKey{}).(*callCtx); ok {
		return c.unary
	}
	return nil
}

// watch is what CommitOnHeaders keeps of one call: the cancel of each
// attempt's RPC, to end the others when one commits, and what orders a
// commit with the start signals (see reportStart). The call makes it
// when the handler tags its first attempt.
type watch struct {
	mu      sync.Mutex
	cancels [hedge.MaxAttemptsLimit]context.CancelCauseFunc
	// began has bit k once attempt k's start went to hedge.Started; ties
	// counts those starts, each of which tied the attempts then in flight
	// that had not started; tiesAt[k] is ties when attempt k's RPC was
	// tagged. An attempt tagged before a start it has not matched was
	// tied: its headers commit nothing.
	began  uint16
	ties   uint8
	tiesAt [hedge.MaxAttemptsLimit]uint8
}

// tag returns ctx, an attempt's, with a cancel of the call's own; already
// cancelled if another attempt has committed the call.
func (c *call) tag(ctx context.Context) context.Context {
	k := hedge.Attempt(ctx)
	w := c.watch.Load()
	if w == nil {
		c.watch.CompareAndSwap(nil, &watch{})
		w = c.watch.Load()
	}
	inner, cancel := context.WithCancelCause(ctx)
	ctx = &rpcCtx{Context: inner, c: c, k: k}
	w.mu.Lock()
	if n := c.commit.Load(); n != 0 && int(n) != k+1 {
		w.mu.Unlock()
		cancel(hedge.ErrSuperseded)
		return ctx
	}
	i := slot(k)
	if prev := w.cancels[i]; prev != nil {
		prev(nil) // grpc-go retried the attempt transparently: the old RPC is over
	} else {
		w.tiesAt[i] = w.ties
	}
	w.cancels[i] = cancel
	w.mu.Unlock()
	return ctx
}

// headers commits the call to attempt r.k, whose RPC r is, unless it is
// committed already or the attempt is out of the race, and cancels the
// other attempts' RPCs, with the cause Do gives losers. A tied attempt is
// out of the race, as is one whose RPC's context has ended: hedge.Do
// drops a tied attempt's answer, and a commit to it would cancel the
// attempt that started, which would end the call with its cancellation.
func (c *call) headers(r *rpcCtx) {
	w := c.watch.Load()
	if w == nil {
		return // not tagged: the handler came after the call started
	}
	k, i := r.k, slot(r.k)
	var others [hedge.MaxAttemptsLimit]context.CancelCauseFunc
	w.mu.Lock()
	tied := w.began&(1<<i) == 0 && w.ties != w.tiesAt[i]
	if tied || r.Err() != nil || !c.commit.CompareAndSwap(0, int32(k+1)) {
		w.mu.Unlock()
		return
	}
	for j, f := range w.cancels {
		if j != i {
			others[j] = f
		}
	}
	w.mu.Unlock()
	for _, f := range others {
		if f != nil {
			f(hedge.ErrSuperseded)
		}
	}
}

// slot is where a watch keeps what it knows of attempt k. A retry loop
// (hedge.Tries) numbers its tries' attempts across the loop, so k may be
// past hedge.MaxAttemptsLimit; the attempts of one call, at most that
// many, have consecutive numbers, and so slots of their own.
func slot(k int) int { return k % hedge.MaxAttemptsLimit }

// untag releases attempt k's cancel once its RPC is over.
func (c *call) untag(k int) {
	w := c.watch.Load()
	if w == nil {
		return
	}
	w.mu.Lock()
	f := w.cancels[slot(k)]
	w.cancels[slot(k)] = nil
	w.mu.Unlock()
	if f != nil {
		f(nil)
	}
}
