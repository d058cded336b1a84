// Package tracing makes booking's OpenTelemetry tracer provider from the
// SDK's environment variables, and the traced HTTP transport of its
// outgoing calls.
package tracing

import (
	"context"
	"io"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
)

// New returns the tracer provider booking serve records its spans
// with, configured by the OpenTelemetry SDK's environment variables
// (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/),
// and the function that flushes and stops it. Unlike the specification's
// default (otlp to localhost), no exporter runs unless OTEL_TRACES_EXPORTER,
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set: then tp is nil, and no span is recorded. OTEL_SDK_DISABLED=true
// disables it whatever else is set. OTEL_TRACES_EXPORTER is otlp (the
// default once an endpoint is set), console (JSON lines on stdout) or
// none; otlp speaks OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL, http/protobuf
// (the default) or grpc, and reads its endpoint, headers and timeout from
// the exporter's variables; the sampler comes from OTEL_TRACES_SAMPLER
// (default: parentbased_always_on), the resource from OTEL_SERVICE_NAME
// (default "booking") and OTEL_RESOURCE_ATTRIBUTES. An unknown value is
// an error naming its variable.
func New(ctx context.Context, getenv func(string) string, stdout io.Writer) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	shutdown = func(context.Context) error { return nil }
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, shutdown, nil
	}
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	if name == "" && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		name = "otlp"
	}
	var exp sdktrace.SpanExporter
	switch name {
	case "", "none":
		return nil, shutdown, nil
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
	case "otlp":
		protocol, variable := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
		if protocol == "" {
			protocol, variable = getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
		}
		switch protocol {
		case "", "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		default:
			return nil, shutdown, configerr.New(variable, "%q is not supported: use http/protobuf or grpc", protocol)
		}
	default:
		return nil, shutdown, configerr.New("OTEL_TRACES_EXPORTER", "%q is not supported: use otlp, console or none", name)
	}
	if err != nil {
		return nil, shutdown, configerr.New("OTEL_TRACES_EXPORTER", "%s exporter: %v", name, err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("booking")), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, shutdown, configerr.New("OTEL_RESOURCE_ATTRIBUTES", "%v", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, nil
}

// Transport returns base (nil: http.DefaultTransport) with otelhttp's
// client instrumentation: every outgoing request carries the W3C
// traceparent and tracestate of its context, and with a tracer provider tp
// it is a client span. Without tp no span is recorded, so the transport
// only propagates the context's span (a caller's remote one), and a
// request whose context has none is sent as it is.
func Transport(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if tp == nil {
		return propagating{base: base}
	}
	return otelhttp.NewTransport(base, otelhttp.WithPropagators(traceContext), otelhttp.WithTracerProvider(tp))
}

// traceContext is the W3C Trace Context propagator
// (https://www.w3.org/TR/trace-context/) of outgoing requests.
var traceContext = propagation.TraceContext{}

// propagating is the transport without a tracer provider: what otelhttp's
// would send with a no-op provider, without its per-request attributes
// and wrappers.
type propagating struct{ base http.RoundTripper }

// RoundTrip sends req through the base transport; when req's context
// carries a valid span context, it sends a copy carrying its traceparent
// and tracestate (a RoundTripper must not change the request it is given).
func (p propagating) RoundTrip(req *http.Request) (*http.Response, error) {
	if !trace.SpanContextFromContext(req.Context()).IsValid() {
		return p.base.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	traceContext.Inject(out.Context(), propagation.HeaderCarrier(out.Header))
	return p.base.RoundTrip(out)
}
