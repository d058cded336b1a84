//go:build !faultinject

package faults

import (
	"context"
	"log/slog"
	"testing"
)

// TestProductionBuildCannotInjectFaults: without -tags faultinject the
// fault variables are ignored: no hooks, no /_test control API.
func TestProductionBuildCannotInjectFaults(t *testing.T) {
	t.Setenv("BOOKING_TEST_CRASH_AT", "order.claimed")
	t.Setenv("BOOKING_TEST_HOLD_AT", "order.claiming")
	hooks, testAPI, err := FromEnv(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil || hooks.Step != nil || testAPI != nil {
		t.Fatalf("FromEnv() = step hook set %v, control API %v, %v; want none and no error", hooks.Step != nil, testAPI, err)
	}
}
