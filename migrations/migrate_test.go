package migrations_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/retrysafe/booking/migrations"
	"github.com/retrysafe/booking/migrations/pgtest"
)

func TestUpConcurrentlyAppliesEachMigrationOnce(t *testing.T) {
	dbURL := pgtest.NewEmptyDatabase(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	const runners = 4
	errs := make([]error, runners)
	var wg sync.WaitGroup
	for i := range runners {
		wg.Go(func() { errs[i] = migrations.Up(ctx, dbURL) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Up() #%d = %v, want nil", i, err)
		}
	}
	if err := migrations.Up(ctx, dbURL); err != nil {
		t.Errorf("Up() on a current schema = %v, want nil", err)
	}

	db, p := openProvider(t, dbURL)
	current, target, err := p.GetVersions(ctx)
	if err != nil || current != target || current < 1 {
		t.Errorf("GetVersions() = %d, %d, %v, want equal versions >= 1", current, target, err)
	}
	var applied int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatalf("count applied migrations: %v", err)
	}
	if want := len(p.ListSources()); applied != want {
		t.Errorf("goose_db_version has %d applied migrations, want %d (each once)", applied, want)
	}
}

func TestDownThenUpRestoresTheSchema(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, p := openProvider(t, dbURL)
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("DownTo(0) = %v, want nil", err)
	}
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version'`).Scan(&tables); err != nil {
		t.Fatalf("count tables: %v", err)
	}
	if tables != 0 {
		t.Errorf("after DownTo(0), %d tables remain, want 0", tables)
	}
	if err := migrations.Up(ctx, dbURL); err != nil {
		t.Fatalf("Up() after DownTo(0) = %v, want nil", err)
	}
}

// openProvider opens the database at dbURL, closed when t ends, and returns
// it with a migration provider on it.
func openProvider(t *testing.T, dbURL string) (*sql.DB, *goose.Provider) {
	t.Helper()
	db, err := migrations.Open(dbURL)
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	t.Cleanup(func() { db.Close() })
	p, err := migrations.NewProvider(db)
	if err != nil {
		t.Fatalf("NewProvider() = %v", err)
	}
	return db, p
}

// TestAppendWithoutStreamRowsDown checks migration 00008 both ways on a log
// with events: from 00008 on an append writes no streams row and a
// truncation writes one; its Down writes the rows the old functions need, so
// the old eventstore_append still sees each stream's last revision.
func TestAppendWithoutStreamRowsDown(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, p := openProvider(t, dbURL)
	// appendTo appends n events to stream at kind (0 any, 1 no stream) and
	// returns the function's status and revision.
	appendTo := func(stream string, kind, n int) (status, revision int64) {
		t.Helper()
		err := db.QueryRowContext(ctx, `
			SELECT o_status, o_revision FROM eventstore_append($1, $2::smallint, 0,
				array(SELECT gen_random_uuid() FROM generate_series(1, $3)),
				array(SELECT 'T'::text FROM generate_series(1, $3)),
				array(SELECT '\x7b7d'::bytea FROM generate_series(1, $3)),
				array(SELECT NULL::bytea FROM generate_series(1, $3)), 1000)`, stream, kind, n).Scan(&status, &revision)
		if err != nil {
			t.Fatalf("eventstore_append(%s, kind %d, %d events) = %v", stream, kind, n, err)
		}
		return status, revision
	}
	streamRows := func() map[string][2]int64 {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT name, last_revision, truncate_before FROM streams`)
		if err != nil {
			t.Fatalf("read streams: %v", err)
		}
		defer rows.Close()
		got := map[string][2]int64{}
		for rows.Next() {
			var (
				name     string
				last, tb int64
			)
			if err := rows.Scan(&name, &last, &tb); err != nil {
				t.Fatalf("read streams: %v", err)
			}
			got[name] = [2]int64{last, tb}
		}
		return got
	}

	if s, r := appendTo("a", 1, 2); s != 0 || r != 1 {
		t.Fatalf("append to a = status %d, revision %d, want 0, 1", s, r)
	}
	if s, r := appendTo("b", 1, 3); s != 0 || r != 2 {
		t.Fatalf("append to b = status %d, revision %d, want 0, 2", s, r)
	}
	if got := streamRows(); len(got) != 0 {
		t.Fatalf("streams after two appends = %v, want no rows (an append writes only its events)", got)
	}
	if _, err := db.ExecContext(ctx, `SELECT eventstore_truncate('b', 10)`); err != nil {
		t.Fatalf("eventstore_truncate(b, 10) = %v", err)
	}
	if got, want := streamRows(), map[string][2]int64{"b": {2, 3}}; len(got) != 1 || got["b"] != want["b"] {
		t.Fatalf("streams after truncating b = %v, want %v", got, want)
	}
	if s, r := appendTo("b", 1, 1); s != 2 || r != 2 {
		t.Fatalf("append to truncated b at no stream = status %d, revision %d, want a conflict at 2", s, r)
	}

	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatalf("DownTo(7) = %v", err)
	}
	if got, want := streamRows(), map[string][2]int64{"a": {1, 0}, "b": {2, 3}}; len(got) != 2 || got["a"] != want["a"] || got["b"] != want["b"] {
		t.Fatalf("streams after DownTo(7) = %v, want %v", got, want)
	}
	if s, r := appendTo("a", 1, 1); s != 2 || r != 1 {
		t.Errorf("old append to a at no stream = status %d, revision %d, want a conflict at 1", s, r)
	}
	if s, r := appendTo("a", 0, 1); s != 0 || r != 2 {
		t.Errorf("old append to a at any = status %d, revision %d, want 0, 2", s, r)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("Up() after DownTo(7) = %v", err)
	}
	if s, r := appendTo("a", 0, 1); s != 0 || r != 3 {
		t.Errorf("append to a at any after Up = status %d, revision %d, want 0, 3", s, r)
	}
}
