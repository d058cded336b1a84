// Package webhookstore is the PostgreSQL table of the provider's webhook
// events the service processed (table provider_events, migration 00010).
// It implements commands.ProcessedEvents with pgx; package commands
// decides when rows are written and pruned.
package webhookstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pruneBatch bounds the rows one Prune statement deletes.
const pruneBatch = 10000

// Store is the provider_events table. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

// New returns the table on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Processed reports whether event id was recorded as processed. Errors are
// the database's.
func (s *Store) Processed(ctx context.Context, id string) (bool, error) {
	var seen bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM provider_events WHERE event_id = $1)`, id).Scan(&seen); err != nil {
		return false, fmt.Errorf("webhookstore: read event %s: %w", id, err)
	}
	return seen, nil
}

// MarkProcessed records event id as processed at at; a repeat keeps the
// first time. Errors are the database's.
func (s *Store) MarkProcessed(ctx context.Context, id string, at time.Time) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO provider_events (event_id, processed_at) VALUES ($1, $2)
		ON CONFLICT (event_id) DO NOTHING`, id, at); err != nil {
		return fmt.Errorf("webhookstore: record event %s: %w", id, err)
	}
	return nil
}

// PruneProcessed deletes the events processed before before, up to
// pruneBatch per statement until none is left, and returns how many.
// Errors are the database's.
func (s *Store) PruneProcessed(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM provider_events WHERE event_id IN (
			SELECT event_id FROM provider_events WHERE processed_at < $1 LIMIT $2)`, before, pruneBatch)
		if err != nil {
			return n, fmt.Errorf("webhookstore: prune events before %s: %w", before.UTC().Format(time.RFC3339), err)
		}
		n += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return n, nil
		}
	}
}
