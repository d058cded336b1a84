package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// Defaults of the options.
const (
	// DefaultAppendTimeout bounds each Append (WithAppendTimeout).
	DefaultAppendTimeout = 5 * time.Second
	// DefaultPollMin is SubscribeAll's first poll interval once caught up
	// (WithPollInterval).
	DefaultPollMin = 5 * time.Millisecond
	// DefaultPollMax is SubscribeAll's longest poll interval
	// (WithPollInterval).
	DefaultPollMax = 100 * time.Millisecond
	// DefaultBatchSize is the most events SubscribeAll reads at once, in
	// events (WithBatchSize).
	DefaultBatchSize = 500
)

// maxAppendAttempts bounds the retries of an append that lost a race the
// database reports as an error (an event id inserted concurrently by another
// transaction, a deadlock between two batches sharing ids, a serialization
// failure). The next attempt sees the winner's committed rows and classifies
// the append as a repeat or a conflict.
const maxAppendAttempts = 3

// Store is the PostgreSQL event store. It implements eventstore.Store on the
// schema of migrations/00001_eventstore.sql, with the functions of
// migrations/00008_append_without_stream_rows.sql. Create it with New; it is safe
// for concurrent use by any number of goroutines, and several Stores (in one
// or many processes) may share a database.
type Store struct {
	pool          *pgxpool.Pool
	appendTimeout time.Duration
	pollMin       time.Duration
	pollMax       time.Duration
	batchSize     int
	appended      broadcast
}

var _ eventstore.Store = (*Store)(nil)

// Option configures a Store in New.
type Option func(*Store)

// WithAppendTimeout bounds each Append to d (default 5 s): the call's context
// gets a deadline d later, and inside the database every lock wait of the
// append's transaction is limited to d (lock_timeout). d <= 0 removes both
// bounds. A stuck append holds back the readable horizon of the whole log, so
// keep d short.
func WithAppendTimeout(d time.Duration) Option {
	return func(s *Store) { s.appendTimeout = d }
}

// WithPollInterval sets how SubscribeAll waits for events appended by other
// processes once it has caught up: it polls after min, doubling the interval
// on every empty poll up to max (defaults 5 ms and 100 ms). Appends made
// through the same Store wake subscribers at once. Values <= 0 keep the
// defaults; max is raised to min if smaller.
func WithPollInterval(min, max time.Duration) Option {
	return func(s *Store) {
		if min > 0 {
			s.pollMin = min
		}
		if max > 0 {
			s.pollMax = max
		}
	}
}

// WithBatchSize sets the most events SubscribeAll reads and hands to its
// callback at once (default 500). n <= 0 keeps the default.
func WithBatchSize(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.batchSize = n
		}
	}
}

// New returns a Store on pool. The pool's database must have the migrations
// applied (migrations.Up). The pool is not closed by the Store. Size the pool
// for the expected concurrency: each Append and each read holds one
// connection for one statement, and each SubscribeAll holds one only while it
// reads.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{
		pool:          pool,
		appendTimeout: DefaultAppendTimeout,
		pollMin:       DefaultPollMin,
		pollMax:       DefaultPollMax,
		batchSize:     DefaultBatchSize,
	}
	for _, opt := range opts {
		opt(s)
	}
	if s.pollMax < s.pollMin {
		s.pollMax = s.pollMin
	}
	return s
}

// querier is what an append needs: the pool, or a transaction in tests.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// appendArgs are an append's validated arguments in the form of
// eventstore_append's parameters.
type appendArgs struct {
	stream   string
	expected eventstore.ExpectedRevision
	kind     int16
	revision int64
	// ids are the events' UUIDs as [16]byte, which pgx encodes into uuid[]
	// directly; a uuid.UUID element would go through its driver.Valuer
	// (a string, parsed back), some 20 allocations an id.
	ids      [][16]byte
	types    []string
	data     [][]byte
	metadata [][]byte
}

// Expected-revision kinds as eventstore_append takes them.
const (
	kindAny          = 0
	kindNoStream     = 1
	kindStreamExists = 2
	kindExact        = 3
)

// Result statuses of eventstore_append.
const (
	statusAppended = 0
	statusRepeat   = 1
	statusConflict = 2
)

func newAppendArgs(stream string, expected eventstore.ExpectedRevision, events []eventstore.EventData) (appendArgs, error) {
	a := appendArgs{stream: stream, expected: expected}
	var err error
	if a.kind, a.revision, err = expectedArgs(stream, expected, len(events)); err != nil {
		return a, err
	}
	a.ids = make([][16]byte, 0, len(events))
	a.types = make([]string, 0, len(events))
	a.data = make([][]byte, 0, len(events))
	a.metadata = make([][]byte, 0, len(events))
	err = addEventArgs(stream, events, &a.ids, &a.types, &a.data, &a.metadata)
	return a, err
}

// expectedArgs checks a part's stream name and event count and returns
// its expected revision as eventstore_append takes it (kind, revision).
func expectedArgs(stream string, expected eventstore.ExpectedRevision, events int) (int16, int64, error) {
	if stream == "" {
		return 0, 0, errors.New("pgstore: append: empty stream name")
	}
	if events == 0 {
		return 0, 0, fmt.Errorf("pgstore: append to %q: no events", stream)
	}
	switch {
	case expected.IsNoStream():
		return kindNoStream, 0, nil
	case expected.IsStreamExists():
		return kindStreamExists, 0, nil
	case expected.IsAny():
		return kindAny, 0, nil
	}
	rev, _ := expected.ExactRevision()
	if rev > math.MaxInt64-uint64(events) {
		return 0, 0, fmt.Errorf("pgstore: append to %q: expected revision %d out of range", stream, rev)
	}
	return kindExact, int64(rev), nil
}

// smallBatch is the most events of one part whose ids addEventArgs checks
// for repeats by comparing each with the ones before (no map to allocate).
const smallBatch = 16

// addEventArgs checks the events of one append to stream (each id a UUID,
// none twice, each type named) and appends their columns to ids, types,
// data and metadata.
func addEventArgs(stream string, events []eventstore.EventData, ids *[][16]byte, types *[]string, data, metadata *[][]byte) error {
	first := len(*ids)
	var seen map[uuid.UUID]struct{}
	if len(events) > smallBatch {
		seen = make(map[uuid.UUID]struct{}, len(events))
	}
	for i, e := range events {
		id, err := uuid.Parse(e.ID)
		if err != nil {
			return fmt.Errorf("pgstore: append to %q: event %d: id %q is not a UUID", stream, i, e.ID)
		}
		dup := false
		if seen != nil {
			_, dup = seen[id]
			seen[id] = struct{}{}
		} else {
			dup = slices.Contains((*ids)[first:], [16]byte(id))
		}
		if dup {
			return fmt.Errorf("pgstore: append to %q: event %d: id %s appears twice in the batch", stream, i, id)
		}
		if e.Type == "" {
			return fmt.Errorf("pgstore: append to %q: event %d (%s): empty type", stream, i, id)
		}
		*ids = append(*ids, id)
		*types = append(*types, e.Type)
		*data = append(*data, e.Data)
		*metadata = append(*metadata, e.Metadata)
	}
	return nil
}

// Append writes events to stream atomically if expected holds, in one
// statement (one round trip, one transaction that never waits for the
// client). On success it returns the revision of the last event (0-based)
// and its log position. It is idempotent: if the expected revision does not
// hold, or an event id of the batch is already stored, but every id of the
// batch is already in stream at the place expected names (Exact(n): at
// revisions n+1, n+2, … in batch order; NoStream: at 0, 1, …; Any and
// StreamExists: anywhere in the stream), it writes nothing and returns the
// stored revision and position of the batch's last event. The result's Now
// is the database clock of the append's transaction (now(), in UTC): the
// RecordedAt of the events it wrote, or for a repeat the clock of the
// repeat, so a caller needs no separate clock read after an append.
//
// Otherwise it returns a *eventstore.RevisionConflictError (errors.Is
// eventstore.ErrWrongExpectedRevision) whose Actual is the stream's last
// revision, or -1 if the stream never had an event; the error's message names
// the other stream when an id of the batch is stored in another stream (event
// ids are unique across the log). Truncated events no longer count as
// stored.
//
// It returns a plain error, with nothing written, for an empty stream name,
// no events, an id that is not a UUID, an id repeated in the batch, or an
// empty type. When the append exceeds its bound (WithAppendTimeout) the error
// matches context.DeadlineExceeded. Any error other than a
// RevisionConflictError or a validation error leaves the outcome unknown:
// repeat the same append to learn it. Safe for concurrent use; appends to
// one stream serialize, appends to different streams do not wait for each
// other.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	args, err := newAppendArgs(stream, expected, events)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	parent := ctx
	if s.appendTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.appendTimeout)
		defer cancel()
	}
	for attempt := 1; ; attempt++ {
		res, written, err := s.appendOnce(ctx, s.pool, args, false)
		if err == nil {
			if written {
				s.appended.notify()
			}
			return res, nil
		}
		if attempt < maxAppendAttempts && retryable(err) && ctx.Err() == nil {
			continue
		}
		return eventstore.AppendResult{}, s.appendError(parent, ctx, strconv.Quote(stream), err)
	}
}

// appendSQL runs eventstore_append and reads the database clock of its
// transaction: now() is the transaction's start, the same value the events'
// recorded_at defaults to, so it is the RecordedAt of what the append wrote
// (and, for a repeat, the clock of the repeat).
const appendSQL = `SELECT o_status, o_revision, o_tx, o_seq, o_dup_id, o_dup_stream, o_dup_revision, now()
FROM eventstore_append($1, $2, $3, $4, $5, $6, $7, $8)`

// appendOnce runs eventstore_append once on q. inTx says q is an explicit
// transaction of the caller's, whose idle time the function then bounds too.
// written reports whether it wrote events (false for a repeat). A conflict
// is returned as a *eventstore.RevisionConflictError, possibly wrapped;
// database errors as they come.
func (s *Store) appendOnce(ctx context.Context, q querier, a appendArgs, inTx bool) (res eventstore.AppendResult, written bool, err error) {
	// The nullable columns are scanned into pgtype values, which pgx fills
	// in place (a pointer target is allocated per column and row).
	var (
		status      int16
		revision    int64
		tx          pgtype.Uint64
		seq         pgtype.Int8
		dupID       pgtype.UUID
		dupStream   pgtype.Text
		dupRevision pgtype.Int8
		now         time.Time
	)
	err = q.QueryRow(ctx, appendSQL, a.stream, a.kind, a.revision, a.ids, a.types, a.data, a.metadata, s.timeoutArg(inTx)).
		Scan(&status, &revision, &tx, &seq, &dupID, &dupStream, &dupRevision, &now)
	if err != nil {
		return res, false, err
	}
	switch status {
	case statusAppended, statusRepeat:
		if !tx.Valid || !seq.Valid || revision < 0 {
			return res, false, fmt.Errorf("pgstore: append to %q: incomplete result from eventstore_append (status %d)", a.stream, status)
		}
		res = eventstore.AppendResult{
			NextRevision: uint64(revision),
			Position:     eventstore.Position{Commit: tx.Uint64, Prepare: uint64(seq.Int64)},
			Now:          now.UTC(),
		}
		return res, status == statusAppended, nil
	case statusConflict:
		conflict := &eventstore.RevisionConflictError{Stream: a.stream, Expected: a.expected, Actual: revision}
		if dupID.Valid && dupStream.Valid && dupRevision.Valid {
			return res, false, fmt.Errorf("pgstore: event id %s is already stored in stream %q at revision %d: %w",
				uuid.UUID(dupID.Bytes), dupStream.String, dupRevision.Int64, conflict)
		}
		return res, false, conflict
	default:
		return res, false, fmt.Errorf("pgstore: append to %q: unknown status %d from eventstore_append", a.stream, status)
	}
}

// timeoutArg returns the p_timeout_ms argument of the append functions:
// > 0 bounds the lock waits of an autocommit append (never idle in a
// transaction); < 0 (inTx) also bounds the idle time of a transaction that
// spans several statements; 0 leaves the session's settings (migration
// 00008).
func (s *Store) timeoutArg(inTx bool) int32 {
	if s.appendTimeout <= 0 {
		return 0
	}
	ms := max(int32(min(s.appendTimeout.Milliseconds(), math.MaxInt32)), 1)
	if inTx {
		return -ms
	}
	return ms
}

// retryable reports whether an append failed only because it lost a race
// that the next attempt resolves.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505", // unique_violation: an id committed by a concurrent append
		"40P01", // deadlock_detected: two batches sharing ids in different orders
		"40001": // serialization_failure, under a serializable default isolation
		return true
	}
	return false
}

// appendError translates a failed append's error at the package boundary:
// conflicts pass unchanged, exceeded bounds match context.DeadlineExceeded,
// a done caller context matches its error, and other errors are wrapped.
// what names the append's target in messages (a quoted stream name, or
// "N streams").
func (s *Store) appendError(parent, ctx context.Context, what string, err error) error {
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return err
	}
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("pgstore: append to %s: %w (outcome unknown: %w)", what, perr, err)
	}
	var pgErr *pgconn.PgError
	if ctx.Err() != nil || (errors.As(err, &pgErr) && pgErr.Code == "55P03") { // lock_not_available
		return fmt.Errorf("pgstore: append to %s: exceeded the append bound of %s: %w (outcome unknown: %w)",
			what, s.appendTimeout, context.DeadlineExceeded, err)
	}
	return fmt.Errorf("pgstore: append to %s (outcome unknown): %w", what, err)
}

// eventColumns are the columns scanEvent reads, in order.
const eventColumns = `e.stream, e.revision, e.tx, e.seq, e.id, e.type, e.data, e.metadata, e.recorded_at`

// scanEvent scans one row of eventColumns.
func scanEvent(row pgx.Row) (eventstore.RecordedEvent, error) {
	var (
		e        eventstore.RecordedEvent
		revision int64
		seq      int64
		id       [16]byte // pgx scans a uuid into [16]byte directly; a uuid.UUID goes through its sql.Scanner (a string)
	)
	if err := row.Scan(&e.Stream, &revision, &e.Position.Commit, &seq, &id, &e.Type, &e.Data, &e.Metadata, &e.RecordedAt); err != nil {
		return e, err
	}
	e.Revision = uint64(revision)
	e.Position.Prepare = uint64(seq)
	e.ID = uuid.UUID(id).String()
	e.RecordedAt = e.RecordedAt.UTC()
	return e, nil
}

// readStreamSQL reads a stream's live events from $2 and, in the same
// snapshot, whether the stream has any live event: when no event is returned
// it yields one row with revision -1 (a stream that exists) or none at all.
// The events of a stream are its live events: truncation deletes the others
// (migration 00008), so no streams row is needed to tell.
const readStreamSQL = `
SELECT $1::text, coalesce(e.revision, -1), coalesce(e.tx, '0'::xid8), coalesce(e.seq, 0),
       coalesce(e.id, '00000000-0000-0000-0000-000000000000'::uuid), coalesce(e.type, ''),
       e.data, e.metadata, coalesce(e.recorded_at, 'epoch'::timestamptz),
       true
FROM (SELECT 1 FROM events l WHERE l.stream = $1 LIMIT 1) live
LEFT JOIN LATERAL (
    SELECT * FROM events e
    WHERE e.stream = $1 AND e.revision >= $2::bigint
    ORDER BY e.revision
    LIMIT $3
) e ON true`

// ReadStream returns up to limit live events of stream with revision >= from
// (0-based), in revision order, with their log positions; limit <= 0 means
// all. Events below the stream's truncation point are not live. Every
// committed event is returned, whatever the readable horizon of ReadAll. It
// returns an empty slice when the stream has live events but none at or
// after from, eventstore.ErrStreamNotFound when the stream has no live
// events (never appended, or truncated), and a wrapped error if the query
// fails. Safe for concurrent use.
func (s *Store) ReadStream(ctx context.Context, stream string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error) {
	var lim *int64
	if limit > 0 {
		l := int64(limit)
		lim = &l
	}
	start := int64(min(from, math.MaxInt64))
	rows, err := s.pool.Query(ctx, readStreamSQL, stream, start, lim)
	if err != nil {
		return nil, fmt.Errorf("pgstore: read stream %q: %w", stream, err)
	}
	defer rows.Close()
	var (
		events []eventstore.RecordedEvent
		live   bool
		found  bool
	)
	for rows.Next() {
		found = true
		var (
			e        eventstore.RecordedEvent
			revision int64
			seq      int64
			id       [16]byte // as in scanEvent
		)
		// The first column is stream itself: skipped, not copied per row.
		if err := rows.Scan(nil, &revision, &e.Position.Commit, &seq, &id, &e.Type, &e.Data, &e.Metadata, &e.RecordedAt, &live); err != nil {
			return nil, fmt.Errorf("pgstore: read stream %q: %w", stream, err)
		}
		if revision < 0 {
			continue // the stream exists, no event at or after from
		}
		e.Stream = stream
		e.Revision = uint64(revision)
		e.Position.Prepare = uint64(seq)
		e.ID = uuid.UUID(id).String()
		e.RecordedAt = e.RecordedAt.UTC()
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: read stream %q: %w", stream, err)
	}
	if !found || !live {
		return nil, eventstore.ErrStreamNotFound
	}
	if events == nil {
		events = []eventstore.RecordedEvent{}
	}
	return events, nil
}

// readAllSQL reads the log after a position, below the readable horizon: the
// xmin of the statement's snapshot, below which every transaction has ended.
const readAllSQL = `
SELECT ` + eventColumns + `
FROM events e
WHERE (e.tx, e.seq) > ($1::xid8, $2::bigint)
  AND e.tx < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY e.tx, e.seq
LIMIT $3`

// ReadAll returns up to limit (> 0) events after position after, in log
// order (commit order of their transactions, then append order). It returns
// only events below the readable horizon, so no event it has not returned can
// later commit at or before a position it has returned: a reader that
// checkpoints the last position it saw never skips an event. An empty slice
// means no readable event after after yet. Returns a plain error if limit <=
// 0 and a wrapped error if the query fails. Safe for concurrent use.
func (s *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("pgstore: read all: limit %d, want > 0", limit)
	}
	rows, err := s.pool.Query(ctx, readAllSQL, after.Commit, int64(min(after.Prepare, math.MaxInt64)), int64(limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: read all after %s: %w", after, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (eventstore.RecordedEvent, error) {
		return scanEvent(row)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: read all after %s: %w", after, err)
	}
	return events, nil
}

const headSQL = `
SELECT e.tx, e.seq FROM events e
WHERE e.tx < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY e.tx DESC, e.seq DESC
LIMIT 1`

// Head returns the position of the last event ReadAll can return now (the
// log's readable horizon), or the zero Position if there is none. Events of
// transactions that committed after an older, still running transaction are
// not counted until that transaction ends (see HorizonLag). Head can move
// back if Truncate deletes the last events of the log. Returns a wrapped
// error if the query fails. Safe for concurrent use.
func (s *Store) Head(ctx context.Context) (eventstore.Position, error) {
	var (
		p   eventstore.Position
		seq int64
	)
	err := s.pool.QueryRow(ctx, headSQL).Scan(&p.Commit, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Position{}, nil
	}
	if err != nil {
		return eventstore.Position{}, fmt.Errorf("pgstore: head: %w", err)
	}
	p.Prepare = uint64(seq)
	return p, nil
}

// Lag describes how far the log's readable horizon trails its newest
// committed events.
type Lag struct {
	// Events is the number of committed events that ReadAll cannot return
	// yet because a transaction older than theirs is still running.
	Events int64
	// Age is how long ago the oldest of those events' transactions started,
	// by the database clock; zero when Events is zero.
	Age time.Duration
}

// lagSQL counts the visible events at or above the horizon. The upper bound
// changes nothing (no event at or above the snapshot's xmax is visible) but
// makes the condition a range, which the planner takes through the index.
const lagSQL = `
SELECT count(*), coalesce(extract(epoch FROM now() - min(e.recorded_at)), 0)::float8
FROM events e
WHERE e.tx >= pg_snapshot_xmin(pg_current_snapshot())
  AND e.tx < pg_snapshot_xmax(pg_current_snapshot())`

// HorizonLag reports how far the readable horizon trails the newest
// committed events, for a metric: normally zero, growing while any
// long-running write transaction on the server (an append, or any other
// transaction that was assigned a transaction id) holds the horizon back.
// Returns a wrapped error if the query fails. Safe for concurrent use.
func (s *Store) HorizonLag(ctx context.Context) (Lag, error) {
	var (
		lag     Lag
		seconds float64
	)
	if err := s.pool.QueryRow(ctx, lagSQL).Scan(&lag.Events, &seconds); err != nil {
		return Lag{}, fmt.Errorf("pgstore: horizon lag: %w", err)
	}
	lag.Age = time.Duration(max(seconds, 0) * float64(time.Second))
	return lag, nil
}

// SubscribeAll calls fn with batches of at most the batch size
// (WithBatchSize) of events after position after, in log order, each event
// exactly once: first catching up, then following new appends. Once caught
// up, an append through this Store wakes it at once; appends by other Stores
// or processes are found by polling (WithPollInterval). It returns ctx.Err()
// when ctx is done, fn's error as is when fn fails, and a wrapped error if
// reading the log fails (resume from the last position fn handled). It
// blocks, calls fn from the calling goroutine only, and is safe for
// concurrent use (each call is an independent subscription).
func (s *Store) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error {
	interval := s.pollMin
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		// Take the wake-up channel before reading, so an append that
		// commits during the read is not missed.
		wake := s.appended.wait()
		batch, err := s.ReadAll(ctx, after, s.batchSize)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("pgstore: subscribe all after %s: %w", after, err)
		}
		if len(batch) > 0 {
			if err := fn(ctx, batch); err != nil {
				return err
			}
			after = batch[len(batch)-1].Position
			interval = s.pollMin
			if len(batch) == s.batchSize {
				continue // more may be readable now
			}
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
			interval = s.pollMin
		case <-timer.C:
			interval = min(interval*2, s.pollMax)
		}
	}
}

// Truncate deletes the events of stream with a revision below before
// (0-based) and hides them from ReadStream (KurrentDB's $tb). before is
// capped at the stream's last revision + 1, and a stream's truncation point
// never moves back. The stream keeps its last revision: a later append must
// expect it exactly (NoStream fails with Actual = last revision). Truncating
// a stream that never had an event does nothing. Returns a wrapped error if
// the statement fails. Safe for concurrent use; it serializes with appends
// to the stream.
func (s *Store) Truncate(ctx context.Context, stream string, before eventstore.Revision) error {
	var tb *int64
	if err := s.pool.QueryRow(ctx, `SELECT eventstore_truncate($1, $2)`, stream, int64(min(before, math.MaxInt64))).Scan(&tb); err != nil {
		return fmt.Errorf("pgstore: truncate %q before %d: %w", stream, before, err)
	}
	return nil
}
