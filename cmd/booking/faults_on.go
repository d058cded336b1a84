//go:build faultinject

package main

import (
	"log/slog"
	"os"
	"strings"
	"syscall"

	"github.com/retrysafe/booking/commands"
)

// faultHooks kills the process with SIGKILL right after a named step when
// BOOKING_TEST_CRASH_AT lists it (comma-separated step names, e.g.
// order.claimed). Only binaries built with -tags faultinject have this.
func faultHooks(log *slog.Logger) (commands.Hooks, bool) {
	spec := os.Getenv("BOOKING_TEST_CRASH_AT")
	if spec == "" {
		return commands.Hooks{}, false
	}
	steps := map[string]bool{}
	for _, s := range strings.Split(spec, ",") {
		steps[strings.TrimSpace(s)] = true
	}
	return commands.Hooks{Step: func(step string) {
		if steps[step] {
			log.Warn("fault injection: killing the process", "step", step)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}}, true
}
