package pgstore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// keyRows returns the values stored under key in the test's key table, in
// insertion order.
func keyRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, key string) []string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT value FROM unit_keys WHERE key = $1 ORDER BY value`, key)
	if err != nil {
		t.Fatalf("reading unit_keys: %v", err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("reading unit_keys: %v", err)
	}
	return values
}

// streamLen returns how many live events stream holds (0 if none).
func streamLen(t *testing.T, ctx context.Context, s *Store, stream string) int {
	t.Helper()
	events, err := s.ReadStream(ctx, stream, 0, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("ReadStream(%s) = %v, want nil", stream, err)
	}
	return len(events)
}

// TestAppendMultiWith checks the unit of work of events and a table of the
// same database: both commit, or neither.
func TestAppendMultiWith(t *testing.T) {
	pool := newTestPool(t)
	s := New(pool, WithAppendTimeout(time.Minute))
	if _, err := pool.Exec(t.Context(), `CREATE TABLE unit_keys (key text PRIMARY KEY, value text NOT NULL)`); err != nil {
		t.Fatalf("creating unit_keys: %v", err)
	}
	// insertKey queues an insert of key whose RETURNING value lands in got.
	insertKey := func(key, value string, got *string) func(*pgx.Batch) {
		return func(b *pgx.Batch) {
			b.Queue(`INSERT INTO unit_keys (key, value) VALUES ($1, $2) RETURNING value`, key, value).
				QueryRow(func(row pgx.Row) error { return row.Scan(got) })
		}
	}
	parts := func(order string) []eventstore.StreamAppend {
		return []eventstore.StreamAppend{
			{Stream: "order-" + order, Expected: eventstore.NoStream(), Events: []eventstore.EventData{event("Placed"), event("Held")}},
			{Stream: "key-" + order, Expected: eventstore.NoStream(), Events: []eventstore.EventData{event("Claimed")}},
		}
	}

	t.Run("the events and the statements commit together", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		order, key := uuid.NewString(), "key-"+uuid.NewString()
		var got string
		res, err := s.AppendMultiWith(ctx, insertKey(key, order, &got), parts(order)...)
		if err != nil {
			t.Fatalf("AppendMultiWith = %v, want nil", err)
		}
		if len(res) != 2 || res[0].NextRevision != 1 || res[1].NextRevision != 0 || !res[0].Position.Less(res[1].Position) {
			t.Errorf("AppendMultiWith = %+v, want revisions 1 and 0 at increasing positions", res)
		}
		if got != order {
			t.Errorf("the queued statement's callback got %q, want %q", got, order)
		}
		if rows := keyRows(t, ctx, pool, key); len(rows) != 1 || rows[0] != order {
			t.Errorf("unit_keys[%s] = %v, want [%s]", key, rows, order)
		}
		if n, m := streamLen(t, ctx, s, "order-"+order), streamLen(t, ctx, s, "key-"+order); n != 2 || m != 1 {
			t.Errorf("streams hold %d and %d events, want 2 and 1", n, m)
		}
	})

	t.Run("a failing statement writes no event of the call", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		order, key := uuid.NewString(), "key-"+uuid.NewString()
		if _, err := pool.Exec(ctx, `INSERT INTO unit_keys (key, value) VALUES ($1, 'taken')`, key); err != nil {
			t.Fatalf("inserting %s: %v", key, err)
		}
		var got string
		_, err := s.AppendMultiWith(ctx, insertKey(key, order, &got), parts(order)...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" || errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			t.Fatalf("AppendMultiWith with a taken key = %v, want the unique violation (23505), not a revision conflict", err)
		}
		if n, m := streamLen(t, ctx, s, "order-"+order), streamLen(t, ctx, s, "key-"+order); n != 0 || m != 0 {
			t.Errorf("streams hold %d and %d events after the failed unit, want none", n, m)
		}
		// The same events go through once the statement can succeed.
		other := "key-" + uuid.NewString()
		if _, err := s.AppendMultiWith(ctx, insertKey(other, order, &got), parts(order)...); err != nil {
			t.Fatalf("AppendMultiWith with a free key = %v, want nil", err)
		}
		if n := streamLen(t, ctx, s, "order-"+order); n != 2 {
			t.Errorf("stream order-%s holds %d events, want 2", order, n)
		}
	})

	t.Run("a callback's error rolls nothing back", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		order, key := uuid.NewString(), "key-"+uuid.NewString()
		refuse := errors.New("refused by the callback")
		queue := func(b *pgx.Batch) {
			b.Queue(`INSERT INTO unit_keys (key, value) VALUES ($1, $2)`, key, order).
				Exec(func(pgconn.CommandTag) error { return refuse })
		}
		if _, err := s.AppendMultiWith(ctx, queue, parts(order)...); !errors.Is(err, refuse) {
			t.Fatalf("AppendMultiWith = %v, want the callback's error", err)
		}
		if rows := keyRows(t, ctx, pool, key); len(rows) != 1 {
			t.Errorf("unit_keys[%s] = %v, want the row committed", key, rows)
		}
		if n := streamLen(t, ctx, s, "order-"+order); n != 2 {
			t.Errorf("stream order-%s holds %d events, want 2 committed", order, n)
		}
	})

	t.Run("a conflicting part commits no statement of the call", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		order, key := uuid.NewString(), "key-"+uuid.NewString()
		call := parts(order)
		if _, err := s.Append(ctx, call[1].Stream, eventstore.NoStream(), event("Earlier")); err != nil {
			t.Fatalf("Append(%s) = %v, want nil", call[1].Stream, err)
		}
		var got string
		_, err := s.AppendMultiWith(ctx, insertKey(key, order, &got), call...)
		var pe *eventstore.AppendPartError
		if !errors.As(err, &pe) || pe.Part != 1 || !errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			t.Fatalf("AppendMultiWith = %v, want an *AppendPartError for part 1 wrapping a revision conflict", err)
		}
		if rows := keyRows(t, ctx, pool, key); len(rows) != 0 {
			t.Errorf("unit_keys[%s] = %v after a conflict, want none", key, rows)
		}
		if n := streamLen(t, ctx, s, call[0].Stream); n != 0 {
			t.Errorf("stream %s holds %d events after a conflict, want none", call[0].Stream, n)
		}
	})
}

// TestAppendFunctionsPlanOncePerSession: both append functions and
// eventstore_wrote run with sequential scans off and generic plans forced
// (migration 00016), so their statements are planned once per session on
// index paths. Without the second setting PostgreSQL planned
// eventstore_append_multi's statements on every call; a CREATE OR REPLACE
// that forgets either clause fails here.
func TestAppendFunctionsPlanOncePerSession(t *testing.T) {
	ctx := context.Background()
	pool := newTestPool(t)
	for _, fn := range []string{"eventstore_append", "eventstore_append_multi", "eventstore_wrote"} {
		var config []string
		if err := pool.QueryRow(ctx, `SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = $1`, fn).Scan(&config); err != nil {
			t.Fatalf("reading %s's settings: %v", fn, err)
		}
		for _, want := range []string{"enable_seqscan=off", "plan_cache_mode=force_generic_plan"} {
			if !slices.Contains(config, want) {
				t.Errorf("%s runs with %q, want it to include %q", fn, config, want)
			}
		}
	}
}
