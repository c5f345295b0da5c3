package hedgeotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tailcut/hedge"
)

// attemptAttrs[k] is the hedge.attempt attribute of attempt k, made once
// so that setting it allocates no variadic slice.
var attemptAttrs = func() (a [hedge.MaxAttemptsLimit][]attribute.KeyValue) {
	for k := range a {
		a[k] = []attribute.KeyValue{AttemptAttr.Int(k)}
	}
	return a
}()

var supersededAttrs = []attribute.KeyValue{SupersededAttr.Bool(true)}

// MarkAttempt sets hedge.attempt to k on span, if span is a client span
// that records and k is below hedge.MaxAttemptsLimit. AttemptTransport
// and hedgeotelgrpc.StatsHandler call it; other instrumentation can too.
// Like the span's own methods, it may be called concurrently.
func MarkAttempt(span trace.Span, k int) {
	if k < 0 || k >= len(attemptAttrs) || !attemptSpan(span) {
		return
	}
	span.SetAttributes(attemptAttrs[k]...)
}

// MarkSuperseded marks span as the span of an attempt that lost the
// race, if it is a client span that records: hedge.superseded=true, and
// status Ok. Call it before the instrumentation that made the span sets
// an error status for the cancellation and ends it: the OpenTelemetry
// SDK treats Ok as final and ignores a later Error, while Unset would
// let it through. Attributes set by then stay, so otelhttp's error.type
// remains on the span.
func MarkSuperseded(span trace.Span) {
	if !attemptSpan(span) {
		return
	}
	span.SetAttributes(supersededAttrs...)
	span.SetStatus(codes.Ok, "")
}

// attemptSpan reports whether span may be marked as an attempt's: it
// records, and is a client span if it says what kind it is (the SDK's
// spans do). A span of another kind is the caller's, found where the
// attempt's own was expected: a helper placed outside the
// instrumentation that makes the attempts' spans.
func attemptSpan(span trace.Span) bool {
	if !span.IsRecording() {
		return false
	}
	if s, ok := span.(interface{ SpanKind() trace.SpanKind }); ok {
		return s.SpanKind() == trace.SpanKindClient
	}
	return true
}
