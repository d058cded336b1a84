package pgcoord

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/eventstore"
)

// TestStoredPositionsMove: StoredPositions lists the positions of the three
// tables written on one backend; MovePositions moves them in one
// transaction, stamped with its pool's backend, leaves a relay's lease as
// it is, and moves nothing when one row of the batch is missing or names no
// position table.
func TestStoredPositionsMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, kdb := backendPools(t)
	at := func(c uint64) eventstore.Position { return eventstore.Position{Commit: c, Prepare: c} }
	for name, c := range map[string]uint64{"process-manager": 10, "follow-ups": 20} {
		if err := NewCheckpoints(pg).Save(ctx, name, at(c)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pg.Exec(ctx, `INSERT INTO projection_checkpoints (name, commit_tx, prepare) VALUES ('orders', 30, 30)`); err != nil {
		t.Fatal(err)
	}
	l, err := NewLeases(pg).Acquire(ctx, "notify", "me", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SaveCheckpoint(ctx, at(40)); err != nil {
		t.Fatal(err)
	}
	if err := NewCheckpoints(kdb).Save(ctx, "on-kurrentdb", at(50)); err != nil {
		t.Fatal(err)
	}

	got, err := StoredPositions(ctx, pg, BackendPostgres)
	want := []StoredPosition{
		{TableCheckpoints, "follow-ups", at(20)}, {TableCheckpoints, "process-manager", at(10)},
		{TableProjectionCheckpoints, "orders", at(30)}, {TableRelays, "notify", at(40)},
	}
	if err != nil || !cmp.Equal(got, want) {
		t.Fatalf("StoredPositions(postgres) = %v, %v; diff -got +want:\n%s", got, err, cmp.Diff(got, want))
	}

	// A batch with a missing row, or a table that holds no positions,
	// moves nothing.
	for _, bad := range []StoredPosition{{TableCheckpoints, "missing", at(1)}, {"events", "x", at(1)}} {
		moves := append([]StoredPosition{{TableCheckpoints, "follow-ups", at(2)}}, bad)
		if err := MovePositions(ctx, kdb, moves); err == nil || !strings.Contains(err.Error(), bad.Name) {
			t.Errorf("MovePositions(%v) = %v, want an error naming %q", moves, err, bad.Name)
		}
	}
	if got, err := StoredPositions(ctx, pg, BackendPostgres); err != nil || !cmp.Equal(got, want) {
		t.Fatalf("StoredPositions(postgres) after failed moves = %v, %v; want them unchanged", got, err)
	}

	moved := make([]StoredPosition, len(want))
	for i, p := range want {
		moved[i] = StoredPosition{p.Table, p.Name, at(p.Position.Commit + 1)}
	}
	if err := MovePositions(ctx, kdb, moved); err != nil {
		t.Fatalf("MovePositions = %v", err)
	}
	if got, err := StoredPositions(ctx, pg, BackendPostgres); err != nil || len(got) != 0 {
		t.Errorf("StoredPositions(postgres) after the move = %v, %v; want none", got, err)
	}
	wantKDB := []StoredPosition{ // by table, then name
		moved[0], {TableCheckpoints, "on-kurrentdb", at(50)}, moved[1], moved[2], moved[3],
	}
	if got, err := StoredPositions(ctx, pg, BackendKurrentDB); err != nil || !cmp.Equal(got, wantKDB) {
		t.Errorf("StoredPositions(kurrentdb) = %v, %v; diff -got +want:\n%s", got, err, cmp.Diff(got, wantKDB))
	}
	if st, err := NewLeases(pg).State(ctx, "notify"); err != nil || st.Owner != "me" || st.Token != 1 || st.Checkpoint != at(41) {
		t.Errorf("relay lease after the move = %+v, %v; want me's token 1 at 41/41", st, err)
	}
}

// TestLeasesHeldUntil: no lease held, then the latest of two held leases'
// expiries, then none once both are released.
func TestLeasesHeldUntil(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newTestPool(t)
	ls := NewLeases(pool)
	if until, held, err := ls.HeldUntil(ctx); err != nil || held {
		t.Fatalf("HeldUntil with no lease = %s, %v, %v; want not held", until, held, err)
	}
	short, err := ls.Acquire(ctx, "a", "one", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	long, err := ls.Acquire(ctx, "b", "two", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stB, err := ls.State(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if until, held, err := ls.HeldUntil(ctx); err != nil || !held || !until.Equal(stB.LeaseUntil) || until.Location() != time.UTC {
		t.Errorf("HeldUntil = %s, %v, %v; want b's expiry %s in UTC", until, held, err, stB.LeaseUntil)
	}
	for _, l := range []*Lease{short, long} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if until, held, err := ls.HeldUntil(ctx); err != nil || held {
		t.Errorf("HeldUntil after Release = %s, %v, %v; want not held", until, held, err)
	}
}

// TestDeleteSnapshots: every named snapshot is gone.
func TestDeleteSnapshots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newTestPool(t)
	for _, name := range []string{"logindex", "other"} {
		if err := NewSnapshots(pool, name).Save(ctx, []byte(`{"version":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := DeleteSnapshots(ctx, pool); err != nil {
		t.Fatalf("DeleteSnapshots = %v", err)
	}
	for _, name := range []string{"logindex", "other"} {
		if b, err := NewSnapshots(pool, name).Load(ctx); err != nil || b != nil {
			t.Errorf("Load(%s) after DeleteSnapshots = %q, %v; want nil", name, b, err)
		}
	}
}
