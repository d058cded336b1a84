// Package memlimit sets the default soft memory limit of `booking serve`
// (runtime/debug.SetMemoryLimit) unless GOMEMLIMIT is set, and says which
// limit applies and where it came from.
package memlimit

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
)

// The default soft memory limit of `booking serve`
// (runtime/debug.SetMemoryLimit: the heap, stacks and runtime structures,
// not the binary's mapped code, about 30 MiB more of RSS), set only when
// GOMEMLIMIT is unset and both the provider and NATS run outside the
// process. It is a ceiling, not a target, and never fails an allocation;
// set GOMEMLIMIT (for example to the container's limit, or "off") to
// choose otherwise.
//
// It leaves, above the bounded live heap, about one second of allocation
// at a booking rate of p2BookingsPerSecond: the collector runs when the
// heap has grown by as much as it found live at its last run (GOGC=100),
// or when it reaches the limit, whichever comes first, so:
//
//	limit = live + rate × allocated per booking + runtime
//
// With every cache at its bound the live heap is about one second of
// allocation, so GOGC's own pace is about once a second too; the limit
// keeps that pace with less memory than GOGC would take at a larger heap.
// Faster than that rate the collector runs more often: P2 on the reference
// machine books 250–310 a second with external NATS and provider, 260–290
// KB each, and collects 2–2.5 times a second (BENCHMARKS.md, P2g),
// which a higher limit would trade for peak memory (P6).
//
// With the simulator or NATS in the process there is no default limit:
// their state is live heap that grows with every booking (they keep every
// charge, every webhook event and an index of every subject), and a fixed
// limit would make the collector run ever more often as that state
// approaches it, each run marking all of it. GOGC alone keeps the
// collector's work proportional to what is allocated, at up to twice the
// live heap in memory.
//
// The figures are measurements on the reference machine (2 cores).
const (
	// p2BookingsPerSecond is the booking rate the limit allows one second
	// of allocation for: 180 bookings a second.
	p2BookingsPerSecond = 180
	// allocPerBooking is the bytes allocated per booking the limit allows
	// for: 310 KB, above what P2 with external NATS and provider
	// allocates (the heap profile's bytes allocated over its bookings,
	// three repetitions: 260–290 KB).
	allocPerBooking = 310 << 10
	// boundedLiveHeap is the live heap once every cache and window of the
	// service is at its bound (the written set, the intent hints, the show
	// cache, the log reader's window, the kept streams, the read models'
	// row caches, the pools): 48.5 MB after 9,000 bookings with external
	// NATS and provider, after a forced collection; with a margin.
	boundedLiveHeap = 56 << 20
	// runtimeOverhead is the runtime's memory beside the heap: stacks, GC
	// metadata, spans (about 7 MB measured).
	runtimeOverhead = 8 << 20
)

// defaultMemoryLimit is the default with an external provider and NATS
// server, derived as above (119 MiB).
var defaultMemoryLimit = derivedLimit(boundedLiveHeap, allocPerBooking)

// derivedLimit returns live + one second of allocation at P2's rate of
// alloc bytes per booking + runtimeOverhead, in bytes rounded up to a MiB.
func derivedLimit(live, alloc int64) int64 {
	n := live + p2BookingsPerSecond*alloc + runtimeOverhead
	return (n + 1<<20 - 1) &^ (1<<20 - 1)
}

// Sources of the memory limit in force (Limit.From).
const (
	// memLimitFromEnv: GOMEMLIMIT, which the Go runtime read at start.
	memLimitFromEnv = "GOMEMLIMIT"
	// memLimitFromDefault: GOMEMLIMIT unset, the service's default set
	// (none with the simulator or NATS in the process).
	memLimitFromDefault = "default"
	// memLimitFromRuntime: GOMEMLIMIT unset, but a limit was already in
	// force in this process (debug.SetMemoryLimit before serve ran), kept.
	memLimitFromRuntime = "runtime"
)

// Limit is the soft memory limit a service runs with.
type Limit struct {
	// Bytes is the runtime's limit in bytes; math.MaxInt64 means none
	// (GOMEMLIMIT=off or no limit set).
	Bytes int64
	// From says where it came from: memLimitFromEnv, memLimitFromDefault
	// or memLimitFromRuntime.
	From string
	// Env is GOMEMLIMIT's value when From is memLimitFromEnv.
	Env string
}

// Apply sets the default soft memory limit unless GOMEMLIMIT is set
// (lookup reads the environment) or a limit is already in force; a service
// that embeds the simulator or NATS (embedded) gets none. It returns the
// limit in force afterwards and where it came from.
func Apply(lookup func(string) (string, bool), embedded bool) Limit {
	current := debug.SetMemoryLimit(-1)
	if env, set := lookup("GOMEMLIMIT"); set {
		return Limit{Bytes: current, From: memLimitFromEnv, Env: env}
	}
	if current != math.MaxInt64 {
		return Limit{Bytes: current, From: memLimitFromRuntime}
	}
	if embedded {
		return Limit{Bytes: math.MaxInt64, From: memLimitFromDefault}
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
	return Limit{Bytes: defaultMemoryLimit, From: memLimitFromDefault}
}

// Log logs, at INFO, which limit applies and where it came from:
// "memory limit" with limit (GOMEMLIMIT's syntax: "112MiB", "off"), bytes
// (omitted when there is none), from, and GOMEMLIMIT's value as given when
// it is the source.
func (m Limit) Log(log *slog.Logger) {
	attrs := []any{"limit", format(m.Bytes)}
	if m.Bytes != math.MaxInt64 {
		attrs = append(attrs, "bytes", m.Bytes)
	}
	attrs = append(attrs, "from", m.From)
	if m.From == memLimitFromEnv {
		attrs = append(attrs, "GOMEMLIMIT", m.Env)
	}
	log.Info("memory limit", attrs...)
}

// format returns n bytes in GOMEMLIMIT's syntax: the largest
// unit of B, KiB, MiB, GiB, TiB that divides it ("112MiB"), or "off" for
// math.MaxInt64 (no limit).
func format(n int64) string {
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
