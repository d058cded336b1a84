package pgcoord

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// backendPools opens two pools on one fresh database, closed when t ends:
// pg's sessions name the PostgreSQL backend and kdb's the KurrentDB one
// (SetBackend), so the positions each writes are stamped with its backend.
func backendPools(t *testing.T) (pg, kdb *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	open := func(backend string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		SetBackend(cfg, backend)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	return open(BackendPostgres), open(BackendKurrentDB)
}

// TestCheckBackend: positions written by a pool whose sessions name a
// backend (SetBackend) are stamped with it by the migration's trigger;
// CheckBackend accepts them on that backend, refuses them on the other
// with every row named and the way out for each table, and ignores rows at
// the start of the log.
func TestCheckBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, kdb := backendPools(t)
	pos := eventstore.Position{Commit: 100, Prepare: 100}
	if err := NewCheckpoints(kdb).Save(ctx, "process-manager", pos); err != nil {
		t.Fatal(err)
	}
	if err := NewCheckpoints(kdb).Save(ctx, "at-start", eventstore.Position{}); err != nil {
		t.Fatal(err)
	}
	l, err := NewLeases(kdb).Acquire(ctx, "notify", "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SaveCheckpoint(ctx, pos); err != nil {
		t.Fatal(err)
	}
	if _, err := kdb.Exec(ctx, `INSERT INTO projection_checkpoints (name, commit_tx, prepare) VALUES ('orders', 100, 100)`); err != nil {
		t.Fatal(err)
	}
	if err := CheckBackend(ctx, kdb, BackendKurrentDB); err != nil {
		t.Fatalf("CheckBackend(kurrentdb) on kurrentdb positions = %v, want nil", err)
	}
	err = CheckBackend(ctx, pg, BackendPostgres)
	var mm *BackendMismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("CheckBackend(postgres) on kurrentdb positions = %v, want a *BackendMismatchError", err)
	}
	if !slices.Equal(mm.Checkpoints, []string{"process-manager (kurrentdb)"}) || !slices.Equal(mm.Projections, []string{"orders (kurrentdb)"}) ||
		!slices.Equal(mm.Relays, []string{"notify (kurrentdb)"}) {
		t.Errorf("mismatch = %+v; want process-manager, orders and notify (not at-start, at the start of the log)", mm)
	}
	for _, want := range []string{"booking projections rebuild", "DELETE FROM checkpoints", "DELETE FROM notify_relays", "nats stream rm BOOKING", "$BOOKING_DATA_DIR/nats"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Moving a position on the other backend stamps it: the lease's row
	// is now PostgreSQL's.
	if _, err := pg.Exec(ctx, `UPDATE notify_relays SET commit_tx = 5, prepare = 5`); err != nil {
		t.Fatal(err)
	}
	if err := CheckBackend(ctx, pg, BackendPostgres); !errors.As(err, &mm) || len(mm.Relays) != 0 || len(mm.Checkpoints) != 1 {
		t.Errorf("after the relay moved on postgres: CheckBackend = %v; want only the checkpoint and the read model", err)
	}
}

// TestCheckHead: positions at or before the head of the log pass; every
// position beyond it (another log: a fresh server, a restored backup) is
// named, with the way out for each table.
func TestCheckHead(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	if err := NewCheckpoints(pool).Save(ctx, "process-manager", eventstore.Position{Commit: 1556, Prepare: 1556}); err != nil {
		t.Fatal(err)
	}
	if err := NewCheckpoints(pool).Save(ctx, "expiry", eventstore.Position{Commit: 900, Prepare: 900}); err != nil {
		t.Fatal(err)
	}
	l, err := NewLeases(pool).Acquire(ctx, "notify", "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SaveCheckpoint(ctx, eventstore.Position{Commit: 1492, Prepare: 1492}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO projection_checkpoints (name, commit_tx, prepare) VALUES ('orders', 1556, 1557)`); err != nil {
		t.Fatal(err)
	}
	if err := CheckHead(ctx, pool, eventstore.Position{Commit: 1556, Prepare: 1557}); err != nil {
		t.Fatalf("CheckHead at the last position = %v, want nil", err)
	}
	err = CheckHead(ctx, pool, eventstore.Position{Commit: 1000, Prepare: 1000})
	var ahead *PositionsAheadError
	if !errors.As(err, &ahead) {
		t.Fatalf("CheckHead(1000/1000) = %v, want a *PositionsAheadError", err)
	}
	if !slices.Equal(ahead.Checkpoints, []string{"process-manager (1556/1556)"}) || !slices.Equal(ahead.Projections, []string{"orders (1556/1557)"}) ||
		!slices.Equal(ahead.Relays, []string{"notify (1492/1492)"}) {
		t.Errorf("ahead = %+v; want process-manager, orders and notify (not expiry, before the head)", ahead)
	}
	for _, want := range []string{"booking projections rebuild", "DELETE FROM checkpoints", "DELETE FROM notify_relays", "nats stream rm BOOKING", "$BOOKING_DATA_DIR/nats"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// An empty log (a fresh server): every non-zero position is ahead.
	if err := CheckHead(ctx, pool, eventstore.Position{}); !errors.As(err, &ahead) || len(ahead.Checkpoints) != 2 {
		t.Errorf("CheckHead(empty log) = %v; want both checkpoints", err)
	}
}
