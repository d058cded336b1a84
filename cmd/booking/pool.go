package main

import (
	"context"
	"fmt"

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
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
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
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return pool, nil
}
