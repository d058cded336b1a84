//go:build !faultinject

package faults

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/retrysafe/booking/commands"
)

// FromEnv returns no hooks and no control API: the production build cannot
// inject faults, whatever BOOKING_TEST_CRASH_AT or BOOKING_TEST_HOLD_AT
// say. Build with -tags faultinject for the crash and hold tests.
func FromEnv(context.Context, *slog.Logger) (commands.Hooks, http.Handler, error) {
	return commands.Hooks{}, nil, nil
}
