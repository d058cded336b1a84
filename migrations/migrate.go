package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// lockRetry and lockAttempts bound how long Up waits for another process's migration run:
// the session lock is tried every lockRetry seconds, lockAttempts times.
const (
	lockRetry    = 1   // seconds
	lockAttempts = 300 // 5 minutes in all
)

// Up applies every pending migration in FS to the database at databaseURL (a
// postgres:// URL or a keyword/value connection string), in version order,
// each in its own transaction. It holds a PostgreSQL session-level advisory
// lock while it runs, so concurrent calls from several processes are safe:
// one applies the migrations while the others wait (up to 5 minutes) and then
// find nothing pending. It returns nil when the schema is already current and
// a wrapped error if it cannot connect, cannot take the lock in time, or a
// migration fails (that migration is rolled back; earlier ones stay applied).
// It blocks until done or ctx is done, and is safe for concurrent use.
func Up(ctx context.Context, databaseURL string) (err error) {
	db, err := Open(databaseURL)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	return nil
}

// Open returns a database/sql handle on databaseURL that uses pgx's stdlib
// driver, for NewProvider. The caller closes it. Returns a wrapped error if
// databaseURL does not parse; it does not connect.
func Open(databaseURL string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("migrations: parse database URL: %w", err)
	}
	return stdlib.OpenDB(*cfg), nil
}

// NewProvider returns a goose provider for the migrations in FS on db, with
// the PostgreSQL session-lock (see Up) and goose's global registry of Go
// migrations disabled, for commands that need more than Up (status, down).
// db is not closed by the provider unless its Close is called.
func NewProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(lockRetry, lockAttempts))
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: new provider: %w", err)
	}
	return p, nil
}
