package main

import (
	"fmt"
	"log/slog"
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

// Sources of the memory limit in force (memoryLimit.From).
const (
	// memLimitFromEnv: GOMEMLIMIT, which the Go runtime read at start.
	memLimitFromEnv = "GOMEMLIMIT"
	// memLimitFromDefault: GOMEMLIMIT unset, the service's default set.
	memLimitFromDefault = "default"
	// memLimitFromRuntime: GOMEMLIMIT unset, but a limit was already in
	// force in this process (debug.SetMemoryLimit before serve ran), kept.
	memLimitFromRuntime = "runtime"
)

// memoryLimit is the soft memory limit a service runs with.
type memoryLimit struct {
	// Bytes is the runtime's limit in bytes; math.MaxInt64 means none
	// (GOMEMLIMIT=off or no limit set).
	Bytes int64
	// From says where it came from: memLimitFromEnv, memLimitFromDefault
	// or memLimitFromRuntime.
	From string
	// Env is GOMEMLIMIT's value when From is memLimitFromEnv.
	Env string
}

// applyMemoryLimit sets the default soft memory limit of a service that
// embeds the simulator or NATS (embedded) or not, unless GOMEMLIMIT is set
// (lookup reads the environment) or a limit is already in force. It returns
// the limit in force afterwards and where it came from.
func applyMemoryLimit(lookup func(string) (string, bool), embedded bool) memoryLimit {
	current := debug.SetMemoryLimit(-1)
	if env, set := lookup("GOMEMLIMIT"); set {
		return memoryLimit{Bytes: current, From: memLimitFromEnv, Env: env}
	}
	if current != math.MaxInt64 {
		return memoryLimit{Bytes: current, From: memLimitFromRuntime}
	}
	limit := int64(externalMemoryLimit)
	if embedded {
		limit = devMemoryLimit
	}
	debug.SetMemoryLimit(limit)
	return memoryLimit{Bytes: limit, From: memLimitFromDefault}
}

// Log logs, at INFO, which limit applies and where it came from:
// "memory limit" with limit (GOMEMLIMIT's syntax: "112MiB", "off"), bytes
// (omitted when there is none), from, and GOMEMLIMIT's value as given when
// it is the source.
func (m memoryLimit) Log(log *slog.Logger) {
	attrs := []any{"limit", formatMemoryLimit(m.Bytes)}
	if m.Bytes != math.MaxInt64 {
		attrs = append(attrs, "bytes", m.Bytes)
	}
	attrs = append(attrs, "from", m.From)
	if m.From == memLimitFromEnv {
		attrs = append(attrs, "GOMEMLIMIT", m.Env)
	}
	log.Info("memory limit", attrs...)
}

// formatMemoryLimit returns n bytes in GOMEMLIMIT's syntax: the largest
// unit of B, KiB, MiB, GiB, TiB that divides it ("112MiB"), or "off" for
// math.MaxInt64 (no limit).
func formatMemoryLimit(n int64) string {
	if n == math.MaxInt64 {
		return "off"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for i < len(units)-1 && n != 0 && n%1024 == 0 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%d%s", n, units[i])
}
