//go:build !faultinject

package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retrysafe/booking/cmd/booking/internal/faults"
	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
)

// TestProductionBuildHasNoTestRoutes: without -tags faultinject the router
// serves no /_test control API (the faults package's own test checks that
// FromEnv returns none whatever the fault variables say).
func TestProductionBuildHasNoTestRoutes(t *testing.T) {
	_, testAPI, err := faults.FromEnv(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil || testAPI != nil {
		t.Fatalf("faults.FromEnv() = control API %v, %v; want none and no error", testAPI, err)
	}
	h := httpapi.New(httpapi.Config{Test: testAPI}, nil, nil, slog.New(slog.DiscardHandler))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/_test/holds/order.claiming", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("PUT /_test/holds/order.claiming = %d, want 404 (no control API in the production build)", rec.Code)
	}
}
