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
