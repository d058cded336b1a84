package main

import (
	"context"
	"io"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestNewTracing_NoExporterUnlessConfigured: booking serve records no span
// (a nil tracer provider) unless OTEL_TRACES_EXPORTER or an OTLP endpoint
// is set; OTEL_SDK_DISABLED=true wins over both; an endpoint alone means
// otlp; an unknown exporter or protocol is an error naming its variable.
func TestNewTracing_NoExporterUnlessConfigured(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     map[string]string
		sdk     bool
		wantErr string
	}{
		{"nothing set", nil, false, ""},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false, ""},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true, ""},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{"a traces endpoint over grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, ""},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, false, ""},
		{"an unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"an unknown protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, false, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tp, shutdown, err := newTracing(context.Background(), func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || exitCode(err) != exitUsage {
					t.Fatalf("newTracing = %v (exit %d), want an error naming %s, exit %d", err, exitCode(err), tt.wantErr, exitUsage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer shutdown(context.Background())
			if _, isSDK := tp.(*sdktrace.TracerProvider); isSDK != tt.sdk || (!tt.sdk && tp != nil) {
				t.Errorf("tracer provider %T, want the SDK's: %t", tp, tt.sdk)
			}
		})
	}
}
