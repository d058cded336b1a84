package commands

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// maxCachedShows bounds the show-state cache; past it an arbitrary entry is
// dropped (it is rebuilt from the stream on next use).
const maxCachedShows = 4096

// showEntry is a process-local snapshot of a show stream: the folded state up
// to revision last, and every SeatsHeld by reservation id. It is refreshed
// from the stream's tail before every decision, so it is never stale where it
// matters; expected-revision appends keep replicas correct. An entry is only
// read or changed by the holder of the show's keyed lock (h.shows).
type showEntry struct {
	show   domain.Show
	exists bool
	last   eventstore.Revision
	held   map[string]heldRecord
}

type showCache struct {
	mu sync.Mutex
	m  map[string]*showEntry
}

func (c *showCache) get(id string) *showEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*showEntry{}
	}
	e := c.m[id]
	if e == nil {
		if len(c.m) >= maxCachedShows {
			for k := range c.m {
				delete(c.m, k)
				break
			}
		}
		e = &showEntry{held: map[string]heldRecord{}}
		c.m[id] = e
	}
	return e
}

// refreshShow brings the cached snapshot of show id up to the stream's head
// by reading only the events after it. The caller holds h.shows.Lock(id).
func (h *Handler) refreshShow(ctx context.Context, id string) (*showEntry, error) {
	e := h.showCache.get(id)
	from := eventstore.Revision(0)
	if e.exists {
		from = e.last + 1
	}
	recs, err := h.store.ReadStream(ctx, domain.ShowStream(id), from, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return e, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	for _, r := range recs {
		ev, err := h.registry.Decode(r.Type, r.Data)
		if err != nil {
			return nil, fmt.Errorf("load show %s@%d: %w", id, r.Revision, err)
		}
		de := ev.(domain.Event)
		e.show.Apply(de)
		if held, ok := de.(domain.SeatsHeld); ok {
			m, _ := eventstore.DecodeMetadata(r.Metadata)
			e.held[held.ReservationID] = heldRecord{id: r.ID, e: held, meta: m}
		}
		e.exists, e.last = true, r.Revision
	}
	return e, nil
}

// expected returns the expected revision for appending after the snapshot.
func (e *showEntry) expected() eventstore.ExpectedRevision {
	if !e.exists {
		return eventstore.NoStream()
	}
	return eventstore.Exact(e.last)
}

// showView returns a copy of the show's scalar state (Holds omitted).
func (e *showEntry) view() domain.Show {
	s := e.show
	s.Holds = nil
	return s
}
