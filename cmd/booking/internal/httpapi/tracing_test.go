package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestTraced_AcceptsTraceparentWithoutTracer: with no tracer provider, a
// request's valid W3C traceparent (and its tracestate) is its context's
// remote span context, so the events it appends keep the caller's trace; a
// malformed one or none leaves the context without a span context.
func TestTraced_AcceptsTraceparentWithoutTracer(t *testing.T) {
	t.Parallel()
	var got trace.SpanContext
	h := (&api{}).traced(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = trace.SpanContextFromContext(r.Context())
	}))
	for _, tt := range []struct {
		name, parent, state string
		valid               bool
	}{
		{"valid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x", true},
		{"malformed", "00-4bf92f3577b34da6a3ce929d0e0e4736-zz-01", "", false},
		{"all-zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false},
		{"none", "", "", false},
	} {
		got = trace.SpanContext{}
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
		if tt.parent != "" {
			req.Header.Set("traceparent", tt.parent)
			req.Header.Set("tracestate", tt.state)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		if got.IsValid() != tt.valid {
			t.Errorf("%s: span context valid %t, want %t", tt.name, got.IsValid(), tt.valid)
			continue
		}
		if tt.valid && (got.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || got.SpanID().String() != "00f067aa0ba902b7" ||
			!got.IsRemote() || !got.IsSampled() || got.TraceState().String() != tt.state) {
			t.Errorf("%s: span context %+v, want the caller's, remote, sampled, tracestate %q", tt.name, got, tt.state)
		}
	}
}
