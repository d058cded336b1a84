package commands

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
)

// Tracing (OpenTelemetry, https://opentelemetry.io/docs/specs/otel/trace/api/).
// The trace context travels in ctx, as OpenTelemetry carries it, and is
// kept with every event: appendEvents stamps the W3C traceparent and
// tracestate of ctx's span into the event's metadata
// (https://www.w3.org/TR/trace-context/). Whoever later acts on an event
// continues the trace that event was decided in, where the lineage of
// correlation.go switches to the event: the process manager and a job
// acting on a stream it loaded (withCause), recovery (intentRun.context),
// a webhook's facts (withStreamCorrelation, which also links the webhook's
// own span to that trace). So a booking's appends and provider calls are
// one trace, whoever made them, and the relay publishes each event under
// its trace (package notify).
//
// WithTracerProvider adds the spans of this package: one per event store
// append and read, and one per provider call, by decorators around the
// store and the payment port; the use cases start none. Without it nothing
// is recorded, and the stored trace context is still carried on.

// WithTracerProvider records a span per event store append and read and
// per payment provider call with tp's tracer. A nil tp records nothing
// (the default).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(h *core) {
		if tp != nil {
			h.tracer = tp.Tracer(tracerName)
		}
	}
}

// tracerName is the instrumentation scope of this package's spans.
const tracerName = "github.com/retrysafe/booking/commands"

// traceContext is the W3C trace context propagator: traceparent and
// tracestate, the only trace fields an event keeps.
var traceContext = propagation.TraceContext{}

// traceFields is a propagation.TextMapCarrier of an event's two trace
// fields.
type traceFields struct{ parent, state string }

func (f *traceFields) Get(key string) string {
	switch key {
	case "traceparent":
		return f.parent
	case "tracestate":
		return f.state
	}
	return ""
}

func (f *traceFields) Set(key, value string) {
	switch key {
	case "traceparent":
		f.parent = value
	case "tracestate":
		f.state = value
	}
}

func (f *traceFields) Keys() []string { return []string{"traceparent", "tracestate"} }

// stampTrace sets m's trace context to ctx's span context unless m has
// one; a ctx without a valid span context leaves m as it is.
func stampTrace(ctx context.Context, m *eventstore.Metadata) {
	stampSpan(trace.SpanContextFromContext(ctx), m)
}

// stampSpan sets m's trace context to sc unless m has one or sc is
// invalid: traceparent version 00, with the sampled flag as the only flag
// defined (https://www.w3.org/TR/trace-context/#traceparent-header-field-values),
// and sc's tracestate.
func stampSpan(sc trace.SpanContext, m *eventstore.Metadata) {
	if m.Traceparent != "" || !sc.IsValid() {
		return
	}
	m.Traceparent = "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + (sc.TraceFlags() & trace.FlagsSampled).String()
	m.Tracestate = sc.TraceState().String()
}

// continueTrace returns ctx continuing the trace stored in metadata m: its
// span context becomes ctx's (remote) parent. Metadata without a valid
// traceparent leaves ctx as it is. With link, the span ctx is in (a
// request's) gets a link to the stored trace first.
func continueTrace(ctx context.Context, m eventstore.Metadata, link bool) context.Context {
	sc := storedTrace(ctx, m)
	if !sc.IsValid() {
		return ctx
	}
	if link {
		trace.SpanFromContext(ctx).AddLink(trace.Link{SpanContext: sc})
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// storedTrace returns the span context metadata m keeps, invalid when it
// keeps none or an invalid one (ctx only carries the parse).
func storedTrace(ctx context.Context, m eventstore.Metadata) trace.SpanContext {
	if m.Traceparent == "" {
		return trace.SpanContext{}
	}
	f := traceFields{parent: m.Traceparent, state: m.Tracestate}
	return trace.SpanContextFromContext(traceContext.Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), &f))
}

// latestTrace returns the span context kept with the latest event of s
// that keeps one; invalid when none does.
func latestTrace(ctx context.Context, s *stream) trace.SpanContext {
	for i := len(s.records) - 1; i >= 0; i-- {
		m, err := eventstore.DecodeMetadata(s.records[i].Metadata)
		if sc := storedTrace(ctx, m); err == nil && sc.IsValid() {
			return sc
		}
	}
	return trace.SpanContext{}
}

// tracedStore is an EventStore whose appends, reads and truncations each
// record a client span named "<operation> <stream category>", with the
// stream, the number of events and their types.
type tracedStore struct {
	next   EventStore
	tracer trace.Tracer
}

func (s tracedStore) start(ctx context.Context, op, stream string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	category, _, _ := strings.Cut(stream, "-")
	return s.tracer.Start(ctx, op+" "+category, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, semconv.DBOperationName(op), semconv.DBCollectionName(stream))...))
}

func (s tracedStore) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.Type
	}
	ctx, span := s.start(ctx, "append", stream, attribute.Int("booking.events", len(events)), attribute.StringSlice("booking.event_types", types))
	defer span.End()
	res, err := s.next.Append(ctx, stream, expected, events...)
	endSpan(span, err)
	return res, err
}

func (s tracedStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	ctx, span := s.startMulti(ctx, appends)
	defer span.End()
	res, err := s.next.AppendMulti(ctx, appends...)
	endSpan(span, err)
	return res, err
}

// startMulti starts the span of a multi-stream append, named by its first
// stream's category, with every stream and the number of events.
func (s tracedStore) startMulti(ctx context.Context, appends []eventstore.StreamAppend) (context.Context, trace.Span) {
	streams, n := make([]string, len(appends)), 0
	for i, a := range appends {
		streams[i], n = a.Stream, n+len(a.Events)
	}
	return s.start(ctx, "append_multi", appends[0].Stream, attribute.Int("booking.events", n), attribute.StringSlice("booking.streams", streams))
}

// unitSpan starts the span of a unit of work the key units append, named as
// tracedStore names a multi-stream append; a span that records nothing
// without a tracer.
func (h *core) unitSpan(ctx context.Context, parts []eventstore.StreamAppend) (context.Context, trace.Span) {
	if h.tracer == nil {
		return ctx, noop.Span{}
	}
	return tracedStore{tracer: h.tracer}.startMulti(ctx, parts)
}

func (s tracedStore) ReadStream(ctx context.Context, stream string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error) {
	ctx, span := s.start(ctx, "read", stream, attribute.Int64("booking.from_revision", int64(from)))
	defer span.End()
	recs, err := s.next.ReadStream(ctx, stream, from, limit)
	span.SetAttributes(attribute.Int("booking.events", len(recs)))
	endSpan(span, err)
	return recs, err
}

func (s tracedStore) Truncate(ctx context.Context, stream string, before eventstore.Revision) error {
	ctx, span := s.start(ctx, "truncate", stream)
	defer span.End()
	err := s.next.Truncate(ctx, stream, before)
	endSpan(span, err)
	return err
}

// endSpan marks span failed with err; nil leaves its status unset.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// tracedPayments is a Payments whose calls each record a client span
// named "provider <operation>" (ProviderOperations) with the call's result
// (ProviderResult); the adapter's own HTTP requests are spans beneath it
// when its HTTP client is instrumented. ParseWebhook and CheckWebhookHeader call no one and are
// passed through.
type tracedPayments struct {
	next   Payments
	tracer trace.Tracer
}

func (p tracedPayments) start(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return p.tracer.Start(ctx, "provider "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, attribute.String("booking.provider.operation", op))...))
}

// end records the call's result on span and ends it.
func (p tracedPayments) end(span trace.Span, err error) {
	result := ProviderResult(err)
	span.SetAttributes(attribute.String("booking.provider.result", result))
	if result != ProviderOK && result != ProviderDeclined && result != ProviderNotFound {
		endSpan(span, err)
	}
	span.End()
}

func (p tracedPayments) CreatePayment(ctx context.Context, key string, req provider.PaymentRequest) (provider.Payment, error) {
	ctx, span := p.start(ctx, ProviderCreatePayment, attribute.String("booking.provider.idempotency_key", key),
		attribute.String("booking.order_id", req.OrderID), attribute.Int("booking.attempt", req.Attempt))
	pay, err := p.next.CreatePayment(ctx, key, req)
	span.SetAttributes(attribute.String("booking.provider.payment_id", pay.ID))
	p.end(span, err)
	return pay, err
}

func (p tracedPayments) GetPayment(ctx context.Context, id string) (provider.Payment, error) {
	ctx, span := p.start(ctx, ProviderGetPayment, attribute.String("booking.provider.payment_id", id))
	pay, err := p.next.GetPayment(ctx, id)
	p.end(span, err)
	return pay, err
}

func (p tracedPayments) ListPayments(ctx context.Context, from, to time.Time) ([]provider.Payment, error) {
	ctx, span := p.start(ctx, ProviderListPayments)
	pays, err := p.next.ListPayments(ctx, from, to)
	span.SetAttributes(attribute.Int("booking.provider.payments", len(pays)))
	p.end(span, err)
	return pays, err
}

func (p tracedPayments) SearchPayments(ctx context.Context, orderID string, attempt int) ([]provider.Payment, error) {
	ctx, span := p.start(ctx, ProviderSearchPayments, attribute.String("booking.order_id", orderID), attribute.Int("booking.attempt", attempt))
	pays, err := p.next.SearchPayments(ctx, orderID, attempt)
	span.SetAttributes(attribute.Int("booking.provider.payments", len(pays)))
	p.end(span, err)
	return pays, err
}

func (p tracedPayments) CancelPayment(ctx context.Context, key, id string) (provider.Payment, error) {
	ctx, span := p.start(ctx, ProviderCancelPayment, attribute.String("booking.provider.idempotency_key", key),
		attribute.String("booking.provider.payment_id", id))
	pay, err := p.next.CancelPayment(ctx, key, id)
	p.end(span, err)
	return pay, err
}

func (p tracedPayments) Refund(ctx context.Context, key string, req provider.PaymentRefundRequest) (provider.PaymentRefund, error) {
	ctx, span := p.start(ctx, ProviderRefund, attribute.String("booking.provider.idempotency_key", key),
		attribute.String("booking.provider.payment_id", req.PaymentID))
	ref, err := p.next.Refund(ctx, key, req)
	p.end(span, err)
	return ref, err
}

func (p tracedPayments) ListRefunds(ctx context.Context, paymentID string) ([]provider.PaymentRefund, error) {
	ctx, span := p.start(ctx, ProviderListRefunds, attribute.String("booking.provider.payment_id", paymentID))
	refs, err := p.next.ListRefunds(ctx, paymentID)
	p.end(span, err)
	return refs, err
}

func (p tracedPayments) ParseWebhook(body []byte, signatureHeader string, now time.Time) (provider.WebhookEvent, error) {
	return p.next.ParseWebhook(body, signatureHeader, now)
}

func (p tracedPayments) CheckWebhookHeader(signatureHeader string, now time.Time) error {
	return p.next.CheckWebhookHeader(signatureHeader, now)
}
