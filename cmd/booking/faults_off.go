//go:build !faultinject

package main

import (
	"log/slog"

	"github.com/retrysafe/booking/commands"
)

// faultHooks returns no hooks: the production build cannot inject faults.
// Build with -tags faultinject for the crash tests.
func faultHooks(*slog.Logger) (commands.Hooks, bool) { return commands.Hooks{}, false }
