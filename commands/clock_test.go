package commands

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

func TestClockReadingExtrapolatesAndExpires(t *testing.T) {
	t.Parallel()
	db := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	var r clockReading
	tk := r.ticket(0)
	if _, ok := r.now(tk); ok {
		t.Fatal("an empty reading answered")
	}
	at := time.Now()
	r.set(tk, db, at)
	before := time.Now()
	got, ok := r.now(tk)
	after := time.Now()
	if !ok || got.Before(db.Add(before.Sub(at))) || got.After(db.Add(after.Sub(at))) {
		t.Fatalf("now() = %v, %v; want db + the time elapsed since the reading", got, ok)
	}
	r.set(tk, db.Add(-time.Hour), at.Add(-time.Millisecond)) // an older reading
	if got, _ := r.now(tk); got.Before(db) {
		t.Errorf("an older reading replaced a newer one: %v", got)
	}
	var old clockReading
	old.set(old.ticket(0), db, time.Now().Add(-maxReadingAge-time.Millisecond))
	if got, ok := old.now(old.ticket(0)); ok {
		t.Errorf("a reading older than maxReadingAge answered %v", got)
	}
}

// TestClockReadingDropAndMoves shows the process-wide reading forgotten by
// a drop (a fault point) and by a move of a test's clock, including a read
// or append that began before either and answers after.
func TestClockReadingDropAndMoves(t *testing.T) {
	t.Parallel()
	db := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	var r clockReading
	begun := r.ticket(0) // a read in flight across the drop
	r.drop()
	r.set(begun, db, time.Now())
	if got, ok := r.now(r.ticket(0)); ok {
		t.Fatalf("a read begun before a drop renewed the reading: %v", got)
	}
	r.set(r.ticket(0), db, time.Now())
	if _, ok := r.now(r.ticket(0)); !ok {
		t.Fatal("a reading taken after the drop did not answer")
	}
	if got, ok := r.now(r.ticket(1)); ok {
		t.Fatalf("a reading taken before the clock moved answered %v", got)
	}
	r.set(r.ticket(1), db.Add(time.Hour), time.Now())
	if got, ok := r.now(r.ticket(1)); !ok || got.Before(db.Add(time.Hour)) {
		t.Fatalf("after the move: %v, %v; want from %v", got, ok, db.Add(time.Hour))
	}
	r.drop()
	if got, ok := r.now(r.ticket(1)); ok {
		t.Fatalf("a dropped reading answered %v", got)
	}
}

// TestHandlerClockIsProcessWide shows one reading serving every caller of
// a Handler (no context carries it), renewed by a quick append that
// reports the store's clock, and a move of a test's clock seen at once.
func TestHandlerClockIsProcessWide(t *testing.T) {
	t.Parallel()
	clock := newFakeClock(payT0)
	h := New(Config{}, newMemStore(), clock, nil, newTestRegistry(), nil)
	ctx := context.Background()
	if got, err := h.streams.now(ctx); err != nil || got.Before(payT0) || got.After(payT0.Add(maxReadingAge)) {
		t.Fatalf("now() = %v, %v; want from %v", got, err, payT0)
	}
	if clock.reads() != 1 {
		t.Fatalf("%d clock reads, want 1", clock.reads())
	}
	for range 5 {
		if _, err := h.streams.now(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if clock.reads() != 1 {
		t.Errorf("%d clock reads after 6 decisions in one second, want 1 (one reading for the process)", clock.reads())
	}
	clock.Advance(time.Hour)
	if got, err := h.streams.now(ctx); err != nil || got.Before(payT0.Add(time.Hour)) {
		t.Fatalf("now() after the clock moved = %v, %v; want from %v", got, err, payT0.Add(time.Hour))
	}
	later := payT0.Add(2 * time.Hour)
	h.streams.noteAppendClock(h.streams.ticket(), eventstore.AppendResult{Now: later}, time.Now().Add(-2*maxAppendClockTrip))
	if got, _ := h.streams.now(ctx); !got.Before(later) {
		t.Fatalf("a slow append renewed the reading: %v", got)
	}
	h.streams.noteAppendClock(h.streams.ticket(), eventstore.AppendResult{}, time.Now())
	if got, _ := h.streams.now(ctx); !got.Before(later) {
		t.Fatalf("an append without a clock renewed the reading: %v", got)
	}
	h.streams.noteAppendClock(h.streams.ticket(), eventstore.AppendResult{Now: later}, time.Now())
	if got, _ := h.streams.now(ctx); got.Before(later) || got.After(later.Add(maxReadingAge)) {
		t.Fatalf("reading after a quick append = %v; want from %v", got, later)
	}
}

func TestStreamCacheIsBounded(t *testing.T) {
	t.Parallel()
	var c streamCache[int]
	for i := range maxCachedStreams + 10 {
		c.put(fmt.Sprint("s-", i), i, 1)
	}
	if n := len(c.m); n != maxCachedStreams {
		t.Fatalf("%d entries cached, want the bound %d", n, maxCachedStreams)
	}
	c.put("x", 1, 5)
	c.put("x", 2, 4) // an older revision
	if v, last, ok := c.get("x"); !ok || v != 1 || last != 5 {
		t.Errorf("get(x) = %d@%d, %v; want 1@5 (an older revision does not replace a newer)", v, last, ok)
	}
	c.drop("x")
	if _, _, ok := c.get("x"); ok {
		t.Error("a dropped entry is still cached")
	}
}
