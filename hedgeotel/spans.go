package hedgeotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tailcut/hedge"
)

// resendCountAttr is the HTTP semantic conventions' count of the times a
// request was sent before this one, set on attempts after the first.
const resendCountAttr = attribute.Key("http.request.resend_count")

// attemptAttrs[k] is the hedge.attempt attribute of attempt k, and
// httpAttemptAttrs[k] the same with http.request.resend_count from k = 1,
// made once so that setting them allocates no variadic slice.
var attemptAttrs, httpAttemptAttrs = func() (a, h [hedge.MaxAttemptsLimit][]attribute.KeyValue) {
	for k := range a {
		a[k] = []attribute.KeyValue{AttemptAttr.Int(k)}
		h[k] = a[k]
		if k > 0 {
			h[k] = []attribute.KeyValue{AttemptAttr.Int(k), resendCountAttr.Int(k)}
		}
	}
	return a, h
}()

var supersededAttrs = []attribute.KeyValue{SupersededAttr.Bool(true)}

// MarkAttempt sets hedge.attempt to k on span, if span is a client span
// that records and k is below hedge.MaxAttemptsLimit. AttemptTransport
// and hedgeotelgrpc.StatsHandler call it; other instrumentation can too.
// Like the span's own methods, it may be called concurrently.
func MarkAttempt(span trace.Span, k int) {
	markAttempt(span, k, &attemptAttrs)
}

func markAttempt(span trace.Span, k int, attrs *[hedge.MaxAttemptsLimit][]attribute.KeyValue) {
	if k < 0 || k >= len(attrs) || !attemptSpan(span) {
		return
	}
	span.SetAttributes(attrs[k]...)
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
