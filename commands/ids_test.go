package commands

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// canonicalUUID is the lowercase 8-4-4-4-12 form.
var canonicalUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// idsIntentStream is a realistic cause: an intent stream name.
const idsIntentStream = "intent-9c1d6e0a4f2b8375e6d1c0b9a8f7e6d5c4b3a29181706f5e4d3c2b1a09f8e7d6"

// uuidV5 computes the UUIDv5 (RFC 9562 §5.5) of name in namespace ns by
// hand, independently of the uuid package.
func uuidV5(ns, name string) string {
	nsb, err := hex.DecodeString(strings.ReplaceAll(ns, "-", ""))
	if err != nil {
		panic(err)
	}
	h := sha1.New()
	h.Write(nsb)
	h.Write([]byte(name))
	b := h.Sum(nil)[:16]
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func TestDerivedIDIsPinned(t *testing.T) {
	t.Parallel()
	// These values were computed outside Go. They must never change:
	// repeated follow-ups recognise themselves by these ids.
	tests := []struct {
		name  string
		cause string
		step  string
		want  string
	}{
		{"The seats-held id of an intent is pinned.", idsIntentStream, "seats-held", "4ea47684-fcaf-5dc9-b80d-8ff411c34d02"},
		{"The first ticket id of an order is pinned.", "0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a41", "ticket-1", "162057dc-e11c-5aa7-909c-8794f9e0d673"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := DerivedID(tt.cause, tt.step)
			if got != tt.want {
				t.Errorf("DerivedID(%q, %q) = %s, want %s", tt.cause, tt.step, got, tt.want)
			}
			// The namespace and the name layout (cause NUL step) are the contract.
			if hand := uuidV5("6f1c1e5e-8c1b-4a51-9a40-2b0b8e0d7a11", tt.cause+"\x00"+tt.step); got != hand {
				t.Errorf("DerivedID(%q, %q) = %s, want the v5 of cause NUL step, %s", tt.cause, tt.step, got, hand)
			}
		})
	}
	if ids := TicketIDs("0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a41", 1); ids[0] != "162057dc-e11c-5aa7-909c-8794f9e0d673" {
		t.Errorf("TicketIDs(order, 1) = %v, want [162057dc-e11c-5aa7-909c-8794f9e0d673]", ids)
	}
}

func TestDerivedIDIsADeterministicV5(t *testing.T) {
	t.Parallel()
	a, b := DerivedID(idsIntentStream, "seats-held"), DerivedID(idsIntentStream, "seats-held")
	if a != b {
		t.Errorf("DerivedID(...) = %s, then %s; want the same id", a, b)
	}
	u, err := uuid.Parse(a)
	if err != nil {
		t.Fatalf("uuid.Parse(DerivedID(...) %q) error = %v", a, err)
	}
	if u.Version() != 5 || u.Variant() != uuid.RFC4122 {
		t.Errorf("DerivedID(...) = version %d variant %v, want version 5 variant RFC4122", u.Version(), u.Variant())
	}
	if !canonicalUUID.MatchString(a) {
		t.Errorf("DerivedID(...) = %q, want the canonical lowercase form", a)
	}
}

func TestDerivedIDIsDistinctPerCauseAndStep(t *testing.T) {
	t.Parallel()
	pairs := [][2]string{
		{idsIntentStream, "seats-held"},
		{idsIntentStream, "order-claimed"},
		{idsIntentStream, "rejected"},
		{"0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a41", "seats-held"},
		{"0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a42", "seats-held"},
		{"ab", "c"},
		{"a", "bc"},
		{"abc", ""},
		{"", "abc"},
		{"c", "ab"},
		{"a", "b"},
		{"b", "a"},
		{"", ""},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		id := DerivedID(p[0], p[1])
		if prev, dup := seen[id]; dup {
			t.Errorf("DerivedID(%q, %q) = DerivedID(%q, %q) = %s, want distinct ids", p[0], p[1], prev[0], prev[1], id)
		}
		seen[id] = p
	}
	// Ticket ids of one order are distinct from each other and from another order's.
	all := append(TicketIDs("0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a41", 20), TicketIDs("0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a42", 20)...)
	slices.Sort(all)
	if n := len(slices.Compact(all)); n != 40 {
		t.Errorf("TicketIDs of two orders of 20 seats give %d distinct ids, want 40", n)
	}
}

// intentStreamByHand computes the intent stream name as ARCHITECTURE.md, Key
// lineage, defines it:
// sha256 of the length-prefixed (8 bytes big-endian) actor, operation, key.
func intentStreamByHand(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return "intent-" + hex.EncodeToString(h.Sum(nil))
}

func TestIntentStreamIsPinned(t *testing.T) {
	t.Parallel()
	// Computed outside Go; it must never change, or every stored intent's
	// key would start a new intent.
	const want = "intent-8388d27815b04452ccca72da64a3ccfcdcad2a8c6fb462811b86a1870a4651b0"
	if got := IntentStream("user-alice", OpPlaceOrder, "key-1"); got != want {
		t.Errorf("IntentStream(%q, %q, %q) = %s, want %s", "user-alice", OpPlaceOrder, "key-1", got, want)
	}
	if got := intentStreamByHand("user-alice", OpPlaceOrder, "key-1"); got != want {
		t.Errorf("the length-prefixed SHA-256 by hand = %s, want %s", got, want)
	}
}

func TestIntentStreamIsDistinctPerTriple(t *testing.T) {
	t.Parallel()
	triples := [][3]string{
		{"user-alice", OpPlaceOrder, "key-1"},
		{"user-alice", OpPlaceOrder, "key-2"},
		{"user-alice", OpPlaceOrder, "Key-1"}, // keys are case-sensitive
		{"user-alice", OpReserveSeats, "key-1"},
		{"user-bob", OpPlaceOrder, "key-1"},
		// Length-prefixing keeps the boundaries: no concatenation collides.
		{"ab", "c", "k"},
		{"a", "bc", "k"},
		{"a", "b", "ck"},
		{"abc", "", "k"},
		{"", "abc", "k"},
		{"a\x00", "b", "k"},
		{"a", "\x00b", "k"},
		{"", "", ""},
		// Longer than the stack buffer IntentStream hashes in (256 bytes).
		{"user-" + strings.Repeat("a", 200), OpPlaceOrder, strings.Repeat("k", 255)},
	}
	seen := map[string][3]string{}
	for _, tr := range triples {
		got := IntentStream(tr[0], tr[1], tr[2])
		if prev, dup := seen[got]; dup {
			t.Errorf("IntentStream%q = IntentStream%q = %s, want distinct streams", tr, prev, got)
		}
		seen[got] = tr
		if hand := intentStreamByHand(tr[0], tr[1], tr[2]); got != hand {
			t.Errorf("IntentStream%q = %s, want %s (length-prefixed SHA-256)", tr, got, hand)
		}
		if again := IntentStream(tr[0], tr[1], tr[2]); again != got {
			t.Errorf("IntentStream%q = %s, then %s; want the same stream", tr, got, again)
		}
	}
	if a, b := IntentStream("ab", "c", "k"), IntentStream("a", "bc", "k"); a == b {
		t.Errorf(`IntentStream("ab", "c", "k") = IntentStream("a", "bc", "k") = %s, want different`, a)
	}
}

func TestNewIDIsAV7(t *testing.T) {
	t.Parallel()
	before := time.Now().UnixMilli()
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = NewID()
	}
	after := time.Now().UnixMilli()
	for _, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil {
			t.Fatalf("uuid.Parse(NewID() %q) error = %v", id, err)
		}
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("NewID() = %s, version %d variant %v; want version 7 variant RFC4122", id, u.Version(), u.Variant())
		}
		if !canonicalUUID.MatchString(id) {
			t.Fatalf("NewID() = %q, want the canonical lowercase form", id)
		}
		// The first 48 bits are the Unix time in milliseconds.
		ms := int64(binary.BigEndian.Uint64(append([]byte{0, 0}, u[:6]...)))
		// The generator may run a few milliseconds ahead of the clock to stay
		// monotonic under bursts.
		if ms < before || ms > after+50 {
			t.Fatalf("NewID() = %s with time %d ms, want within [%d, %d]", id, ms, before, after)
		}
	}
	if !slices.IsSorted(ids) {
		t.Errorf("NewID() ids are not time-ordered")
	}
	sorted := slices.Clone(ids)
	if len(slices.Compact(sorted)) != len(ids) {
		t.Errorf("NewID() returned a duplicate among %d ids", len(ids))
	}
}

// TestKeyedMutexAwaitFree: drives (TryLock), waits for the
// drive of a key (awaitFree) and other users of the mutex (Lock) on the
// same few keys, concurrently (and some waits whose context is cancelled):
// nothing panics (a gone channel closed twice), nothing deadlocks, the race
// detector finds nothing, and no entry is left once everyone unlocked.
func TestKeyedMutexAwaitFree(t *testing.T) {
	t.Parallel()
	k := newKeyedMutex()
	keys := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	var held [3]atomic.Int32
	const rounds = 3000
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				j := (g + i) % len(keys)
				if u := k.TryLock(keys[j]); u != nil {
					held[j].Add(1)
					runtime.Gosched()
					held[j].Add(-1)
					u()
				}
			}
		}()
	}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				j := (g + i) % len(keys)
				ctx, cancel := context.WithCancel(context.Background())
				if i%7 == 0 {
					cancel()
				}
				k.awaitFree(ctx, keys[j], time.Duration(i%3)*time.Millisecond)
				cancel()
			}
		}()
	}
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				u := k.Lock("refund/" + keys[(g+i)%len(keys)])
				runtime.Gosched()
				u()
			}
		}()
	}
	wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.locks) != 0 {
		t.Errorf("%d entries left after every holder unlocked: %v", len(k.locks), k.locks)
	}
}
