package main

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/cmd/booking/internal/storage"
	"github.com/retrysafe/booking/internal/sqlcount"
)

// configError names the variable at fault: "invalid configuration:
// VARIABLE: reason" (a *configerr.Error: exit status 2).
func configError(variable, format string, args ...any) error {
	return configerr.New(variable, format, args...)
}

// checkDatabaseURL refuses a DATABASE_URL that is not a PostgreSQL URL
// (config.CheckDatabaseURL).
func checkDatabaseURL(raw string) error { return config.CheckDatabaseURL(raw) }

// databaseError is a failure of DATABASE_URL's database
// (storage.DatabaseError).
func databaseError(err error) error { return storage.DatabaseError(err) }

// openMigrated migrates the database at url and opens its pool
// (storage.OpenMigrated).
func openMigrated(ctx context.Context, url string, minConns int32, backend string, counter *sqlcount.Counter) (*pgxpool.Pool, error) {
	return storage.OpenMigrated(ctx, url, minConns, backend, counter)
}

// eventLog is a command's event log (storage.EventLog), closed with close.
type eventLog struct{ *storage.EventLog }

func (l eventLog) close() { l.Close() }

// openEventLog opens the event log spec names over pool
// (storage.OpenEventLog).
func openEventLog(spec string, pool *pgxpool.Pool, log *slog.Logger) (eventLog, error) {
	l, err := storage.OpenEventLog(spec, pool, log)
	return eventLog{l}, err
}
