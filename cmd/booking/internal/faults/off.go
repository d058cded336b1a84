//go:build !faultinject

package faults

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/internal/sqlcount"
)

// SQLCounter returns nil: the production build counts no statements,
// whatever BOOKING_TEST_COUNT_SQL says.
func SQLCounter() *sqlcount.Counter { return nil }

// FromEnv returns no hooks and no control API: the production build cannot
// inject faults, whatever BOOKING_TEST_CRASH_AT or BOOKING_TEST_HOLD_AT
// say. Build with -tags faultinject for the crash and hold tests.
func FromEnv(context.Context, *slog.Logger) (commands.Hooks, http.Handler, error) {
	return commands.Hooks{}, nil, nil
}
