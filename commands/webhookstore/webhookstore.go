// Package webhookstore is the PostgreSQL table of the provider's webhook
// events the service processed (table provider_events, migration 00010).
// It implements commands.ProcessedEvents with pgx; package commands
// decides when rows are written and pruned.
package webhookstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pruneBatch bounds the rows one Prune statement deletes.
const pruneBatch = 10000

// Marks are written in batches: MarkProcessed keeps an event id in memory
// and one statement writes up to markBatch of them, at the latest
// markDelay after the first of them was kept; at most maxUnwritten wait
// (a database that refuses the writes makes MarkProcessed fail past it).
const (
	markBatch      = 256
	markDelay      = time.Second
	maxUnwritten   = 10000
	flushTimeout   = 10 * time.Second
	insertMarksSQL = `INSERT INTO provider_events (event_id, processed_at)
		SELECT * FROM unnest($1::text[], $2::timestamptz[]) ON CONFLICT (event_id) DO NOTHING`
)

// errTooManyUnwritten is MarkProcessed's failure while maxUnwritten marks
// wait for a database that refuses them.
var errTooManyUnwritten = errors.New("webhookstore: too many processed events waiting to be written")

// Store is the provider_events table. It is safe for concurrent use.
//
// A mark waits in memory until its batch is written (markDelay at most
// while the database takes writes; Flush writes the batch at once):
// Processed answers from memory for the marks of this process not yet
// written, so within a process a mark is seen at once. A mark lost with
// the process (a crash before its batch was written) only makes a
// redelivery of that event processed again, which the table's contract
// allows (commands.ProcessedEvents saves work; facts are deduplicated by
// payment id in the order streams).
type Store struct {
	pool *pgxpool.Pool

	// flushing serializes the batch writes.
	flushing sync.Mutex

	mu sync.Mutex
	// pending holds the marks not written yet, writing those of the batch
	// being written; both by event id, with the first time marked.
	pending, writing map[string]time.Time
	// armed says a timer will write pending.
	armed bool
}

// New returns the table on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Processed reports whether event id was recorded as processed, by this
// process (written or not yet) or, in the table, by any. Errors are the
// database's.
func (s *Store) Processed(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	_, waiting := s.pending[id]
	_, inFlight := s.writing[id]
	s.mu.Unlock()
	if waiting || inFlight {
		return true, nil
	}
	var seen bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM provider_events WHERE event_id = $1)`, id).Scan(&seen); err != nil {
		return false, fmt.Errorf("webhookstore: read event %s: %w", id, err)
	}
	return seen, nil
}

// MarkProcessed records event id as processed at at; a repeat keeps the
// first time. The row is written with the batch of marks it joins: at
// once when the batch is full (markBatch), else within markDelay by a
// timer. Errors are the database's for a full batch written at once, or
// errTooManyUnwritten while maxUnwritten marks wait for a database that
// refuses them.
func (s *Store) MarkProcessed(ctx context.Context, id string, at time.Time) error {
	s.mu.Lock()
	if s.pending == nil {
		s.pending = make(map[string]time.Time)
	}
	if _, ok := s.pending[id]; !ok {
		if len(s.pending)+len(s.writing) >= maxUnwritten {
			s.mu.Unlock()
			return fmt.Errorf("record event %s: %w", id, errTooManyUnwritten)
		}
		s.pending[id] = at
	}
	full := len(s.pending) >= markBatch
	if !full && !s.armed {
		s.armed = true
		time.AfterFunc(markDelay, s.flushLater)
	}
	s.mu.Unlock()
	if full {
		return s.Flush(ctx)
	}
	return nil
}

// flushLater is the timer's write of the pending marks. A failed write
// keeps them pending (Processed still answers from memory) until the next
// MarkProcessed arms the timer again, or Flush or PruneProcessed runs.
func (s *Store) flushLater() {
	s.mu.Lock()
	s.armed = false
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	_ = s.Flush(ctx)
}

// Flush writes every mark waiting in memory, in batches of markBatch, one
// statement each; booking serve calls it as it stops. On an error the
// marks not written stay pending (a later Flush or the timer writes them).
// Errors are the database's.
func (s *Store) Flush(ctx context.Context) error {
	s.flushing.Lock()
	defer s.flushing.Unlock()
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			return nil
		}
		ids := make([]string, 0, min(len(s.pending), markBatch))
		ats := make([]time.Time, 0, cap(ids))
		s.writing = make(map[string]time.Time, cap(ids))
		for id, at := range s.pending {
			if len(ids) == markBatch {
				break
			}
			ids, ats = append(ids, id), append(ats, at)
			s.writing[id] = at
			delete(s.pending, id)
		}
		s.mu.Unlock()
		_, err := s.pool.Exec(ctx, insertMarksSQL, ids, ats)
		s.mu.Lock()
		if err != nil {
			for id, at := range s.writing {
				if _, ok := s.pending[id]; !ok {
					s.pending[id] = at
				}
			}
		}
		s.writing = nil
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("webhookstore: record %d events: %w", len(ids), err)
		}
	}
}

// PruneProcessed writes the marks waiting in memory (Flush), then deletes
// the events processed before before, up to pruneBatch per statement until
// none is left, and returns how many. Errors are the database's.
func (s *Store) PruneProcessed(ctx context.Context, before time.Time) (int64, error) {
	if err := s.Flush(ctx); err != nil {
		return 0, err
	}
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
