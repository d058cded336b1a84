package main

import (
	"context"
	"io"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/cmd/booking/internal/tracing"
)

// tracerProviderForTest, when set, is the tracer provider booking serve
// records its spans with instead of the one the environment configures
// (a test's in-memory recorder).
var tracerProviderForTest trace.TracerProvider

// newTracing returns tracerProviderForTest when set, else the tracer
// provider the OpenTelemetry environment variables configure
// (tracing.New), and the function that flushes and stops it.
func newTracing(ctx context.Context, getenv func(string) string, stdout io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	if tracerProviderForTest != nil {
		return tracerProviderForTest, func(context.Context) error { return nil }, nil
	}
	return tracing.New(ctx, getenv, stdout)
}
