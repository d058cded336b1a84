package commands

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// maxCachedStreams bounds a stream cache without a limit of its own (the
// reservations) by entry count; see streamCache for the eviction rule.
const maxCachedStreams = 4096

// maxKeptStreams bounds the kept order and intent streams (keptOrders,
// keptIntents), each: whole streams weigh more than a reservation's state,
// and a repeat comes soon after its request or not at all.
const maxKeptStreams = 1024

// streamCache holds, per stream, the state this process last wrote or read
// there and the stream's revision then (the shows have their own cache,
// showcache.go). It is a hint, never the truth: another replica (or the
// process manager) may have appended since, which the next append at the
// cached revision reveals by a revision conflict, or a read of the stream's
// tail from the cached revision + 1. Only decisions fenced that way, or that
// depend on facts a stream never changes, use it.
//
// Bound and eviction: at most limit entries (maxCachedStreams when unset;
// the kept order and intent streams set maxKeptStreams); inserting past the
// bound drops an arbitrary entry (Go's map order), and an entry a use found
// stale is dropped. A dropped entry costs one read of its whole stream the
// next time. Safe for concurrent use.
type streamCache[S any] struct {
	mu sync.Mutex
	m  map[string]cachedStream[S]
	// limit is the bound when set (> 0); maxCachedStreams otherwise.
	limit int
}

// cachedStream is one entry: the folded state at revision last.
type cachedStream[S any] struct {
	state S
	last  eventstore.Revision
}

// get returns the cached state of stream name and its revision.
func (c *streamCache[S]) get(name string) (S, eventstore.Revision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	return e.state, e.last, ok
}

// put caches state at revision last for stream name, unless a later
// revision is cached already.
func (c *streamCache[S]) put(name string, state S, last eventstore.Revision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]cachedStream[S])
	}
	if e, ok := c.m[name]; ok {
		if e.last > last {
			return
		}
	} else if len(c.m) >= cmp.Or(c.limit, maxCachedStreams) {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[name] = cachedStream[S]{state: state, last: last}
}

// drop forgets stream name.
func (c *streamCache[S]) drop(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

// loadKept is load for a stream this process keeps in c (orders; intents
// while they are young, see beginIntent): when c holds the stream, only its
// tail after the kept revision is read and decoded — for a finished order
// or intent, one read that returns no event — and the longer stream is kept
// in its place (ARCHITECTURE.md, "Performance": streams kept, tails read).
// A stream that is not held is loaded whole and kept if it exists.
//
// It is exact for streams that are only appended to while they are kept:
// a stream's events never change, so the kept prefix plus the tail is what
// a whole read returns. Orders are never truncated; an intent stream is
// truncated only after its intent expired, so beginIntent keeps intents
// only while they are far from expiry. A tail that does not continue the
// kept revision, a tail that records an intent again (the stream was
// truncated and its key reused: by a replica whose retention is shorter, or
// whose clock is ahead by half the retention), or a stream that has no live
// event any more, is read whole instead. The caller gets its own copy of the stream value, whose
// slices it may read but not write in place (appending is safe: their
// capacity ends at their length).
func (h *core) loadKept(ctx context.Context, c *streamCache[*stream], name string) (*stream, error) {
	if k, last, ok := c.get(name); ok {
		recs, err := h.store.ReadStream(ctx, name, last+1, 0)
		switch {
		case errors.Is(err, eventstore.ErrStreamNotFound):
			c.drop(name)
		case err != nil:
			return nil, unavailable(err)
		case len(recs) == 0:
			return k.clipped(), nil
		case recs[0].Revision != last+1:
			c.drop(name)
		default:
			next := k.clipped()
			for _, r := range recs {
				e, err := h.registry.Decode(r.Type, r.Data)
				if err != nil {
					return nil, fmt.Errorf("load %s@%d: %w", name, r.Revision, err)
				}
				if _, again := e.(domain.IntentRecorded); again {
					// A new intent of the key: the stream was truncated
					// and recorded again, continuing the revisions.
					next = nil
					break
				}
				r.Data = nil // decoded in events; see keptCopy
				next.events = append(next.events, e.(domain.Event))
				next.records = append(next.records, r)
				next.last = r.Revision
			}
			if next != nil {
				c.put(name, next, next.last)
				return next.clipped(), nil
			}
			c.drop(name)
		}
	}
	s, err := h.load(ctx, name)
	if err != nil {
		return nil, err
	}
	if s.exists {
		k := s.keptCopy()
		c.put(name, k, k.last)
		return k.clipped(), nil
	}
	return s, nil
}

// keptCopy returns s as a stream cache keeps it: its records without their
// data, which its events hold decoded (every use of a loaded stream's
// records reads their ids, revisions, positions, times and metadata), so a
// kept stream costs its decoded events and metadata only.
func (s *stream) keptCopy() *stream {
	cp := *s
	cp.records = make([]eventstore.RecordedEvent, len(s.records))
	for i, r := range s.records {
		r.Data = nil
		cp.records[i] = r
	}
	return &cp
}

// clipped returns a copy of s whose slices end at their capacity, so that
// appending to them never writes into s's arrays.
func (s *stream) clipped() *stream {
	cp := *s
	cp.events = cp.events[:len(cp.events):len(cp.events)]
	cp.records = cp.records[:len(cp.records):len(cp.records)]
	return &cp
}
