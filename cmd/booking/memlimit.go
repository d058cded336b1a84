package main

import (
	"math"
	"runtime/debug"
)

// Default soft memory limits of `booking serve` (runtime/debug.SetMemoryLimit:
// the heap, stacks and runtime structures, not the binary's mapped code,
// about 30 MiB more of RSS), set only when GOMEMLIMIT is unset. They are
// ceilings, not targets: below them the garbage collector runs as GOGC says
// (a live heap of about 30 MiB under load); near them it collects more often,
// trading CPU for memory, and never fails an allocation. Set GOMEMLIMIT
// (for example to the container's limit, or "off") to choose otherwise.
const (
	// devMemoryLimit is the default with the provider simulator or the
	// NATS server running in the process (their state is part of the heap).
	devMemoryLimit = 112 << 20
	// externalMemoryLimit is the default with an external provider and
	// NATS server.
	externalMemoryLimit = 64 << 20
)

// applyMemoryLimit sets the default soft memory limit of a service that
// embeds the simulator or NATS (embedded) or not, unless GOMEMLIMIT is set
// (lookup reads the environment) or a limit is already in force. It returns
// the limit set, or 0 when it left the runtime's as it was.
func applyMemoryLimit(lookup func(string) (string, bool), embedded bool) int64 {
	if _, set := lookup("GOMEMLIMIT"); set || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		return 0
	}
	limit := int64(externalMemoryLimit)
	if embedded {
		limit = devMemoryLimit
	}
	debug.SetMemoryLimit(limit)
	return limit
}
