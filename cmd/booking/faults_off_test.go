//go:build !faultinject

package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
)

// TestProductionBuildCannotInjectFaults: without -tags faultinject the
// fault variables are ignored: no hooks, no /_test control API.
func TestProductionBuildCannotInjectFaults(t *testing.T) {
	t.Setenv("BOOKING_TEST_CRASH_AT", "order.claimed")
	t.Setenv("BOOKING_TEST_HOLD_AT", "order.claiming")
	hooks, testAPI, err := faultHooks(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || hooks.Step != nil || testAPI != nil {
		t.Fatalf("faultHooks() = step hook set %v, control API %v, %v; want none and no error", hooks.Step != nil, testAPI, err)
	}
	a := &api{metrics: metrics.New(), testAPI: testAPI}
	rec := httptest.NewRecorder()
	a.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/_test/holds/order.claiming", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("PUT /_test/holds/order.claiming = %d, want 404 (no control API in the production build)", rec.Code)
	}
}
