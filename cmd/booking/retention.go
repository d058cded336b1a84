package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/retrysafe/booking/domain"
)

// streamPurger is the part of the event store the intent purge needs
// (pgstore.Store.PurgeStreams on PostgreSQL, logindex.Index.PurgeStreams on
// KurrentDB): truncate up to limit streams of a prefix whose first live
// event is older than olderThan by the database clock.
type streamPurger interface {
	PurgeStreams(ctx context.Context, prefix string, olderThan time.Duration, limit int) (int, error)
}

// purgeBatch is how many intent streams one purge statement truncates.
const purgeBatch = 1000

// runPurge truncates every interval the intent streams whose first live
// event is older than retention by the database clock (the intent
// retention, BOOKING_INTENT_RETENTION): the whole stream goes, its last revision stays, so a later
// request with the same key appends a new intent at that revision. Requests
// treat an expired intent as absent even before this job runs, so its
// timing only bounds storage. It returns ctx.Err() when ctx is done.
func runPurge(ctx context.Context, store streamPurger, retention, interval time.Duration, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for {
			n, err := store.PurgeStreams(ctx, domain.CategoryIntent, retention, purgeBatch)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				log.Warn("intent purge failed; retrying", "err", err)
				break
			}
			if n > 0 {
				log.Info("purged expired intents", "count", n)
			}
			if n < purgeBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
