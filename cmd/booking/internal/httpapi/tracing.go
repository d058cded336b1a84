package httpapi

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// traceContext is the W3C Trace Context propagator
// (https://www.w3.org/TR/trace-context/): the API accepts a caller's
// traceparent and tracestate headers and nothing else (no baggage).
var traceContext = propagation.TraceContext{}

// traced returns next under the request's trace. With a tracer provider
// (Config.TracerProvider) it is otelhttp's server instrumentation: one
// server span per request, a child of the caller's traceparent when it
// sent a valid one, renamed "METHOD route-template" once routed
// (nameSpan). Without one no span is started, and a valid traceparent is
// only carried in the request's context, so the events the request
// appends keep the caller's trace context; a request without the header
// costs one header look-up.
func (a *api) traced(next http.Handler) http.Handler {
	if a.tracerProvider == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Traceparent") != "" {
				r = r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			next.ServeHTTP(w, r)
		})
	}
	return otelhttp.NewHandler(next, "HTTP", otelhttp.WithTracerProvider(a.tracerProvider),
		otelhttp.WithPropagators(traceContext),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// nameSpan names the request's span "METHOD route-template" once the
// router has served it, and adds the route and both request ids (see
// requestID) as attributes. A span that is not recording is left alone.
func nameSpan(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		span := trace.SpanFromContext(r.Context())
		if !span.IsRecording() {
			return
		}
		route := routeOf(r.Context())
		span.SetName(r.Method + " " + route)
		attrs := []attribute.KeyValue{semconv.HTTPRoute(route)}
		if ri := info(r.Context()); ri != nil {
			attrs = append(attrs, attribute.String("booking.request_id", ri.server))
			if ri.client != "" {
				attrs = append(attrs, attribute.String("booking.client_request_id", ri.client))
			}
		}
		span.SetAttributes(attrs...)
	})
}

// commandSpan starts the span of the state-changing use case a request
// runs, "command METHOD route-template", a child of the request's span;
// without a tracer provider it returns ctx and a span that records
// nothing.
func (a *api) commandSpan(ctx context.Context, r *http.Request) (context.Context, trace.Span) {
	if a.tracerProvider == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return a.tracerProvider.Tracer(tracerName).Start(ctx, "command "+r.Method+" "+routeOf(r.Context()), trace.WithSpanKind(trace.SpanKindInternal))
}

// tracerName is the instrumentation scope of this package's own spans.
const tracerName = "github.com/retrysafe/booking/cmd/booking/internal/httpapi"
