package commands

import (
	"crypto/sha256"
	"sync"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore"
)

// writtenCap bounds the event ids a writtenSet remembers.
const writtenCap = 1 << 16

// writtenSet remembers the ids of the events this process appended and the
// store acknowledged (and a few side effects done for good, see note), so the process manager can recognise a follow-up the
// request already wrote without appending it again (an idempotent repeat
// that would be a no-op statement), and the webhook a payment this process
// recorded as succeeded (succeededHere). It is a hint only: an id it does not
// hold (never written here, written by another replica, or evicted) sends
// the process manager down the full path, which appends idempotently. An id
// it holds is an event that committed; a hit never skips work that is not
// done. Ids are held as 16 bytes (writtenKey), so the set holds no pointer
// for the collector to scan. Bound: writtenCap ids (about 100 bytes each
// with the map's overhead and the ring: some 6.4 MB, measured); eviction:
// first in, first out. Safe for concurrent use; the zero value is ready.
type writtenSet struct {
	mu  sync.Mutex
	ids *fifoMap[[16]byte, eventstore.Position] // id -> log position of its append
}

// writtenKey is the 16 bytes an id is held as: the UUID an event id is,
// or, for a key of note (not a UUID), the first 16 bytes of its SHA-256. A
// collision between two of them is as unlikely as one between two random
// UUIDs.
func writtenKey(id string) [16]byte {
	if u, err := uuid.Parse(id); err == nil && len(id) == 36 {
		return u
	}
	sum := sha256.Sum256([]byte(id))
	return [16]byte(sum[:16])
}

// add records the ids of events the store acknowledged, with at, the log
// position the append reported (AppendResult.Position: of the batch's last
// event, or of the stored one for an idempotent repeat).
func (w *writtenSet) add(events []eventstore.EventData, at eventstore.Position) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range events {
		w.putLocked(e.ID, at)
	}
}

// note records a side effect this process completed that never needs
// repeating, under a key that cannot be an event id: keyPlaced or
// keyShredded of an order (its data key's token dropped, its data key
// deleted).
func (w *writtenSet) note(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.putLocked(key, eventstore.Position{})
}

// Keys of note.
func keyPlaced(orderID string) string   { return "key-placed/" + orderID }
func keyShredded(orderID string) string { return "key-shredded/" + orderID }

func (w *writtenSet) putLocked(id string, at eventstore.Position) {
	if w.ids == nil {
		w.ids = newFIFOMap[[16]byte, eventstore.Position](writtenCap)
	}
	w.ids.put(writtenKey(id), at)
}

// has reports whether every id was recorded by add (and not evicted since).
func (w *writtenSet) has(ids ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ids == nil {
		return len(ids) == 0
	}
	for _, id := range ids {
		if _, ok := w.ids.get(writtenKey(id)); !ok {
			return false
		}
	}
	return true
}

// hasAfter reports whether id was recorded by add at a log position after
// after. Recovery asks it with the position of the intent record it
// follows: ids derived from an intent's stream name repeat when the
// idempotency key is reused once the intent's retention has passed, and an
// id written for the earlier intent lies before the new record.
func (w *writtenSet) hasAfter(after eventstore.Position, id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ids == nil {
		return false
	}
	at, ok := w.ids.get(writtenKey(id))
	return ok && after.Less(at)
}
