package commands

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/tick"
)

// The event store's clock against the service's. Every decision, and every
// time an answer shows (occurred_at), is the service clock (PostgreSQL's
// now(), see clock.go); the store stamps each event with its own clock
// (RecordedAt: KurrentDB's "created", the leader's clock). Where the two
// differ, anything read from RecordedAt — and an operator comparing the
// store's times with the service's — is off by that much. So the Handler
// compares them on its own appends, never on a probe event: at most once
// per ClockSkewEvery, one append that succeeded is sampled, and its stored
// RecordedAt is set against the occurred_at its metadata holds (the service
// clock at that append). A store that reports its clock with the append
// (AppendResult.Now: PostgreSQL, where both clocks are the database's) is
// compared at once; any other store's event is read back by RunClockSkew.
// The difference goes to Metrics.ClockSkew: positive when the store's
// clock is ahead. It includes the append's own latency (milliseconds).

// ClockSkewEvery is the most often the event store's clock is sampled and
// read back (RunClockSkew's period).
const ClockSkewEvery = 5 * time.Second

// skewSampler holds the append sampled for the next read-back. Bound: one
// sample; eviction: replaced by no other until read back. Safe for
// concurrent use; the zero value is ready.
type skewSampler struct {
	// next is the host wall clock (Unix nanoseconds) before which no
	// append is sampled: one atomic load on the path of every append.
	next    atomic.Int64
	mu      sync.Mutex
	pending *skewSample
}

// skewSample is an append to read back: the stream, the revision of its
// last event and that event's id.
type skewSample struct {
	stream string
	rev    eventstore.Revision
	id     string
}

// sampleSkew is called after each successful append of data to stream
// name with result res: at most once per ClockSkewEvery it takes the
// append as the clock sample.
func (h *core) sampleSkew(name string, data []eventstore.EventData, res eventstore.AppendResult) {
	now := time.Now().UnixNano()
	next := h.skew.next.Load()
	if now < next || len(data) == 0 || !h.skew.next.CompareAndSwap(next, now+int64(ClockSkewEvery)) {
		return
	}
	last := data[len(data)-1]
	if !res.Now.IsZero() {
		if m, err := eventstore.DecodeMetadata(last.Metadata); err == nil && !m.OccurredAt.IsZero() {
			h.metrics.ClockSkew(res.Now.Sub(m.OccurredAt).Seconds())
		}
		return
	}
	h.skew.mu.Lock()
	if h.skew.pending == nil {
		h.skew.pending = &skewSample{stream: name, rev: res.NextRevision, id: last.ID}
	}
	h.skew.mu.Unlock()
}

// RunClockSkew reads back, every ClockSkewEvery until ctx ends, the append
// sampled since its last pass (if any) and reports the store's RecordedAt
// of it against the occurred_at of its metadata (Metrics.ClockSkew). A
// failed read is logged at debug level and the sample dropped; the next
// append is sampled instead. It blocks; every process runs its own.
func (h *Workers) RunClockSkew(ctx context.Context) {
	tick.Every(ctx, ClockSkewEvery, func() bool {
		h.readSkew(ctx)
		return true
	})
}

// readSkew reads the pending sample back and reports its skew.
func (h *core) readSkew(ctx context.Context) {
	h.skew.mu.Lock()
	s := h.skew.pending
	h.skew.pending = nil
	h.skew.mu.Unlock()
	if s == nil {
		return
	}
	recs, err := h.store.ReadStream(ctx, s.stream, s.rev, 1)
	if err != nil {
		if !errors.Is(err, eventstore.ErrStreamNotFound) {
			h.log.DebugContext(ctx, "clock skew: sampled event not read back", "stream", s.stream, "err", err)
		}
		return
	}
	if len(recs) != 1 || recs[0].ID != s.id {
		return // truncated, or another event at that revision (an idempotent repeat's)
	}
	m, err := eventstore.DecodeMetadata(recs[0].Metadata)
	if err != nil || m.OccurredAt.IsZero() {
		return
	}
	h.metrics.ClockSkew(recs[0].RecordedAt.Sub(m.OccurredAt).Seconds())
}
