package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// truncater is the part of the event store the purge job needs.
type truncater interface {
	Truncate(ctx context.Context, stream string, before eventstore.Revision) error
}

// purgeExpiredIntents truncates every intent stream whose first live event
// is older than retention by the database clock (DESIGN §6 Retention): the
// whole stream goes, its last revision stays, so a later request with the
// same key appends a new intent at that revision. Requests treat an expired
// intent as absent even before this job runs, so its timing only bounds
// storage. Returns the number of streams purged.
func purgeExpiredIntents(ctx context.Context, pool *pgxpool.Pool, store truncater, retention time.Duration, limit int) (int, error) {
	rows, err := pool.Query(ctx, `
		SELECT s.name, s.last_revision
		FROM streams s
		JOIN events e ON e.stream = s.name AND e.revision = s.truncate_before
		WHERE s.name LIKE 'intent-%'
		  AND e.recorded_at < now() - make_interval(secs => $1)
		LIMIT $2`, retention.Seconds(), limit)
	if err != nil {
		return 0, err
	}
	type victim struct {
		name string
		last int64
	}
	var vs []victim
	for rows.Next() {
		var v victim
		if err := rows.Scan(&v.name, &v.last); err != nil {
			rows.Close()
			return 0, err
		}
		vs = append(vs, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, v := range vs {
		if err := store.Truncate(ctx, v.name, eventstore.Revision(v.last)+1); err != nil {
			return 0, fmt.Errorf("purge %s: %w", v.name, err)
		}
	}
	return len(vs), nil
}

// runPurge runs purgeExpiredIntents every interval until ctx is done.
func runPurge(ctx context.Context, pool *pgxpool.Pool, store truncater, retention, interval time.Duration, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for {
			n, err := purgeExpiredIntents(ctx, pool, store, retention, 1000)
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
			if n < 1000 {
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
