package hedgeotel

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// AttemptTransport marks the span that an instrumented transport (such
// as otelhttp's) makes for each attempt of a hedged request: it adds
// hedge.attempt, and http.request.resend_count on the attempts after the
// first as the HTTP semantic conventions ask, and on an attempt that lost
// the race, hedge.superseded and status Ok in place of the Error that the
// cancellation would set. It must sit inside that transport, which hands
// it the request with the attempt's span in its context; give that
// transport the MeterProvider of AttemptMeterProvider, so that its
// metrics do not count a loser as an error either:
//
//	client := &http.Client{Transport: &hedgehttp.Transport{
//		Base: otelhttp.NewTransport(&hedgeotel.AttemptTransport{},
//			otelhttp.WithMeterProvider(hedgeotel.AttemptMeterProvider(mp))),
//	}}
//
// Outside it, it would find the caller's span; it marks only client
// spans, so a server's or an internal span is left alone. Requests that
// are no attempt of a hedged one pass through unmarked. (Within a
// hedge.Do of your own, rather than a hedgehttp.Transport, the primary
// cannot be told from a request that is not hedged, so only the hedges
// carry hedge.attempt; every loser is marked superseded.) An attempt that
// answered before it was cancelled (its response came as another was
// chosen) is drained and closed by the Transport, and its span ends as
// any other that read a response.
//
// The zero value sends through http.DefaultTransport. An AttemptTransport
// is safe for concurrent use; set Base before its first request.
type AttemptTransport struct {
	// Base sends each request. Nil means http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip marks the span of req's context, sends req through Base, and
// marks the span superseded if Base failed because the attempt lost:
// hedgehttp.Superseded, or, for an attempt of a hedge.Do of your own,
// hedge.ErrSuperseded as the context's cause.
func (t *AttemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ctx := req.Context()
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return base.RoundTrip(req)
	}
	if k := hedge.Attempt(ctx); k > 0 || hedgehttp.Route(ctx) != "" {
		markAttempt(span, k, &httpAttemptAttrs)
	}
	resp, err := base.RoundTrip(req)
	if err != nil && (hedgehttp.Superseded(ctx) || causeSuperseded(ctx)) {
		MarkSuperseded(span)
	}
	return resp, err
}

// causeSuperseded reports whether ctx ended because hedge.Do chose
// another attempt's result.
func causeSuperseded(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), hedge.ErrSuperseded)
}
