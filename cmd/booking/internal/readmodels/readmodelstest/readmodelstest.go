// Package readmodelstest helps the booking command's tests feed a
// PostgreSQL log and run the read models' live projectors on it as
// `booking serve` does. Only tests import it.
package readmodelstest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/readmodels"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/projections"
)

// Append encodes events, each under a fresh UUIDv7 id with metadata that
// says it occurred now, and appends them to stream of store in one append
// at any revision, failing tb on an error.
func Append(tb testing.TB, ctx context.Context, store eventstore.Store, stream string, events ...eventstore.Typed) {
	tb.Helper()
	data := make([]eventstore.EventData, len(events))
	for i, e := range events {
		d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), e, eventstore.Metadata{OccurredAt: time.Now().UTC()})
		if err != nil {
			tb.Fatal(err)
		}
		data[i] = d
	}
	if _, err := store.Append(ctx, stream, eventstore.Any(), data...); err != nil {
		tb.Fatal(err)
	}
}

// RunLive runs the live projector of every read model
// (projections.All with a 24 h intent retention) on pool, reading store,
// each only while it holds its lock (readmodels.LockName, tried again
// every 50 ms) as `booking serve` does, until ctx ends. The returned
// function waits for them to stop.
func RunLive(ctx context.Context, pool *pgxpool.Pool, store projections.Log, log *slog.Logger) (wait func()) {
	var wg sync.WaitGroup
	locks := pgcoord.NewLocks(pool)
	for _, p := range projections.All(24 * time.Hour) {
		pr := readmodels.NewProjector(pool, locks, p)
		wg.Go(func() {
			locks.RunExclusive(ctx, log, readmodels.LockName(p.Name()), 50*time.Millisecond, func(ctx context.Context) error { return pr.Run(ctx, store) })
		})
	}
	return wg.Wait
}
