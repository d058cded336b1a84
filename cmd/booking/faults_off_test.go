//go:build !faultinject

package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retrysafe/booking/cmd/booking/internal/faults"
)

// TestProductionBuildHasNoTestRoutes: without -tags faultinject the router
// serves no /_test control API, whatever the fault variables say (the
// faults package's own test checks that it returns no hooks).
func TestProductionBuildHasNoTestRoutes(t *testing.T) {
	t.Setenv("BOOKING_TEST_CRASH_AT", "order.claimed")
	t.Setenv("BOOKING_TEST_HOLD_AT", "order.claiming")
	_, testAPI, err := faults.FromEnv(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || testAPI != nil {
		t.Fatalf("faults.FromEnv() = control API %v, %v; want none and no error", testAPI, err)
	}
	a := &api{metrics: newMetrics(), testAPI: testAPI}
	rec := httptest.NewRecorder()
	a.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/_test/holds/order.claiming", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("PUT /_test/holds/order.claiming = %d, want 404 (no control API in the production build)", rec.Code)
	}
}
