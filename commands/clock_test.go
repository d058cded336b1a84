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
	if _, ok := r.now(); ok {
		t.Fatal("an empty reading answered")
	}
	at := time.Now()
	r.set(db, at)
	before := time.Now()
	got, ok := r.now()
	after := time.Now()
	if !ok || got.Before(db.Add(before.Sub(at))) || got.After(db.Add(after.Sub(at))) {
		t.Fatalf("now() = %v, %v; want db + the time elapsed since the reading", got, ok)
	}
	r.set(db.Add(-time.Hour), at.Add(-time.Millisecond)) // an older reading
	if got, _ := r.now(); got.Before(db) {
		t.Errorf("an older reading replaced a newer one: %v", got)
	}
	var old clockReading
	old.set(db, time.Now().Add(-maxReadingAge-time.Millisecond))
	if got, ok := old.now(); ok {
		t.Errorf("a reading older than maxReadingAge answered %v", got)
	}
}

func TestAppendClockRenewsOnlyAfterAShortRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := withClockReading(context.Background())
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	noteAppendClock(ctx, eventstore.AppendResult{Now: now}, time.Now().Add(-2*maxAppendClockTrip))
	if got, ok := readingOf(ctx).now(); ok {
		t.Fatalf("a slow append renewed the reading: %v", got)
	}
	noteAppendClock(ctx, eventstore.AppendResult{}, time.Now())
	if got, ok := readingOf(ctx).now(); ok {
		t.Fatalf("an append without a clock renewed the reading: %v", got)
	}
	noteAppendClock(ctx, eventstore.AppendResult{Now: now}, time.Now())
	if got, ok := readingOf(ctx).now(); !ok || got.Before(now) || got.After(now.Add(maxReadingAge)) {
		t.Fatalf("reading after a quick append = %v, %v; want from %v", got, ok, now)
	}
	if withClockReading(ctx) != ctx {
		t.Error("a nested use case replaced its caller's reading")
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
