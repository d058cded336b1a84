package kurrentdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"

	"github.com/retrysafe/booking/eventstore"
)

// appendLimits are a KurrentDB release's default size limits on
// Streams.Append, in bytes; an event's size is counted as the server's
// Event.SizeOnDisk does (data + metadata + 2 × the type's length in UTF-16
// code units).
type appendLimits struct {
	release string
	append  int // ClusterVNodeOptions.Application.MaxAppendSize
	event   int // ClusterVNodeOptions.Application.MaxAppendEventSize; 0: none
	message int // the Streams service's gRPC MaxReceiveMessageSize
}

// Sizes from KurrentDB's TFConsts (the same from v24.10.0 to v26.1.1-rc.1).
const (
	maxLogRecordSize          = 16 * 1024 * 1024         // TFConsts.MaxLogRecordSize
	effectiveMaxLogRecordSize = maxLogRecordSize - 10000 // TFConsts.EffectiveMaxLogRecordSize
	chunkSize                 = 256 * 1024 * 1024        // TFConsts.ChunkSize
)

// limitsOf returns the default limits of server release v, read from
// KurrentDB's source at its release tags: up to 25.0 (v24.10.0, v25.0.0
// ClusterVNodeOptions.cs) MaxAppendSize is 1 MiB and there is no effective
// event limit; from 25.1 (v25.1.0 to v26.1.1-rc.1) MaxAppendSize is
// TFConsts.ChunkSize (256 MiB) and MaxAppendEventSize TFConsts.MaxLogRecordSize
// (16 MiB). Every release receives at most TFConsts.EffectiveMaxLogRecordSize
// per gRPC message on Streams (ClusterVNodeStartup.cs). An unknown release
// (nil: the server did not say) gets the newest limits: the server's own
// answer then decides.
func limitsOf(v *esdb.ServerVersion) appendLimits {
	if v != nil && (v.Major < 25 || (v.Major == 25 && v.Minor == 0)) {
		return appendLimits{release: fmt.Sprintf("%d.%d", v.Major, v.Minor), append: 1 << 20, message: effectiveMaxLogRecordSize}
	}
	release := "25.1 or later"
	if v != nil {
		release = fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return appendLimits{release: release, append: chunkSize, event: maxLogRecordSize, message: effectiveMaxLogRecordSize}
}

// sizeCheckFrom is the size of an append below which checkSize does not
// ask the server's version: it fits every release's limits.
const sizeCheckFrom = 512 << 10

// messageOverhead bounds the bytes a proposed event's gRPC message adds to
// its data, metadata and type: the id, the content type, the map and field
// framing.
const messageOverhead = 256

// checkSize refuses, before anything is sent, an append that the server's
// release would refuse for its size: an event over its event limit or over
// the gRPC message limit, or a sum of event sizes over its append limit.
// The server would end such an append early, and client v4 then reports
// only a failed send, not why; so it is refused here with an error
// matching eventstore.ErrAppendTooLarge. The server's version comes from
// its ServerFeatures (asked only for appends of sizeCheckFrom or more).
func (s *Store) checkSize(ctx context.Context, stream string, evs []esdb.EventData) error {
	sizes := make([]int, len(evs))
	total := 0
	for i, e := range evs {
		sizes[i] = len(e.Data) + len(e.Metadata) + 2*utf16Len(e.EventType)
		total += sizes[i]
	}
	if total < sizeCheckFrom {
		return nil
	}
	var version *esdb.ServerVersion
	_ = s.conn.call(ctx, func(ctx context.Context, c *esdb.Client) error {
		v, err := c.GetServerVersion()
		if err == nil {
			version = v
		}
		return nil
	})
	l := limitsOf(version)
	for i, e := range evs {
		if l.event > 0 && sizes[i] > l.event {
			return fmt.Errorf("kurrentdb: append to %q: %w: event %s is %d bytes, over KurrentDB %s's limit of %d bytes per event (MaxAppendEventSize); nothing sent",
				stream, eventstore.ErrAppendTooLarge, e.EventID, sizes[i], l.release, l.event)
		}
		if m := len(e.Data) + len(e.Metadata) + len(e.EventType) + messageOverhead; m > l.message {
			return fmt.Errorf("kurrentdb: append to %q: %w: event %s needs a gRPC message of about %d bytes, over KurrentDB's limit of %d; nothing sent",
				stream, eventstore.ErrAppendTooLarge, e.EventID, m, l.message)
		}
	}
	if total > l.append {
		return fmt.Errorf("kurrentdb: append to %q: %w: %d events of %d bytes in all, over KurrentDB %s's limit of %d bytes per append (MaxAppendSize); nothing sent",
			stream, eventstore.ErrAppendTooLarge, len(evs), total, l.release, l.append)
	}
	return nil
}

// tooLarge reports whether the server refused an append for its size:
// InvalidArgument "Maximum Append Size of N Exceeded." or "Event with Id:
// …, exceeds Maximum Append Event Size of N." (RpcExceptions), or gRPC's
// ResourceExhausted for a message over its receive limit.
func tooLarge(err error) bool {
	var esErr *esdb.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &esErr) && esErr.Code() == esdb.ErrorCodeWrongExpectedVersion) {
		return false
	}
	switch grpcCode(err) {
	case codes.ResourceExhausted:
		return true
	case codes.InvalidArgument:
		return strings.Contains(err.Error(), "Maximum Append Size") || strings.Contains(err.Error(), "Maximum Append Event Size")
	}
	return false
}

// utf16Len returns the length of s in UTF-16 code units, as .NET's
// string.Length counts it.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
