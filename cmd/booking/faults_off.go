//go:build !faultinject

package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/retrysafe/booking/commands"
)

// faultHooks returns no hooks and no control API: the production build
// cannot inject faults, whatever BOOKING_TEST_CRASH_AT or
// BOOKING_TEST_HOLD_AT say. Build with -tags faultinject for the crash and
// hold tests.
func faultHooks(context.Context, *slog.Logger) (commands.Hooks, http.Handler, error) {
	return commands.Hooks{}, nil, nil
}
