package hedgegrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tailcut/hedge"
)

// The start signal of tied hedges: an attempt asks for it with TieKey in
// its request metadata, and a server whose Admission admits the call
// answers with StartedKey in response headers sent as the handler
// starts. The attempt then reports hedge.Started, and the call cancels
// its attempts that are still queued on other servers: they have done
// no work yet, so cancelling them costs nothing.
const (
	// TieKey is the request metadata key with which an attempt asks an
	// Admission for the start signal, whatever its value. The
	// Interceptor sets it, to "1", on every attempt of a hedged call.
	TieKey = "hedge-tie"

	// StartedKey is the response header metadata key of the start
	// signal. Headers that hold it say that the handler has started;
	// they do not commit a unary call, as headers otherwise do (A6): the
	// answer still races the other attempts that started.
	StartedKey = "hedge-started"
)

// unaryShape is the stream description of a unary method, as grpc-go
// calls one.
var unaryShape = &grpc.StreamDesc{}

// invokeTied makes attempt ctx of a unary call as grpc-go makes a unary
// call, on a stream of a unary method's shape, so that the attempt sees
// its response headers as they arrive and not only with its answer: an
// invoker shows them only when the call is over. Headers that hold
// StartedKey report the attempt started to hedge.Do, or, for a primary
// on the caller's goroutine (lead), to the call. The stream goes
// through the channel's stream interceptors, not through the unary ones
// chained after the Interceptor (see Interceptor.Unary); the
// Interceptor's own Stream lets it pass (tiedAttempt).
func (c *call) invokeTied(ctx context.Context, req, reply any, opts []grpc.CallOption, lead bool) error {
	cs, err := c.cc.NewStream(ctx, unaryShape, c.method, opts...)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req); err != nil {
		return err // a failure of the stream itself comes from RecvMsg, as in grpc-go's invoke
	}
	// Header returns nil for a stream that ended without headers;
	// RecvMsg then says how it ended.
	if md, _ := cs.Header(); startSignal(md) {
		if lead {
			c.leadStarted() // the primary on the caller's goroutine: ctx is not Do's
		} else {
			c.hedgeStarted(ctx)
		}
	}
	return cs.RecvMsg(reply)
}

// reportStart reports to hedge.Do that attempt k, whose context in Do is
// ctx, has started, which ties the attempts of the call in flight that
// have not. With CommitOnHeaders, the start and a commit are ordered by
// the watch's mu: a start that comes once the call has committed to
// another attempt ties nothing, since hedge.Do would drop the answer A6
// ends the call with, while the commit had cancelled the attempt that
// started; and headers that come from an attempt that a start has tied
// commit nothing (see headers). hedge.Started takes only the locks of
// hedge.Do's call, under which hedge.Do calls no code of this package,
// and runs no callback.
func (c *call) reportStart(ctx context.Context, k int) {
	w := c.watch.Load()
	if w == nil {
		hedge.Started(ctx) // no commit on headers: nothing to order
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := c.commit.Load(); n != 0 && int(n) != k+1 || w.began&(1<<slot(k)) != 0 || ctx.Err() != nil {
		return // committed elsewhere, reported already, or out of the race
	}
	hedge.Started(ctx)
	w.began |= 1 << slot(k)
	w.ties++
}

// tiedAttempt reports whether a stream that the Interceptor's Stream
// sees is a unary call's attempt that invokeTied makes: it goes to the
// streamer as it is, since the unary call hedges it.
func tiedAttempt(ctx context.Context, method string) bool {
	c := unaryCallOf(ctx)
	return c != nil && c.method == method
}

// startSignal reports whether response headers md are an Admission's
// start signal.
func startSignal(md metadata.MD) bool { return len(md[StartedKey]) > 0 }

// commits reports whether response headers md commit a call, as A6 has
// headers do: headers that carry the start signal only tell that the
// handler started. Nil headers (a trailers-only response) commit nothing.
func commits(md metadata.MD) bool { return md != nil && !startSignal(md) }

// askStart returns attempt k's context with grpc-previous-rpc-attempts
// set (withPreviousAttempts) and TieKey, which asks an Admission for the
// start signal.
func askStart(ctx context.Context, k int) context.Context {
	ctx = withPreviousAttempts(ctx, k)
	if metadata.ValueFromOutgoingContext(ctx, TieKey) != nil {
		return ctx // forwarded by a proxy, or set by the caller: it asks already
	}
	return metadata.AppendToOutgoingContext(ctx, TieKey, "1")
}
