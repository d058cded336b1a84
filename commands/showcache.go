package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// maxCachedShows bounds the show snapshots a process keeps; past it an
// arbitrary entry is dropped (it is rebuilt from the stream on next use).
const maxCachedShows = 4096

// maxHeldRecords bounds the SeatsHeld events the show cache keeps, across
// all shows (about 500 bytes each: some 4 MB in all). They answer the
// repeats of reservations whose hold is recent; at 1,000 holds a second
// they cover the last 8 seconds.
const maxHeldRecords = 1 << 13

// scanPage is how many events one read of a show stream's scan returns.
const scanPage = 1000

// showEntry is a process-local snapshot of a show stream: the folded state
// up to revision last (show.Holds: the live holds, at most one per seat of
// the show's capacity), and the show's most recent SeatsHeld events by
// reservation id (held). It is refreshed from the stream's tail before
// every decision that needs it, so it is never stale where it matters;
// expected-revision appends keep replicas correct. show, exists and last
// are only read or changed by the holder of the show's keyed lock
// (h.shows); held and partial belong to the cache (showCache.mu).
type showEntry struct {
	show   domain.Show
	exists bool
	last   eventstore.Revision
	// held holds the stream's SeatsHeld events that the cache still keeps
	// (showCache.remember). Guarded by showCache.mu.
	held map[string]heldRecord
	// partial is set once an earlier SeatsHeld of the stream is not in
	// held (the cache forgot it, or the entry left the cache): a
	// reservation missing from held may then be on the stream all the
	// same (see core.findHold). Guarded by showCache.mu.
	partial bool
}

// heldKey is a SeatsHeld the show cache keeps: of reservation res, in
// entry e.
type heldKey struct {
	e   *showEntry
	res string
}

// showCache keeps the snapshots of the shows this process decides on.
//
// Bound and eviction: at most maxCachedShows entries; a new show past it
// drops an arbitrary entry, which is rebuilt from its stream on next use
// (one read of the whole stream). Each entry holds its show's live holds
// (bounded by the show's capacity, the state a hold decision needs). The
// SeatsHeld events kept for repeats (showEntry.held) are at most
// maxHeldRecords across all shows, first in, first out: the oldest is
// forgotten when a new one arrives at the bound, and its entry becomes
// partial. A forgotten SeatsHeld costs a repeat of its reservation's
// request reads of the store (core.findHold), never a wrong answer.
// Safe for concurrent use; the zero value is ready.
type showCache struct {
	mu sync.Mutex
	m  map[string]*showEntry
	// ring lists the kept SeatsHeld in arrival order, a ring of at most
	// maxHeldRecords; next is where the next one goes once it is full.
	ring []heldKey
	next int
	// limit is the bound of ring when set (tests); maxHeldRecords
	// otherwise.
	limit int
}

// get returns the entry of show id, creating an empty one (dropping
// another at the bound).
func (c *showCache) get(id string) *showEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*showEntry{}
	}
	e := c.m[id]
	if e == nil {
		if len(c.m) >= maxCachedShows {
			for k, old := range c.m {
				delete(c.m, k)
				// Its SeatsHeld leave with it; whoever still uses the
				// entry finds it partial.
				old.held, old.partial = nil, true
				break
			}
		}
		e = &showEntry{held: map[string]heldRecord{}}
		c.m[id] = e
	}
	return e
}

// remember keeps rec, a SeatsHeld of e's stream, forgetting the oldest one
// kept at the bound. A reservation already kept is left as it is.
func (c *showCache) remember(e *showEntry, rec heldRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := rec.e.ReservationID
	if e.held == nil {
		e.partial = true // the entry left the cache: keep nothing more
		return
	}
	if _, ok := e.held[res]; ok {
		return
	}
	limit := maxHeldRecords
	if c.limit > 0 {
		limit = c.limit
	}
	k := heldKey{e: e, res: res}
	if len(c.ring) < limit {
		c.ring = append(c.ring, k)
	} else {
		old := c.ring[c.next]
		if old.e.held != nil {
			delete(old.e.held, old.res)
		}
		old.e.partial = true
		c.ring[c.next] = k
		c.next = (c.next + 1) % limit
	}
	e.held[res] = rec
}

// lookup returns the kept SeatsHeld of reservation res on e's stream, and
// whether e is partial (a reservation not kept may be on the stream).
func (c *showCache) lookup(e *showEntry, res string) (heldRecord, bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok := e.held[res]
	return rec, ok, e.partial
}

// refreshShow brings the cached snapshot of show id up to the stream's head
// by reading only the events after it. The caller holds h.shows.Lock(id).
func (h *core) refreshShow(ctx context.Context, id string) (*showEntry, error) {
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
			h.showCache.remember(e, heldRecord{id: r.ID, e: held, meta: m})
		}
		e.exists, e.last = true, r.Revision
	}
	return e, nil
}

// findHold returns the SeatsHeld of reservation resID on the stream of show
// showID, as far as the snapshot e has read it, and whether there is one.
// The caller holds h.shows.Lock(showID) and has e at the stream's head (or
// appends at e's revision, which fails if it is not). A reservation the
// cache keeps is answered from memory, and so is one it does not keep while
// the cache has forgotten no hold of the show. Otherwise the reservation
// was held before iff its seats are still held (e's live holds) or it was
// released — and every release follows a claim on the reservation's
// uniqueness stream (an order or an expiry), which is read; only then is
// the show stream scanned for the event. Returns a dependency error
// (unavailable) when the store cannot be read.
func (h *core) findHold(ctx context.Context, showID string, e *showEntry, resID string) (heldRecord, bool, error) {
	rec, ok, partial := h.showCache.lookup(e, resID)
	if ok || !partial {
		return rec, ok, nil
	}
	if _, live := e.show.Holds[resID]; !live {
		_, err := h.store.ReadStream(ctx, domain.ClaimStream(resID), 0, 1)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return heldRecord{}, false, nil // never held: neither live nor released
		}
		if err != nil {
			return heldRecord{}, false, unavailable(err)
		}
	}
	return h.scanHold(ctx, showID, resID, e.last)
}

// scanHold reads the show stream up to revision last for the SeatsHeld of
// reservation resID (the rare path of findHold). It is an error when there
// is none: the reservation's seats are held, or it was claimed, so its
// SeatsHeld is on the stream.
func (h *core) scanHold(ctx context.Context, showID, resID string, last eventstore.Revision) (heldRecord, bool, error) {
	name := domain.ShowStream(showID)
	for from := eventstore.Revision(0); from <= last; {
		recs, err := h.store.ReadStream(ctx, name, from, scanPage)
		if err != nil {
			return heldRecord{}, false, unavailable(err)
		}
		for _, r := range recs {
			if r.Revision > last {
				break
			}
			if r.Type != domain.TypeSeatsHeld || !bytes.Contains(r.Data, []byte(resID)) {
				continue
			}
			ev, err := h.registry.Decode(r.Type, r.Data)
			if err != nil {
				return heldRecord{}, false, fmt.Errorf("load show %s@%d: %w", showID, r.Revision, err)
			}
			if held, ok := ev.(domain.SeatsHeld); ok && held.ReservationID == resID {
				m, _ := eventstore.DecodeMetadata(r.Metadata)
				return heldRecord{id: r.ID, e: held, meta: m}, true, nil
			}
		}
		if len(recs) < scanPage {
			break
		}
		from = recs[len(recs)-1].Revision + 1
	}
	return heldRecord{}, false, fmt.Errorf("show %s: reservation %s holds seats or was claimed, but no SeatsHeld of it up to revision %d", showID, resID, last)
}

// expected returns the expected revision for appending after the snapshot.
func (e *showEntry) expected() eventstore.ExpectedRevision {
	if !e.exists {
		return eventstore.NoStream()
	}
	return eventstore.Exact(e.last)
}

// at returns the stream of show showID as the entry knows it: its
// revision only (for core.commit).
func (e *showEntry) at(showID string) *stream {
	return &stream{name: domain.ShowStream(showID), exists: e.exists, last: e.last}
}

// showView returns a copy of the show's scalar state (Holds omitted).
func (e *showEntry) view() domain.Show {
	s := e.show
	s.Holds = nil
	return s
}
