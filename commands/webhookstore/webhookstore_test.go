package webhookstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/commands/webhookstore"
	"github.com/retrysafe/booking/internal/sqlcount"
	"github.com/retrysafe/booking/migrations/pgtest"
)

var _ commands.ProcessedEvents = (*webhookstore.Store)(nil)

// TestProcessedEvents: an event id is unknown until marked, marked once
// (a repeat keeps the first time), and forgotten by a prune past its time,
// in batches, while younger ones stay.
func TestProcessedEvents(t *testing.T) {
	t.Parallel()
	s := webhookstore.New(pgtest.NewPool(t, pgtest.NewDatabase(t)))
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if seen, err := s.Processed(ctx, "evt_1"); err != nil || seen {
		t.Fatalf("Processed(evt_1) before any mark = %v, %v; want false", seen, err)
	}
	for _, at := range []time.Time{t0, t0.Add(time.Hour)} { // the repeat keeps t0
		if err := s.MarkProcessed(ctx, "evt_1", at); err != nil {
			t.Fatal(err)
		}
	}
	if seen, err := s.Processed(ctx, "evt_1"); err != nil || !seen {
		t.Fatalf("Processed(evt_1) after the mark = %v, %v; want true", seen, err)
	}
	for i := range 25 {
		if err := s.MarkProcessed(ctx, fmt.Sprintf("evt_old_%d", i), t0.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkProcessed(ctx, "evt_young", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneProcessed(ctx, t0.Add(30*time.Minute))
	if err != nil || n != 26 {
		t.Fatalf("PruneProcessed(t0+30m) = %d, %v; want 26 (the old ones and evt_1, marked at t0)", n, err)
	}
	for id, want := range map[string]bool{"evt_1": false, "evt_old_3": false, "evt_young": true} {
		if seen, err := s.Processed(ctx, id); err != nil || seen != want {
			t.Errorf("Processed(%s) after the prune = %v, %v; want %v", id, seen, err, want)
		}
	}
}

// TestMarksWrittenInBatches: a mark is seen at once by the process that
// made it, and reaches the table without a Flush (the timer writes it);
// many marks are written a batch per statement, not one each, and every
// one of them is in the table after Flush.
func TestMarksWrittenInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	var counter sqlcount.Counter
	pool, err := counter.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := webhookstore.New(pool)
	other := webhookstore.New(pgtest.NewPool(t, url)) // another replica: sees the table only
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	if err := s.MarkProcessed(ctx, "evt_single", t0); err != nil {
		t.Fatal(err)
	}
	if seen, err := s.Processed(ctx, "evt_single"); err != nil || !seen {
		t.Fatalf("Processed(evt_single) right after its mark = %v, %v; want true", seen, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		seen, err := other.Processed(ctx, "evt_single")
		if err != nil {
			t.Fatal(err)
		}
		if seen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("evt_single not in the table 30 s after its mark, with no Flush")
		}
		time.Sleep(20 * time.Millisecond) // polling for a state, with a deadline
	}

	const n = 1000
	counter.Reset()
	for i := range n {
		if err := s.MarkProcessed(ctx, fmt.Sprintf("evt_%d", i), t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Full batches of 256 are written at once (3 of them), the rest by
	// Flush or a timer that fired meanwhile: a few statements, not n.
	if got := counter.Total(); got < 4 || got > 10 {
		t.Errorf("%d marks written in %d statements, want 4 to 10:\n%s", n, got, counter.Report(1))
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM provider_events WHERE event_id LIKE 'evt\_%' AND processed_at = $1`, t0).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n+1 {
		t.Errorf("%d rows in provider_events after Flush, want %d", rows, n+1)
	}
}
