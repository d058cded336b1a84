package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// keptHolds returns the number of SeatsHeld the show cache keeps across
// its entries, and the number of entries.
func (c *showCache) keptHolds() (held, shows int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.m {
		held += len(e.held)
	}
	return held, len(c.m)
}

// newCacheTestHandler returns a Handler on store with the fake clock at
// t0 and no wait for in-flight repeats.
func newCacheTestHandler(store EventStore, clock Clock) *Handler {
	cfg := DefaultConfig()
	cfg.Executor = "cache-test"
	cfg.InUseWait = 0
	return New(cfg, store, clock, newFakePayments(), newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithKeys(newMemKeys()))
}

// scheduleTestShow schedules a show of capacity seats starting in a day.
func scheduleTestShow(t *testing.T, h *Handler, capacity int) string {
	t.Helper()
	show, _, err := h.ScheduleShow(context.Background(), Request{Actor: "admin", Operation: OpScheduleShow, Key: "show-" + NewID()},
		ScheduleShowCommand{Name: "Big", StartsAt: time.Date(2030, 1, 1, 20, 0, 0, 0, time.UTC), Capacity: capacity,
			Price: domain.Money{Amount: 100, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	return show.ID
}

// countHolds returns the SeatsHeld of reservation res on show's stream.
func countHolds(t *testing.T, store EventStore, show, res string) int {
	t.Helper()
	recs, err := store.ReadStream(context.Background(), domain.ShowStream(show), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Type == "SeatsHeld" && strings.Contains(string(r.Data), res) {
			n++
		}
	}
	return n
}

// TestShowCache_PastHundredThousandReservations: a show of 1,000 seats
// whose stream holds 100,000 reservations (all but the last 500 released
// after a claim, as expiry or a failed payment releases them): the cache
// keeps at most maxHeldRecords of their SeatsHeld and its memory stays
// within about 500 bytes each (8 MiB in all, where keeping every one took
// some 48 MB), while every answer stays exact — a recent
// hold is found in memory, an old live one and an old released one by
// reading the store, one never held is not found, and new holds decide
// against the right availability.
func TestShowCache_PastHundredThousandReservations(t *testing.T) {
	const total, live, capacity = 100_000, 500, 1000
	ctx := context.Background()
	store := newMemStore()
	h := newCacheTestHandler(store, newFakeClock(time.Date(2029, 6, 1, 12, 0, 0, 0, time.UTC)))
	show := scheduleTestShow(t, h, capacity)
	ids := make([]string, total)
	var batch []domain.Event
	flush := func() {
		if len(batch) > 0 {
			mustAppend(t, store, domain.ShowStream(show), batch...)
			batch = batch[:0]
		}
	}
	for i := range ids {
		ids[i] = NewID()
		batch = append(batch, domain.SeatsHeld{ShowID: show, ReservationID: ids[i], Actor: "alice", Intent: "intent-" + ids[i],
			Quantity: 1, Amount: domain.Money{Amount: 100, Currency: "EUR"}, ExpiresAt: time.Date(2029, 6, 1, 12, 10, 0, 0, time.UTC)})
		if i < total-live {
			// Every release follows a claim; only the claims findHold is
			// asked about below are written (100,000 streams would cost
			// the in-memory store more than the test).
			if i == 0 || i == total/2 {
				mustAppend(t, store, domain.ClaimStream(ids[i]), domain.ExpiryClaimed{ReservationID: ids[i], ShowID: show, Quantity: 1})
			}
			batch = append(batch, domain.SeatsReleased{ShowID: show, ReservationID: ids[i], Quantity: 1, Reason: domain.ReleaseExpired})
		}
		if len(batch) >= 1000 {
			flush()
		}
	}
	flush()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	unlock := h.shows.Lock(show)
	e, err := h.streams.refreshShow(ctx, show)
	unlock()
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	held, shows := h.streams.shows.keptHolds()
	if held > maxHeldRecords || shows != 1 {
		t.Errorf("after %d reservations the cache keeps %d SeatsHeld in %d entries, want at most %d in 1", total, held, shows, maxHeldRecords)
	}
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 8<<20 {
		t.Errorf("the show's snapshot of %d reservations takes %d bytes of heap, want at most 8 MiB (%d SeatsHeld kept, %d live holds)",
			total, grown, held, len(e.show.Holds))
	}
	t.Logf("after %d reservations: %d SeatsHeld kept, %d live holds, heap grown by %d bytes", total, held, len(e.show.Holds),
		int64(after.HeapAlloc)-int64(before.HeapAlloc))
	if got := e.show.Available(); got != capacity-live {
		t.Fatalf("snapshot: %d seats available, want %d", got, capacity-live)
	}

	unlock = h.shows.Lock(show)
	defer func() {
		if unlock != nil {
			unlock()
		}
	}()
	for _, tt := range []struct {
		name  string
		res   string
		found bool
	}{
		{"the latest hold, kept in memory", ids[total-1], true},
		{"an old hold still holding seats, read from the store", ids[total-live], true},
		{"the first hold, released after a claim, read from the store", ids[0], true},
		{"a hold in the middle, released", ids[total/2], true},
		{"a reservation never held", NewID(), false},
	} {
		rec, ok, err := h.streams.findHold(ctx, show, e, tt.res)
		if err != nil || ok != tt.found || (ok && rec.e.ReservationID != tt.res) {
			t.Errorf("%s: findHold = %v, %v, %v; want found %v", tt.name, rec.e.ReservationID, ok, err, tt.found)
		}
	}
	unlock()
	unlock = nil

	// New reservations decide on the same snapshot: the 500 free seats go,
	// then sold out.
	for i := range capacity - live {
		if _, _, err := h.ReserveSeats(ctx, Request{Actor: fmt.Sprintf("u%d", i), Operation: OpReserveSeats, Key: "k"},
			ReserveSeatsCommand{ShowID: show, Quantity: 1}); err != nil {
			t.Fatalf("reservation %d of the %d free seats: %v", i+1, capacity-live, err)
		}
	}
	_, _, err = h.ReserveSeats(ctx, Request{Actor: "late", Operation: OpReserveSeats, Key: "k"}, ReserveSeatsCommand{ShowID: show, Quantity: 1})
	if !errors.Is(err, domain.ErrSoldOut) {
		t.Errorf("a reservation past capacity = %v, want sold out", err)
	}
	if held, _ := h.streams.shows.keptHolds(); held > maxHeldRecords {
		t.Errorf("after new holds the cache keeps %d SeatsHeld, want at most %d", held, maxHeldRecords)
	}
}

// failingStore is an EventStore that refuses appends to streams whose name
// starts with a prefix while it is set (a process that died before the
// append).
type failingStore struct {
	EventStore
	prefix atomic.Value // string; "" fails nothing
}

var errTestRefused = errors.New("append refused by the test")

func (s *failingStore) Append(ctx context.Context, stream string, exp eventstore.ExpectedRevision, evs ...eventstore.EventData) (eventstore.AppendResult, error) {
	if p, _ := s.prefix.Load().(string); p != "" && strings.HasPrefix(stream, p) {
		return eventstore.AppendResult{}, errTestRefused
	}
	return s.EventStore.Append(ctx, stream, exp, evs...)
}

// AppendMulti implements EventStore as a store without atomic units
// (KurrentDB's part-by-part AppendMulti) in a process that dies at the
// first refused part: the parts before it are written.
func (s *failingStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	res := make([]eventstore.AppendResult, 0, len(appends))
	for _, a := range appends {
		r, err := s.Append(ctx, a.Stream, a.Expected, a.Events...)
		if err != nil {
			return nil, err
		}
		res = append(res, r)
	}
	return res, nil
}

// TestShowCache_RepeatsAfterTheHoldWasForgotten: with a cache that keeps 4
// SeatsHeld, a repeat of a reservation whose hold the cache has forgotten
// and whose reservation stream was never written finds the hold on the
// stream (live, or released after a claim) and holds nothing twice; a
// takeover of one that never held decides its hold.
func TestShowCache_RepeatsAfterTheHoldWasForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := newMemStore()
	store := &failingStore{EventStore: mem}
	clock := newFakeClock(time.Date(2029, 6, 1, 12, 0, 0, 0, time.UTC))
	h := newCacheTestHandler(store, clock)
	h.streams.shows.limit = 4
	show := scheduleTestShow(t, h, 100)
	reserve := func(actor string) error {
		_, _, err := h.ReserveSeats(ctx, Request{Actor: actor, Operation: OpReserveSeats, Key: "k"}, ReserveSeatsCommand{ShowID: show, Quantity: 1})
		return err
	}
	target := func(actor string) string {
		recs, err := mem.ReadStream(ctx, IntentStream(actor, OpReserveSeats, "k"), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := h.registry.Decode(recs[0].Type, recs[0].Data)
		if err != nil {
			t.Fatal(err)
		}
		return ev.(domain.IntentRecorded).TargetID
	}
	fillers := 0
	forget := func() { // 6 more holds push out every SeatsHeld kept before
		for range 6 {
			fillers++
			if err := reserve(fmt.Sprintf("filler-%d", fillers)); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Held, then the process "dies" before the reservation stream.
	store.prefix.Store("reservation-")
	for _, a := range []string{"live", "released"} {
		if err := reserve(a); !errors.Is(err, errTestRefused) {
			t.Fatalf("reserve %s with reservation appends refused = %v", a, err)
		}
	}
	// Recorded, then the process "dies" before the hold.
	store.prefix.Store("show-")
	if err := reserve("unheld"); err == nil {
		t.Fatal("reserve with show appends refused = nil")
	}
	store.prefix.Store("")
	forget()
	rel := target("released")
	mustAppend(t, mem, domain.ClaimStream(rel), domain.ExpiryClaimed{ReservationID: rel, ShowID: show, Quantity: 1})
	mustAppend(t, mem, domain.ShowStream(show), domain.SeatsReleased{ShowID: show, ReservationID: rel, Quantity: 1, Reason: domain.ReleaseExpired})
	forget()
	if held, _ := h.streams.shows.keptHolds(); held > 4 {
		t.Fatalf("the cache keeps %d SeatsHeld, want at most 4", held)
	}

	clock.Advance(time.Minute) // past every intent lease: repeats take over
	for _, a := range []string{"live", "released", "unheld"} {
		if err := reserve(a); err != nil {
			t.Errorf("repeat of %s = %v, want its reservation", a, err)
			continue
		}
		res := target(a)
		if n := countHolds(t, mem, show, res); n != 1 {
			t.Errorf("repeat of %s: %d SeatsHeld of its reservation, want 1", a, n)
		}
		r, err := h.GetReservation(ctx, a, res)
		if err != nil || r.ID != res {
			t.Errorf("repeat of %s: GetReservation = %+v, %v", a, r, err)
		}
	}
	got, err := h.GetShow(ctx, show)
	if want := 100 - (2*6 + 2); err != nil || got.Available() != want { // fillers, live and unheld
		t.Errorf("GetShow = %d available, %v; want %d", got.Available(), err, want)
	}
}
