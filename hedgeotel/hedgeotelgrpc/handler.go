// Package hedgeotelgrpc marks the spans that a gRPC stats handler, such
// as otelgrpc's, makes for each attempt of a call that
// github.com/tailcut/hedge/hedgegrpc hedges: hedge.attempt on every
// attempt's span, with gRFC A72's previous-rpc-attempts (the attempts
// that started before it), and on the attempts that lost the race
// hedge.superseded=true with status Ok in place of the Error that their
// cancellation would set. Give otelgrpc's handler the MeterProvider of
// hedgeotel.AttemptMeterProvider, so that its metrics do not count a
// loser as an error either.
//
//	conn, err := grpc.NewClient(target, append(in.DialOptions(target), creds,
//		grpc.WithStatsHandler(hedgeotelgrpc.StatsHandler(otelgrpc.NewClientHandler())))...)
//
// It is a stats handler rather than an interceptor because otelgrpc makes
// its spans in a stats handler, inside the invoker: an interceptor chained
// after the hedging one runs before an attempt's span begins and after it
// has ended. Metrics come from hedgeotel.Observer, set as the
// hedgegrpc.Config's Observer with hedgeotel.WithKey(hedgegrpc.Method).
package hedgeotelgrpc

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/stats"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
	"github.com/tailcut/hedge/hedgeotel"
)

// StatsHandler returns a client stats.Handler that passes everything to h
// and marks the spans h puts in each RPC's context as a hedged call's
// attempts: hedge.attempt and previous-rpc-attempts once h has tagged the
// RPC, and, on an RPC that ended with an error because the call chose
// another attempt's answer (its context's cause is hedge.ErrSuperseded),
// hedge.superseded and status Ok, before h sets the status and ends the
// span. Only the spans h
// starts are marked, and only for RPCs that hedgegrpc hedges (or that are
// hedges of a hedge.Do of your own). Install it as the channel's stats
// handler in place of h. It is safe for concurrent use if h is.
func StatsHandler(h stats.Handler) stats.Handler { return &handler{h} }

type handler struct{ stats.Handler }

func (h *handler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	caller := trace.SpanFromContext(ctx).SpanContext()
	ctx = h.Handler.TagRPC(ctx, info)
	span := trace.SpanFromContext(ctx)
	if span.SpanContext().Equal(caller) {
		return ctx // h started no span: the one in ctx is the caller's
	}
	if k := hedge.Attempt(ctx); k > 0 || hedgegrpc.Method(ctx) != "" {
		hedgeotel.MarkAttempt(span, k)
		if k < len(previousAttempts) && span.IsRecording() {
			span.SetAttributes(previousAttempts[k]...)
		}
	}
	return ctx
}

func (h *handler) HandleRPC(ctx context.Context, rs stats.RPCStats) {
	if end, ok := rs.(*stats.End); ok && end.Client && end.Error != nil &&
		ctx.Err() != nil && errors.Is(context.Cause(ctx), hedge.ErrSuperseded) {
		hedgeotel.MarkSuperseded(trace.SpanFromContext(ctx))
	}
	h.Handler.HandleRPC(ctx, rs)
}

// previousAttempts[k] is gRFC A72's attribute of an attempt span, the
// count of the attempts before attempt k, made once so that setting it
// allocates no variadic slice.
var previousAttempts = func() (a [hedge.MaxAttemptsLimit][]attribute.KeyValue) {
	for k := range a {
		a[k] = []attribute.KeyValue{attribute.Int("previous-rpc-attempts", k)}
	}
	return a
}()
