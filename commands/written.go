package commands

import (
	"sync"

	"github.com/retrysafe/booking/eventstore"
)

// writtenCap bounds the event ids a writtenSet remembers.
const writtenCap = 1 << 16

// writtenSet remembers the ids of the events this process appended and the
// store acknowledged, so the process manager can recognise a follow-up the
// request already wrote without appending it again (an idempotent repeat
// that would be a no-op statement). It is a hint only: an id it does not
// hold (never written here, written by another replica, or evicted) sends
// the process manager down the full path, which appends idempotently. An id
// it holds is an event that committed; a hit never skips work that is not
// done. Bound: writtenCap ids (16 bytes each plus the map's overhead, about
// 4 MB); eviction: first in, first out. Safe for concurrent use; the zero
// value is ready.
type writtenSet struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	ring []string // the ids in arrival order, a ring of writtenCap
	next int      // where the next id goes in ring
}

// add records the ids of events the store acknowledged.
func (w *writtenSet) add(events []eventstore.EventData) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ids == nil {
		w.ids = make(map[string]struct{}, writtenCap)
		w.ring = make([]string, 0, writtenCap)
	}
	for _, e := range events {
		if _, ok := w.ids[e.ID]; ok {
			continue
		}
		if len(w.ring) < writtenCap {
			w.ring = append(w.ring, e.ID)
		} else {
			delete(w.ids, w.ring[w.next])
			w.ring[w.next] = e.ID
			w.next = (w.next + 1) % writtenCap
		}
		w.ids[e.ID] = struct{}{}
	}
}

// has reports whether every id was recorded by add (and not evicted since).
func (w *writtenSet) has(ids ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if _, ok := w.ids[id]; !ok {
			return false
		}
	}
	return true
}
