package main

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/internal/sqlcount"
	"github.com/retrysafe/booking/migrations"
)

// openMigrated applies the migrations to the database at url and opens a
// pool of at least minConns connections (more if url's pool_max_conns asks
// for more) whose sessions stamp backend (the event store's, see
// poolConfig) on the log positions they write. The caller closes the pool.
// Errors name DATABASE_URL: a bad URL is a configuration error, a failed
// migration or connection is wrapped.
//
// counter, when not nil, counts every statement of the pool (the
// faultinject build's BOOKING_TEST_COUNT_SQL, faults.SQLCounter).
func openMigrated(ctx context.Context, url string, minConns int32, backend string, counter *sqlcount.Counter) (*pgxpool.Pool, error) {
	if err := migrations.Up(ctx, url); err != nil {
		return nil, databaseError(err)
	}
	poolCfg, err := poolConfig(url, minConns, backend)
	if err != nil {
		return nil, err
	}
	if counter != nil {
		counter.Install(poolCfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, databaseError(err)
	}
	return pool, nil
}

// dbError is a failure to use the database DATABASE_URL names (it cannot
// be reached, a migration failed): a failure while running (exit 1), not a
// configuration error.
type dbError struct{ err error }

// databaseError returns err as the failure of DATABASE_URL's database:
// its message is "DATABASE_URL: " and err's, each line once (pgx lists a
// dial error once per connection attempt, and with sslmode=prefer it tries
// the same address twice). It unwraps to err.
func databaseError(err error) error { return &dbError{err: err} }

func (e *dbError) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	seen := make(map[string]bool, len(lines))
	out := lines[:0]
	for _, l := range lines {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return "DATABASE_URL: " + strings.Join(out, "\n")
}

func (e *dbError) Unwrap() error { return e.err }
