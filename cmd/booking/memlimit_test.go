package main

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestApplyMemoryLimit: without GOMEMLIMIT the service gets its default
// soft limit (higher with the simulator or NATS in the process); with
// GOMEMLIMIT set, or a limit already in force, the runtime's is kept.
func TestApplyMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	unset := func(string) (string, bool) { return "", false }
	for _, tt := range []struct {
		name     string
		embedded bool
		want     int64
	}{
		{"the simulator or NATS in the process", true, devMemoryLimit},
		{"an external provider and NATS", false, externalMemoryLimit},
	} {
		debug.SetMemoryLimit(math.MaxInt64)
		if got := applyMemoryLimit(unset, tt.embedded); got != tt.want || debug.SetMemoryLimit(-1) != tt.want {
			t.Errorf("%s: applyMemoryLimit = %d (runtime %d), want %d", tt.name, got, debug.SetMemoryLimit(-1), tt.want)
		}
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got := applyMemoryLimit(func(string) (string, bool) { return "1GiB", true }, true); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: applyMemoryLimit = %d, runtime %d; want 0 and no change", got, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(1 << 30)
	if got := applyMemoryLimit(unset, true); got != 0 || debug.SetMemoryLimit(-1) != 1<<30 {
		t.Errorf("with a limit in force: applyMemoryLimit = %d, runtime %d; want 0 and no change", got, debug.SetMemoryLimit(-1))
	}
}
