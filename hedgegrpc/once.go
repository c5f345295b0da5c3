package hedgegrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tailcut/hedge"
)

// once makes a unary call that is not hedged, through invoker, and counts
// it in the token bucket: A6 throttles by every call of the channel, and
// a channel whose unhedged calls fail must stop hedging the others. m is
// the call's method, nil if no name covers it.
func (t *table) once(ctx context.Context, m *method, name string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	if t == nil || t.bucket == nil {
		return invoker(ctx, name, req, reply, cc, opts...)
	}
	var trailer metadata.MD // for a pushback, which counts whatever the code
	err := invoker(ctx, name, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))...)
	t.countOnce(ctx, m, trailer, err)
	return err
}

// onceStream makes a stream that is not hedged, through streamer, and
// counts it in the token bucket when it ends, as once does a unary call.
func (t *table) onceStream(ctx context.Context, m *method, desc *grpc.StreamDesc, cc *grpc.ClientConn, name string, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	if t == nil || t.bucket == nil {
		return streamer(ctx, desc, cc, name, opts...)
	}
	c := &counted{t: t, m: m, ctx: ctx}
	// grpc-go sets the trailer before it runs OnFinish.
	return streamer(ctx, desc, cc, name, append(opts[:len(opts):len(opts)], grpc.Trailer(&c.trailer), grpc.OnFinish(c.finish))...)
}

// counted is an unhedged stream waiting to be counted.
type counted struct {
	t       *table
	m       *method
	ctx     context.Context
	trailer metadata.MD
}

func (c *counted) finish(err error) { c.t.countOnce(c.ctx, c.m, c.trailer, err) }

// countOnce tells the token bucket how an unhedged call ended: OK refills
// it; a failure drains it if its code is non-fatal for m, or if its
// trailer holds a pushback that says not to retry. A call whose caller
// gave up says nothing about the server, and counts for nothing.
func (t *table) countOnce(ctx context.Context, m *method, trailer metadata.MD, err error) {
	o := hedge.Accept
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return
	case m != nil && m.isNonFatal(codeOf(err)), stopsHedging(trailer):
		o = hedge.Retryable
	default:
		return
	}
	t.bucket.Done(ctx, 0, o)
}
