package kurrentdbtest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DefaultVersion is the KurrentDB release the double imitates unless
// Options.Version names another: the one the project's deployment files pin
// (kurrentplatform/kurrentdb:26.1.1).
const DefaultVersion = "26.1.1"

// Limits are the size limits of a KurrentDB release's gRPC Streams.Append,
// in bytes, at the server's default settings. An event's size is counted as
// Event.SizeOnDisk does: data + custom metadata + 2 × the length of its type.
type Limits struct {
	// MaxAppendSize bounds the sum of the event sizes of one append
	// (ClusterVNodeOptions.Application.MaxAppendSize; over it the append is
	// refused with InvalidArgument, exception maximum-append-size-exceeded).
	MaxAppendSize int
	// MaxAppendEventSize bounds one event's size
	// (ClusterVNodeOptions.Application.MaxAppendEventSize; over it the append
	// is refused with InvalidArgument, exception
	// maximum-append-event-size-exceeded). 0 means no such check: releases
	// before 25.0 have none.
	MaxAppendEventSize int
	// MaxReceiveMessageSize bounds one gRPC message the Streams service
	// receives, so one proposed event with its envelope (ClusterVNodeStartup:
	// AddServiceOptions<Streams> MaxReceiveMessageSize =
	// TFConsts.EffectiveMaxLogRecordSize); gRPC refuses a larger message with
	// ResourceExhausted before the service sees it.
	MaxReceiveMessageSize int
}

// Sizes from KurrentDB's TFConsts (src/KurrentDB.Core/TransactionLog/Chunks/
// TFConsts.cs, the same from v24.10.0 to v26.1.1-rc.1).
const (
	maxLogRecordSize          = 16 * 1024 * 1024         // TFConsts.MaxLogRecordSize
	effectiveMaxLogRecordSize = maxLogRecordSize - 10000 // TFConsts.EffectiveMaxLogRecordSize
	chunkSize                 = 256 * 1024 * 1024        // TFConsts.ChunkSize
	oneMiB                    = 1024 * 1024              // MaxAppendSize before 25.1
	noEventLimit              = 0                        // no MaxAppendEventSize check
	unlimitedEvent            = math.MaxInt32            // MaxAppendEventSize = int.MaxValue (25.0)
)

// LimitsOf returns the default limits of KurrentDB (or EventStoreDB)
// release version ("major.minor" or "major.minor.patch", an optional "v"
// prefix), read from the server's source at each release tag:
//
//   - up to 24.10 (v24.10.0 src/EventStore.Core/Configuration/
//     ClusterVNodeOptions.cs: MaxAppendSize = 1_024 * 1_024; no
//     MaxAppendEventSize; Grpc/Streams.Append.cs checks the sum only):
//     1 MiB per append, no per-event check;
//   - 25.0 (v25.0.0 ClusterVNodeOptions.cs: MaxAppendSize = 1_024 * 1_024,
//     MaxAppendEventSize = int.MaxValue, checked per event in
//     Streams.Append.cs): 1 MiB per append, the event check never trips;
//   - from 25.1 (v25.1.0, v26.0.0, v26.1.0 and v26.1.1-rc.1
//     src/KurrentDB.Core/Configuration/ClusterVNodeOptions.cs: MaxAppendSize
//     = TFConsts.ChunkSize, MaxAppendEventSize = TFConsts.MaxLogRecordSize):
//     256 MiB per append, 16 MiB per event.
//
// Every release receives at most TFConsts.EffectiveMaxLogRecordSize
// (16 MiB − 10,000 bytes) per gRPC message on the Streams service
// (ClusterVNodeStartup.cs), so an event near 16 MiB is refused by gRPC
// before the event check. Returns an error for a version it cannot parse.
func LimitsOf(version string) (Limits, error) {
	major, minor, err := parseVersion(version)
	if err != nil {
		return Limits{}, err
	}
	l := Limits{MaxReceiveMessageSize: effectiveMaxLogRecordSize}
	switch {
	case major < 25:
		l.MaxAppendSize, l.MaxAppendEventSize = oneMiB, noEventLimit
	case major == 25 && minor == 0:
		l.MaxAppendSize, l.MaxAppendEventSize = oneMiB, unlimitedEvent
	default:
		l.MaxAppendSize, l.MaxAppendEventSize = chunkSize, maxLogRecordSize
	}
	return l, nil
}

// parseVersion reads "major.minor[.patch]" with an optional "v" prefix.
func parseVersion(v string) (major, minor int, err error) {
	major, minor, _, err = versionParts(v)
	return major, minor, err
}

// versionParts reads "major.minor[.patch]" with an optional "v" prefix; a
// missing patch is 0.
func versionParts(v string) (major, minor, patch int, err error) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, 0, fmt.Errorf("kurrentdbtest: server version %q: want major.minor or major.minor.patch, e.g. %s", v, DefaultVersion)
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return 0, 0, 0, fmt.Errorf("kurrentdbtest: server version %q: %q is not a number", v, p)
		}
		nums[i] = n
	}
	nums = append(nums, 0)
	return nums[0], nums[1], nums[2], nil
}
