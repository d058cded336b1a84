package projections

import (
	"context"
	"testing"
	"time"
)

// TestReaderPages pages through shows and an actor's orders: every row
// once, in order, capacity = available + held + ordered, and the position is
// the projection's checkpoint.
func TestReaderPages(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx := context.Background()
	a := &appender{tb: t, store: db.fast, clock: &clock{}}
	workload{shows: 5, perShow: 30, workers: 5, seed: 8}.run(ctx, a)
	waitHorizon(t, ctx, db)
	if _, err := Rebuild(ctx, db.pool, db.store, All(24*time.Hour), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	r := NewReader(db.pool)
	m := mustModel(t, ctx, db)

	var (
		after *ShowKey
		seen  = map[string]bool{}
		prev  *Show
	)
	for page := 0; ; page++ {
		p, err := r.Shows(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		cp, _ := r.Checkpoint(ctx, NameShows)
		if p.Position != cp || p.Position.IsZero() {
			t.Errorf("Shows position = %s, want the checkpoint %s", p.Position, cp)
		}
		for _, s := range p.Items {
			if seen[s.ID] {
				t.Errorf("show %s listed twice", s.ID)
			}
			seen[s.ID] = true
			if s.Available+s.Held+s.Ordered != s.Capacity || s.Available != m.shows[s.ID].Available() {
				t.Errorf("show %s: available %d + held %d + ordered %d, capacity %d (store: available %d)", s.ID, s.Available, s.Held, s.Ordered,
					s.Capacity, m.shows[s.ID].Available())
			}
			if prev != nil && (s.StartsAt.Before(prev.StartsAt) || (s.StartsAt.Equal(prev.StartsAt) && s.ID <= prev.ID)) {
				t.Errorf("show %s listed after %s", s.ID, prev.ID)
			}
			prev = &s
		}
		if p.Next == nil {
			break
		}
		if len(p.Items) != 2 {
			t.Errorf("page %d has %d shows and a next key", page, len(p.Items))
		}
		after = p.Next
	}
	if len(seen) != len(m.shows) {
		t.Errorf("listed %d shows, the store has %d", len(seen), len(m.shows))
	}

	want := 0
	for _, o := range m.orders {
		if o.Actor == "actor-3" {
			want++
		}
	}
	var (
		okey *OrderKey
		got  = map[string]bool{}
	)
	for {
		p, err := r.Orders(ctx, "actor-3", okey, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Items {
			if got[o.ID] || o.Actor != "actor-3" || m.orders[o.ID].Status != o.Status {
				t.Errorf("order %s: listed twice, another actor's, or status %s (store %s)", o.ID, o.Status, m.orders[o.ID].Status)
			}
			got[o.ID] = true
		}
		if p.Next == nil {
			break
		}
		okey = p.Next
	}
	if len(got) != want || want == 0 {
		t.Errorf("listed %d orders of actor-3, the store has %d", len(got), want)
	}
	if _, _, err := r.PendingIntents(ctx, 10); err != nil {
		t.Errorf("PendingIntents: %v", err)
	}
	unknown, _, err := r.UnknownOutcomes(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	wantUnknown := 0
	for _, o := range m.orders {
		if last := o.LastAttempt(); last != nil && last.Outcome == "unknown" {
			wantUnknown++
		}
	}
	if len(unknown) != wantUnknown || wantUnknown == 0 {
		t.Errorf("UnknownOutcomes = %d orders, the store has %d", len(unknown), wantUnknown)
	}
}
