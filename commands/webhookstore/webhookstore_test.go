package webhookstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/commands/webhookstore"
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
