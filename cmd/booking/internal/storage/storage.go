// Package storage opens what the booking command's services store in:
// the service's PostgreSQL, migrated (OpenMigrated), and the event log
// over it or over KurrentDB (OpenEventLog), with the queries the
// background jobs need beyond eventstore.Store. Bad settings are
// configuration errors naming DATABASE_URL or BOOKING_EVENT_STORE; a
// database that fails is a DatabaseError.
package storage

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/logindex"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/internal/sqlcount"
	"github.com/retrysafe/booking/migrations"
)

// EventLog is the event store a command runs on (BOOKING_EVENT_STORE) with
// the queries the background jobs need beyond eventstore.Store: the
// pending orders from a logindex.Index that reads the log (on either
// backend); the rest from pgstore's SQL over its tables on PostgreSQL, from
// the index on KurrentDB. PostgreSQL keeps read models, checkpoints, leases
// and the clock on either backend.
type EventLog struct {
	eventstore.Store
	// Backend is pgcoord.BackendPostgres or BackendKurrentDB.
	Backend string
	// Pending lists the orders still open, for the payment reconciler.
	Pending commands.PendingOrders
	// Follow keeps Pending's log index up to date from a subscription
	// (logindex.Index.Follow) until ctx ends, so each reconciler pass
	// reads from the store only what the subscription has not delivered.
	Follow func(ctx context.Context, sub logindex.Subscriber) error
	// Purger truncates the intent streams past retention.
	Purger StreamPurger
	// Counter counts the events of the log (a progress bar's total).
	Counter interface {
		EventCount(ctx context.Context) (int64, error)
	}
	// Lag is the horizon lag of the metrics; nil on KurrentDB, whose
	// single writer never holds the horizon back.
	Lag metrics.HorizonLagger
	// Distance counts the events after a position, for the lag gauges
	// (pgstore's query on PostgreSQL, a paged read of $all on KurrentDB).
	Distance metrics.LogDistance
	// Ping checks the event store for /readyz (nil on PostgreSQL: the pool
	// is pinged anyway).
	Ping func(ctx context.Context) error
	// Head returns the position of the last event of the log, for the
	// start check of the stored positions (pgcoord.CheckHead) and the lag
	// gauges; nil on PostgreSQL, whose purge can move its head back.
	Head  func(ctx context.Context) (eventstore.Position, error)
	close func()
}

// Close closes the store (on KurrentDB after saving the log index's
// snapshot, best effort).
func (l *EventLog) Close() { l.close() }

// StreamPurger is the part of the event store the intent purge needs
// (pgstore.Store.PurgeStreams on PostgreSQL, logindex.Index.PurgeStreams on
// KurrentDB): truncate up to limit streams of a prefix whose first live
// event is older than olderThan by the database clock.
type StreamPurger interface {
	PurgeStreams(ctx context.Context, prefix string, olderThan time.Duration, limit int) (int, error)
}

// OpenEventLog opens the event store spec names over pool (the service's
// PostgreSQL, which holds the clock on either backend), with opts on
// PostgreSQL. The KurrentDB store
// does not connect yet: its first call does, and a server that is not up
// yet is retried by every later call (kurrentdb.New). The caller calls
// Close.
func OpenEventLog(spec string, pool *pgxpool.Pool, log *slog.Logger, opts ...pgstore.Option) (*EventLog, error) {
	backend, err := config.EventStoreBackend(spec)
	if err != nil {
		return nil, err
	}
	if backend == pgcoord.BackendPostgres {
		s := pgstore.New(pool, opts...)
		// Only the pending orders come from a log index here: a query of
		// the events table would read every order event of the log at each
		// reconciler pass. The intents' purge stays pgstore's SQL, which
		// reads only the intents within retention.
		ix := logindex.New(s, pgcoord.NewClock(pool), commands.OrderRule(), "",
			logindex.WithSnapshots(pgcoord.NewSnapshots(pool, "logindex-postgres"), 0))
		return &EventLog{Store: s, Backend: backend, Pending: pendingOrders(ix.Pending), Follow: ix.Follow, Purger: s, Counter: s, Lag: s, Distance: s,
			close: func() { saveSnapshot(ix) }}, nil
	}
	s, err := kurrentdb.New(spec, kurrentdb.WithLogger(log.With("component", "kurrentdb")))
	if err != nil {
		return nil, configerr.New("BOOKING_EVENT_STORE", "%v", err)
	}
	ix := logindex.New(s, pgcoord.NewClock(pool), commands.OrderRule(), domain.CategoryIntent,
		logindex.WithSnapshots(pgcoord.NewSnapshots(pool, "logindex"), 0))
	return &EventLog{Store: s, Backend: backend, Pending: pendingOrders(ix.Pending), Follow: ix.Follow, Purger: ix, Counter: ix, Distance: readDistance{s}, Ping: s.Ping,
		Head: s.Head, close: func() {
			saveSnapshot(ix)
			s.Close()
		}}, nil
}

// saveSnapshot saves ix's summary, so the next start reads only the log
// after it; best effort, within 5 seconds: a start without it reads more
// of the log.
func saveSnapshot(ix *logindex.Index) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = ix.Save(ctx)
}

// pendingOrders is commands.PendingOrders as a function: a log index's
// Pending, built with the domain's order rule.
type pendingOrders func(ctx context.Context, after string, limit int) ([]string, error)

// PendingOrders returns the page of order ids after after (see
// commands.PendingOrders).
func (f pendingOrders) PendingOrders(ctx context.Context, after string, limit int) ([]string, error) {
	return f(ctx, after, limit)
}

// poolConfig parses a DATABASE_URL into a pool configuration of at least
// minConns connections whose sessions stamp backend on the log positions
// they write (pgcoord.SetBackend). Errors name DATABASE_URL.
func poolConfig(url string, minConns int32, backend string) (*pgxpool.Config, error) {
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, configerr.New("DATABASE_URL", "%v", err)
	}
	poolCfg.MaxConns = max(poolCfg.MaxConns, minConns)
	pgcoord.SetBackend(poolCfg, backend)
	return poolCfg, nil
}

// readDistance counts the events after a position by reading the log
// through eventstore.Store.ReadAll, a page at a time, stopping at limit
// (metrics.LogDistance for a backend without a counting query).
type readDistance struct{ store eventstore.Store }

// EventsAfter returns how many events the log holds after after, at most
// limit; errors are the store's.
func (d readDistance) EventsAfter(ctx context.Context, after eventstore.Position, limit int64) (int64, error) {
	const page = 1000
	var n int64
	for n < limit {
		batch, err := d.store.ReadAll(ctx, after, page)
		if err != nil {
			return n, err
		}
		n += int64(len(batch))
		if len(batch) == 0 {
			break
		}
		after = batch[len(batch)-1].Position
	}
	return min(n, limit), nil
}

// OpenMigrated applies the migrations to the database at url and opens a
// pool of at least minConns connections (more if url's pool_max_conns asks
// for more) whose sessions stamp backend (the event store's, see
// poolConfig) on the log positions they write. The caller closes the pool.
// Errors name DATABASE_URL: a bad URL is a configuration error, a failed
// migration or connection is wrapped.
//
// counter, when not nil, counts every statement of the pool (the
// faultinject build's BOOKING_TEST_COUNT_SQL, faults.SQLCounter).
func OpenMigrated(ctx context.Context, url string, minConns int32, backend string, counter *sqlcount.Counter) (*pgxpool.Pool, error) {
	if err := migrations.Up(ctx, url); err != nil {
		return nil, DatabaseError(err)
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
		return nil, DatabaseError(err)
	}
	return pool, nil
}

// dbError is a failure to use the database DATABASE_URL names (it cannot
// be reached, a migration failed): a failure while running (exit 1), not a
// configuration error.
type dbError struct{ err error }

// DatabaseError returns err as the failure of DATABASE_URL's database:
// its message is "DATABASE_URL: " and err's, each line once (pgx lists a
// dial error once per connection attempt, and with sslmode=prefer it tries
// the same address twice). It unwraps to err.
func DatabaseError(err error) error { return &dbError{err: err} }

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
