package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/retrysafe/booking/eventstore"
)

// multiArgs are an AppendMulti's validated arguments in the form of
// eventstore_append_multi's parameters: one stream, kind, revision and
// event count per part, and the events of every part, part after part.
type multiArgs struct {
	appends   []eventstore.StreamAppend
	streams   []string
	kinds     []int16
	revisions []int64
	counts    []int32
	ids       [][16]byte
	types     []string
	data      [][]byte
	metadata  [][]byte
}

func newMultiArgs(appends []eventstore.StreamAppend) (multiArgs, error) {
	m := multiArgs{appends: appends}
	if err := eventstore.CheckAppends(appends); err != nil {
		return m, err
	}
	n := 0
	for _, a := range appends {
		n += len(a.Events)
	}
	m.streams = make([]string, 0, len(appends))
	m.kinds = make([]int16, 0, len(appends))
	m.revisions = make([]int64, 0, len(appends))
	m.counts = make([]int32, 0, len(appends))
	m.ids = make([][16]byte, 0, n)
	m.types = make([]string, 0, n)
	m.data = make([][]byte, 0, n)
	m.metadata = make([][]byte, 0, n)
	for _, a := range appends {
		kind, revision, err := expectedArgs(a.Stream, a.Expected, len(a.Events))
		if err != nil {
			return m, err
		}
		m.streams = append(m.streams, a.Stream)
		m.kinds = append(m.kinds, kind)
		m.revisions = append(m.revisions, revision)
		m.counts = append(m.counts, int32(len(a.Events)))
		if err := addEventArgs(a.Stream, a.Events, &m.ids, &m.types, &m.data, &m.metadata); err != nil {
			return m, err
		}
	}
	return m, nil
}

// AppendMulti appends to every stream of appends, each part under its own
// expected revision, in one statement and so in one transaction: one round
// trip, one transaction id (xid8) for every event of the call, so the events
// are committed, and become readable in the log, together (atomic). A call
// of one part is an Append.
//
// Each part is decided as Append decides it: appended, a repeat (every id
// of the part already stored in its stream where its expected revision puts
// them: nothing written, the stored revision and position returned), or a
// conflict. If a part conflicts, nothing of the call is written and the
// error is an *eventstore.AppendPartError naming the first conflicting part
// and wrapping its *eventstore.RevisionConflictError (errors.Is
// eventstore.ErrWrongExpectedRevision; the message names the other stream
// when an id of the part is stored in another one). Otherwise it returns
// one result per part, in order; Now is the transaction's clock, as for
// Append.
//
// It returns a plain error, with nothing written, for invalid parts (those
// eventstore.CheckAppends refuses, and what Append refuses in a part). The
// streams' locks are taken in one order for every caller, so concurrent
// calls sharing streams never deadlock; they are retried as Append is after
// a lost race (at most three attempts in all). Any other error leaves the
// outcome unknown, the whole call's at once: repeat the same call to learn
// it. Safe for concurrent use.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	return s.AppendMultiWith(ctx, nil, appends...)
}

// AppendMultiWith is AppendMulti with statements on other tables of the
// store's database in the same transaction: a unit of work that commits the
// events and those statements together, or neither. queue (nil: none) adds
// the statements to the batch b, after the append; the batch is sent as one
// pipeline in one implicit transaction, so the unit is still one round trip
// and one commit. queue is called once per attempt, so it must queue the
// same statements each time. Callbacks set on the queued statements
// (pgx.QueuedQuery's Exec, Query, QueryRow) run as their results arrive,
// which is before the commit is confirmed: what they record may be used only
// once AppendMultiWith has returned nil. A statement that fails in the
// database rolls the whole unit back; its error is returned wrapped
// (errors.As finds the *pgconn.PgError), as an outcome-unknown error of the
// unit, unless it is the append's conflict. An error a callback returns
// rolls nothing back: the database commits the unit when every statement
// succeeds, before the callbacks have seen the results. It is returned as
// an outcome-unknown error too. So a condition the unit depends on must be
// checked by a statement that fails in the database (a constraint, or a
// guard that raises), not by a callback. The statements run after the
// append has taken its streams' locks and its transaction id, and inside its
// bounds (lock_timeout, idle_in_transaction_session_timeout:
// WithAppendTimeout).
//
// The statements run whenever the append does not fail, also when every
// part is a repeat: for a repeated unit to succeed they must be repeatable
// themselves (INSERT ... ON CONFLICT DO NOTHING, an upsert, a guarded
// UPDATE). They must not touch the events and streams tables, and must
// leave the transaction as they found it (no COMMIT, no ROLLBACK, no
// SAVEPOINT release of the batch's work).
func (s *Store) AppendMultiWith(ctx context.Context, queue func(b *pgx.Batch), appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	if len(appends) == 1 && queue == nil {
		a := appends[0]
		res, err := s.Append(ctx, a.Stream, a.Expected, a.Events...)
		if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			return nil, &eventstore.AppendPartError{Part: 0, Parts: 1, Stream: a.Stream, Err: err}
		}
		if err != nil {
			return nil, err
		}
		return []eventstore.AppendResult{res}, nil
	}
	args, err := newMultiArgs(appends)
	if err != nil {
		return nil, err
	}
	parent := ctx
	if s.appendTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.appendTimeout)
		defer cancel()
	}
	for attempt := 1; ; attempt++ {
		results, written, err := s.appendMultiOnce(ctx, s.pool, args, queue, false)
		if err == nil {
			if written {
				s.appended.notify()
			}
			return results, nil
		}
		if attempt < maxAppendAttempts && retryable(err) && ctx.Err() == nil {
			continue
		}
		return nil, s.appendError(parent, ctx, fmt.Sprintf("%d streams", len(appends)), err)
	}
}

// batcher is what a multi-stream append needs: the pool, or a transaction
// in tests.
type batcher interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// appendMultiSQL runs eventstore_append_multi and reads the database clock
// of its transaction (see appendSQL).
const appendMultiSQL = `SELECT o_status, o_revision, o_tx, o_seq, now()
FROM eventstore_append_multi($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// multiParams returns eventstore_append_multi's parameters for a; bounded
// as in an explicit transaction when inTx (see timeoutArg).
func (s *Store) multiParams(a multiArgs, inTx bool) []any {
	return []any{a.streams, a.kinds, a.revisions, a.counts, a.ids, a.types, a.data, a.metadata, s.timeoutArg(inTx)}
}

// conflictState is the SQLSTATE eventstore_append_multi raises for a part
// whose expected revision does not hold (migration 00013).
const conflictState = "EV409"

// appendMultiOnce runs eventstore_append_multi once on q, followed by what
// queue adds, in one implicit transaction. inTx says q is an explicit
// transaction of the caller's. written reports whether it wrote events. A
// conflict is returned as an *eventstore.AppendPartError; database errors as
// they come.
func (s *Store) appendMultiOnce(ctx context.Context, q batcher, a multiArgs, queue func(*pgx.Batch), inTx bool) (results []eventstore.AppendResult, written bool, err error) {
	// A unit with statements of the caller's is bounded like an explicit
	// transaction: it spans several statements.
	params := s.multiParams(a, inTx || queue != nil)
	scan := func(rows pgx.Rows) error {
		results, written, err = scanMulti(rows, a)
		return err
	}
	if queue == nil {
		rows, qerr := q.Query(ctx, appendMultiSQL, params...)
		if qerr == nil {
			qerr = scan(rows)
		}
		err = qerr
	} else {
		b := &pgx.Batch{}
		b.Queue(appendMultiSQL, params...).Query(scan)
		queue(b)
		err = q.SendBatch(ctx, b).Close()
	}
	if err != nil {
		return nil, false, multiConflict(a, err)
	}
	return results, written, nil
}

// scanMulti reads eventstore_append_multi's rows, one per part, and closes
// rows.
func scanMulti(rows pgx.Rows, a multiArgs) ([]eventstore.AppendResult, bool, error) {
	defer rows.Close()
	results := make([]eventstore.AppendResult, 0, len(a.streams))
	written := false
	for rows.Next() {
		var ( // pgtype values: filled in place, where pointer targets are allocated
			status   int16
			revision pgtype.Int8
			tx       pgtype.Uint64
			seq      pgtype.Int8
			now      time.Time
		)
		if err := rows.Scan(&status, &revision, &tx, &seq, &now); err != nil {
			return nil, false, err
		}
		part := len(results)
		if part >= len(a.streams) || (status != statusAppended && status != statusRepeat) ||
			!revision.Valid || revision.Int64 < 0 || !tx.Valid || !seq.Valid {
			return nil, false, fmt.Errorf("pgstore: append to %d streams: unexpected result %d (status %d) from eventstore_append_multi", len(a.streams), part, status)
		}
		written = written || status == statusAppended
		results = append(results, eventstore.AppendResult{
			NextRevision: uint64(revision.Int64),
			Position:     eventstore.Position{Commit: tx.Uint64, Prepare: uint64(seq.Int64)},
			Now:          now.UTC(),
		})
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(results) != len(a.streams) {
		return nil, false, fmt.Errorf("pgstore: append to %d streams: %d results from eventstore_append_multi", len(a.streams), len(results))
	}
	return results, written, nil
}

// multiConflict translates eventstore_append_multi's conflict (SQLSTATE
// EV409, details in a JSON DETAIL) into an *eventstore.AppendPartError;
// other errors pass unchanged.
func multiConflict(a multiArgs, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != conflictState {
		return err
	}
	var d struct {
		Part        int        `json:"part"`
		Actual      int64      `json:"actual"`
		DupID       *uuid.UUID `json:"dup_id"`
		DupStream   *string    `json:"dup_stream"`
		DupRevision *int64     `json:"dup_revision"`
	}
	if jerr := json.Unmarshal([]byte(pgErr.Detail), &d); jerr != nil || d.Part < 1 || d.Part > len(a.appends) {
		return fmt.Errorf("pgstore: append to %d streams: unreadable conflict from eventstore_append_multi (%v): %w", len(a.appends), jerr, err)
	}
	p := a.appends[d.Part-1]
	var perr error = &eventstore.RevisionConflictError{Stream: p.Stream, Expected: p.Expected, Actual: d.Actual}
	if d.DupID != nil && d.DupStream != nil && d.DupRevision != nil {
		perr = fmt.Errorf("pgstore: event id %s is already stored in stream %q at revision %d: %w",
			*d.DupID, *d.DupStream, *d.DupRevision, perr)
	}
	return &eventstore.AppendPartError{Part: d.Part - 1, Parts: len(a.appends), Stream: p.Stream, Err: perr}
}
