package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/logindex"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/eventstore/pgstore"
)

// eventStoreBackend returns the backend name (pgcoord.BackendPostgres or
// BackendKurrentDB) of a BOOKING_EVENT_STORE value, or a configuration
// error naming the variable.
func eventStoreBackend(spec string) (string, error) {
	switch {
	case spec == "" || spec == "postgres":
		return pgcoord.BackendPostgres, nil
	case kurrentdb.IsConnectionString(spec):
		return pgcoord.BackendKurrentDB, nil
	}
	return "", configError("BOOKING_EVENT_STORE", "must be postgres or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string")
}

// checkEventStore validates a BOOKING_EVENT_STORE value, connection string
// included (without connecting); the error names the variable and never
// the password.
func checkEventStore(spec string) error {
	backend, err := eventStoreBackend(spec)
	if err != nil || backend != pgcoord.BackendKurrentDB {
		return err
	}
	s, err := kurrentdb.New(spec)
	if err != nil {
		return configError("BOOKING_EVENT_STORE", "%v", err)
	}
	return s.Close()
}

// eventLog is the event store a command runs on (BOOKING_EVENT_STORE) with
// the queries the background jobs need beyond eventstore.Store: on
// PostgreSQL pgstore's SQL over its tables, on KurrentDB a logindex.Index
// that reads the log. PostgreSQL keeps read models, checkpoints, leases
// and the clock on either backend.
type eventLog struct {
	eventstore.Store
	// backend is pgcoord.BackendPostgres or BackendKurrentDB.
	backend string
	pending commands.PendingOrders
	purger  streamPurger
	counter interface {
		EventCount(ctx context.Context) (int64, error)
	}
	// lag is the horizon lag of the metrics; nil on KurrentDB, whose
	// single writer never holds the horizon back.
	lag metrics.HorizonLagger
	// distance counts the events after a position, for the lag gauges
	// (pgstore's query on PostgreSQL, a paged read of $all on KurrentDB).
	distance metrics.LogDistance
	// ping checks the event store for /readyz (nil on PostgreSQL: the pool
	// is pinged anyway).
	ping func(ctx context.Context) error
	// head returns the position of the last event of the log, for the
	// start check of the stored positions (pgcoord.CheckHead) and the lag
	// gauges; nil on PostgreSQL, whose purge can move its head back.
	head  func(ctx context.Context) (eventstore.Position, error)
	close func()
}

// openEventLog opens the event store spec names over pool (the service's
// PostgreSQL, which holds the clock on either backend), with opts on
// PostgreSQL. The KurrentDB store
// does not connect yet: its first call does, and a server that is not up
// yet is retried by every later call (kurrentdb.New). The caller calls
// close.
func openEventLog(spec string, pool *pgxpool.Pool, log *slog.Logger, opts ...pgstore.Option) (*eventLog, error) {
	backend, err := eventStoreBackend(spec)
	if err != nil {
		return nil, err
	}
	if backend == pgcoord.BackendPostgres {
		s := pgstore.New(pool, opts...)
		pending := pendingOrders(func(ctx context.Context, after string, limit int) ([]string, error) {
			return s.PendingStreams(ctx, commands.OrderRule(), after, limit)
		})
		return &eventLog{Store: s, backend: backend, pending: pending, purger: s, counter: s, lag: s, distance: s, close: func() {}}, nil
	}
	s, err := kurrentdb.New(spec, kurrentdb.WithLogger(log.With("component", "kurrentdb")))
	if err != nil {
		return nil, configError("BOOKING_EVENT_STORE", "%v", err)
	}
	ix := logindex.New(s, pgcoord.NewClock(pool), commands.OrderRule(), domain.CategoryIntent,
		logindex.WithSnapshots(pgcoord.NewSnapshots(pool, "logindex"), 0))
	return &eventLog{Store: s, backend: backend, pending: pendingOrders(ix.Pending), purger: ix, counter: ix, distance: readDistance{s}, ping: s.Ping,
		head: s.Head, close: func() {
			// The next start reads only the log after this snapshot.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ix.Save(ctx) // best effort: a start without it reads more of the log
			s.Close()
		}}, nil
}

// pendingOrders is commands.PendingOrders as a function: the store's query
// of the pending streams bound to the domain's order rule.
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
		return nil, configError("DATABASE_URL", "%v", err)
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
