package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// TestPurgeStreams truncates exactly the streams of the prefix whose first
// live event is older than the age by the database clock, keeps their last
// revision, and counts the events left.
func TestPurgeStreams(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := New(pool, WithAppendTimeout(time.Minute))
	ctx := context.Background()
	add := func(stream string, n int) {
		t.Helper()
		data := make([]eventstore.EventData, n)
		for i := range data {
			d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), domain.OrderConfirmed{}, eventstore.Metadata{})
			if err != nil {
				t.Fatal(err)
			}
			data[i] = d
		}
		if _, err := store.Append(ctx, stream, eventstore.Any(), data...); err != nil {
			t.Fatal(err)
		}
	}
	add("intent-old1", 2)
	add("intent-old2", 1)
	add("intent-new", 1)
	add("order-old", 1)
	add("intentXold", 1) // '_' or '%' in a prefix would match it; "intent-" does not
	if _, err := pool.Exec(ctx, `UPDATE events SET recorded_at = now() - interval '2 hours' WHERE stream <> 'intent-new'`); err != nil {
		t.Fatal(err)
	}
	if n, err := store.EventCount(ctx); err != nil || n != 6 {
		t.Fatalf("EventCount() = %d, %v; want 6", n, err)
	}
	if n, err := store.PurgeStreams(ctx, "intent-", time.Hour, 1); err != nil || n != 1 {
		t.Fatalf("PurgeStreams(limit 1) = %d, %v; want 1", n, err)
	}
	if n, err := store.PurgeStreams(ctx, "intent-", time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("PurgeStreams(limit 10) = %d, %v; want the other old intent", n, err)
	}
	if n, err := store.PurgeStreams(ctx, "intent-", time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("PurgeStreams again = %d, %v; want 0", n, err)
	}
	if n, err := store.PurgeStreams(ctx, "intent_", time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("PurgeStreams(intent_) = %d, %v; want 0 (the prefix is literal)", n, err)
	}
	if n, err := store.EventCount(ctx); err != nil || n != 3 {
		t.Errorf("EventCount() after the purge = %d, %v; want 3", n, err)
	}
	for stream, want := range map[string]int{"intent-old1": 0, "intent-old2": 0, "intent-new": 1, "order-old": 1, "intentXold": 1} {
		evs, err := store.ReadStream(ctx, stream, 0, 10)
		if want == 0 && errors.Is(err, eventstore.ErrStreamNotFound) {
			continue // a wholly truncated stream reads as absent
		}
		if err != nil || len(evs) != want {
			t.Errorf("ReadStream(%s) = %d events, %v; want %d", stream, len(evs), err, want)
		}
	}
	// The purged stream keeps its last revision: a new intent must expect it.
	d, _ := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), domain.OrderConfirmed{}, eventstore.Metadata{})
	if _, err := store.Append(ctx, "intent-old1", eventstore.NoStream(), d); err == nil {
		t.Errorf("Append(intent-old1, NoStream) after the purge succeeded, want a conflict at revision 1")
	}
	if _, err := store.Append(ctx, "intent-old1", eventstore.Exact(1), d); err != nil {
		t.Errorf("Append(intent-old1, Exact(1)) after the purge = %v", err)
	}
}
