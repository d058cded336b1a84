package notify

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Trace context headers of a notification: the W3C Trace Context
// (https://www.w3.org/TR/trace-context/) of the span that decided the
// event (its metadata traceparent and tracestate), or, when the relay
// records spans, of the relay's publish span beneath it. Absent for an
// event decided outside any trace. The header names are the W3C field
// names, as OpenTelemetry's propagators write them.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// tracerName is the instrumentation scope of this package's spans.
const tracerName = "github.com/retrysafe/booking/projections/notify"

// traceContext is the W3C Trace Context propagator.
var traceContext = propagation.TraceContext{}

// natsCarrier is a propagation.TextMapCarrier over NATS headers, which are
// case-sensitive: the trace headers are read and written in lower case.
type natsCarrier nats.Header

func (c natsCarrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c natsCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }
func (c natsCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// TraceContext returns ctx continuing the trace whose context headers h
// carries (HeaderTraceparent, HeaderTracestate): that span becomes ctx's
// remote parent. Headers without a valid traceparent leave ctx as it is.
func TraceContext(ctx context.Context, h nats.Header) context.Context {
	if h.Get(HeaderTraceparent) == "" {
		return ctx
	}
	return traceContext.Extract(ctx, natsCarrier(h))
}

// startPublish starts the producer span of msg's publish to stream, a
// child of the trace its headers carry, and writes the span's context into
// them, so the consumer continues beneath it. Without tracer, or for an
// event decided outside any trace (no traceparent: the relay starts no
// trace of its own), it does nothing and returns nil.
func startPublish(tracer trace.Tracer, stream string, msg *nats.Msg) trace.Span {
	if tracer == nil || msg.Header.Get(HeaderTraceparent) == "" {
		return nil
	}
	ctx, span := tracer.Start(TraceContext(context.Background(), msg.Header), "publish "+stream,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"), semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(msg.Subject), semconv.MessagingMessageID(msg.Header.Get(HeaderMsgID)),
			attribute.String("booking.event_type", msg.Header.Get(HeaderEventType))))
	traceContext.Inject(ctx, natsCarrier(msg.Header))
	return span
}

// endPublish ends span (nil: none), failed with err.
func endPublish(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
