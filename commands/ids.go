package commands

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
)

// idNamespace is the UUIDv5 namespace of deterministic event ids. It never
// changes: changing it would make repeated follow-ups append duplicates.
var idNamespace = uuid.MustParse("6f1c1e5e-8c1b-4a51-9a40-2b0b8e0d7a11")

// NewID returns a new time-ordered UUIDv7 (RFC 9562 §5.7) as a string.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// DerivedID returns the UUIDv5 (RFC 9562 §5.5) of cause and step: the id of
// an event that follows deterministically from another, so a repeated append
// of it is recognised as the same event.
func DerivedID(cause, step string) string {
	return uuid.NewSHA1(idNamespace, []byte(cause+"\x00"+step)).String()
}

// IntentStream returns the intent stream of (actor, operation, key):
// "intent-" + hex SHA-256 of the three values, each prefixed by its length
// as 8 bytes big-endian, so no two triples share a stream.
func IntentStream(actor, operation, key string) string {
	var in [256]byte // the usual triple fits: hashed without an allocation
	b := in[:0]
	for _, s := range [...]string{actor, operation, key} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	sum := sha256.Sum256(b)
	var out [len(domain.CategoryIntent) + 2*sha256.Size]byte
	return string(hex.AppendEncode(append(out[:0], domain.CategoryIntent...), sum[:]))
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	var buf [2 * sha256.Size]byte
	return string(hex.AppendEncode(buf[:0], s[:]))
}

// keyedMutex serializes work per key inside one process (for example appends
// to one show stream), so local contention does not burn optimistic retries.
// Cross-process safety still comes from expected revisions. Bound: one
// entry per key held or waited for right now; eviction: a key's entry is
// dropped when its last holder or waiter unlocks.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
	// gone, made by the first awaitFree, is closed when the entry is
	// dropped.
	gone chan struct{}
}

// drop removes e, the entry of key, from k and wakes awaitFree; k.mu is
// held.
func (k *keyedMutex) drop(key string, e *keyedEntry) {
	delete(k.locks, key)
	if e.gone != nil {
		close(e.gone)
	}
}

// awaitFree waits until nobody holds or waits for key, at most d and while
// ctx lasts, and reports whether key is free.
func (k *keyedMutex) awaitFree(ctx context.Context, key string, d time.Duration) bool {
	k.mu.Lock()
	e := k.locks[key]
	if e == nil {
		k.mu.Unlock()
		return true
	}
	if e.gone == nil {
		e.gone = make(chan struct{})
	}
	gone := e.gone
	k.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-gone:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func newKeyedMutex() *keyedMutex { return &keyedMutex{locks: map[string]*keyedEntry{}} }

// Lock locks key and returns its unlock function.
func (k *keyedMutex) Lock(key string) func() {
	k.mu.Lock()
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			k.drop(key, e)
		}
		k.mu.Unlock()
	}
}

// TryLock locks key if it is free and returns its unlock function, or nil.
func (k *keyedMutex) TryLock(key string) func() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, busy := k.locks[key]; busy {
		return nil
	}
	e := &keyedEntry{refs: 1}
	e.mu.Lock()
	k.locks[key] = e
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		k.drop(key, e)
		k.mu.Unlock()
	}
}
