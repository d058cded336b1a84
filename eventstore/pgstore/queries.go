package pgstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// This file holds the queries over the event store's own tables (events,
// streams) that the service's background jobs and metrics need beyond
// eventstore.Store. Their callers declare small interfaces for them, so
// another backend supplies its own versions.

// EventCount returns the number of events stored in the log (truncated
// events are deleted and not counted), for a progress bar's total. Returns
// a wrapped error if the query fails. Safe for concurrent use.
func (s *Store) EventCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count events: %w", err)
	}
	return n, nil
}

// eventsAfterSQL counts, up to a limit, the readable events after a
// position: those ReadAll would return from it (below the horizon).
const eventsAfterSQL = `
SELECT count(*) FROM (
  SELECT 1 FROM events e
  WHERE (e.tx, e.seq) > ($1::xid8, $2::bigint)
    AND e.tx < pg_snapshot_xmin(pg_current_snapshot())
  LIMIT $3) x`

// EventsAfter returns how many events ReadAll could return after position
// after now — the distance in events between a consumer's checkpoint and
// the log's readable head (Head) — counting at most limit (> 0) of them,
// so a far-behind consumer costs one bounded index scan. Events held back
// by the horizon are not counted (HorizonLag reports them). Returns a
// wrapped error if the query fails. Safe for concurrent use.
func (s *Store) EventsAfter(ctx context.Context, after eventstore.Position, limit int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, eventsAfterSQL, after.Commit, int64(min(after.Prepare, math.MaxInt64)), limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgstore: count events after %s: %w", after, err)
	}
	return n, nil
}

// purgeSQL finds the streams with a name prefix whose first live event (the
// lowest revision still stored: truncation deletes the others) was recorded
// more than $2 seconds ago by the database clock, with each one's last
// revision (its newest event's, which is never below the last revision a
// truncation recorded).
const purgeSQL = `
SELECT f.stream, (SELECT max(l.revision) FROM events l WHERE l.stream = f.stream)
FROM (
    SELECT DISTINCT ON (e.stream) e.stream, e.recorded_at
    FROM events e
    WHERE e.stream LIKE $1
    ORDER BY e.stream, e.revision
) f
WHERE f.recorded_at < now() - make_interval(secs => $2)
LIMIT $3`

// PurgeStreams truncates up to limit streams whose name starts with prefix
// and whose first live event was recorded more than olderThan ago by the
// database clock (PostgreSQL's now()): the whole stream goes, its last
// revision stays (see Truncate), so a later append to it must expect that
// revision. prefix is matched literally. It returns the number of streams
// truncated; fewer than limit means none is left for now. Returns a wrapped
// error if a query or a truncation fails (the streams truncated before it
// stay truncated). Safe for concurrent use; two concurrent calls may
// truncate the same stream twice, which is harmless.
func (s *Store) PurgeStreams(ctx context.Context, prefix string, olderThan time.Duration, limit int) (int, error) {
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
	rows, err := s.pool.Query(ctx, purgeSQL, like, olderThan.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("pgstore: purge %s*: %w", prefix, err)
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
			return 0, fmt.Errorf("pgstore: purge %s*: %w", prefix, err)
		}
		vs = append(vs, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("pgstore: purge %s*: %w", prefix, err)
	}
	for i, v := range vs {
		if err := s.Truncate(ctx, v.name, eventstore.Revision(v.last)+1); err != nil {
			return i, err
		}
	}
	return len(vs), nil
}

// PurgedStreams returns the streams whose events were all truncated, with
// the last revision each keeps (its row in streams), for a copy of the log
// to another store (eventstore/logcopy): such a stream shows nothing in
// ReadAll, yet a later append must expect its last revision. Returns a
// wrapped error if the query fails.
func (s *Store) PurgedStreams(ctx context.Context) (map[string]eventstore.Revision, error) {
	rows, err := s.pool.Query(ctx, `SELECT s.name, s.last_revision FROM streams s
		WHERE s.truncate_before > s.last_revision AND NOT EXISTS (SELECT 1 FROM events e WHERE e.stream = s.name)`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: purged streams: %w", err)
	}
	defer rows.Close()
	out := map[string]eventstore.Revision{}
	for rows.Next() {
		var name string
		var last int64
		if err := rows.Scan(&name, &last); err != nil {
			return nil, fmt.Errorf("pgstore: purged streams: %w", err)
		}
		out[name] = eventstore.Revision(last)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: purged streams: %w", err)
	}
	return out, nil
}
