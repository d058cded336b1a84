package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// recorder is a RoundTripper that keeps the request it was given.
type recorder struct{ got *http.Request }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = req
	return httptest.NewRecorder().Result(), nil
}

// remote returns ctx with a remote span context, as a caller's traceparent
// or an event's metadata gives one.
func remote(ctx context.Context) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

func TestTransport_WithoutTracerProviderPropagatesTheContextsSpanOnly(t *testing.T) {
	t.Parallel()
	base := &recorder{}
	rt := Transport(base, nil)

	plain := httptest.NewRequest(http.MethodGet, "http://provider.test/v1/payment_intents/pi_1", nil)
	if _, err := rt.RoundTrip(plain); err != nil {
		t.Fatal(err)
	}
	if base.got != plain || base.got.Header.Get("Traceparent") != "" {
		t.Errorf("a request without a span context: sent %p with traceparent %q, want the request itself (%p), unchanged",
			base.got, base.got.Header.Get("Traceparent"), plain)
	}

	traced := httptest.NewRequest(http.MethodGet, "http://provider.test/v1/payment_intents/pi_1", nil).WithContext(remote(context.Background()))
	if _, err := rt.RoundTrip(traced); err != nil {
		t.Fatal(err)
	}
	const want = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := base.got.Header.Get("Traceparent"); got != want {
		t.Errorf("traceparent sent = %q, want %q", got, want)
	}
	if traced.Header.Get("Traceparent") != "" {
		t.Error("the caller's request was changed; a RoundTripper must send a copy")
	}
}

// BenchmarkTransport is one request through the transport without a
// tracer provider, its context carrying no span.
func BenchmarkTransport(b *testing.B) {
	rt := Transport(&recorder{}, nil)
	req := httptest.NewRequest(http.MethodPost, "http://provider.test/v1/payment_intents", nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.RoundTrip(req); err != nil {
			b.Fatal(err)
		}
	}
}
