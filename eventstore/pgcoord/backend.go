package pgcoord

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// Backend names, as stored in the backend column of the position tables
// (migration 00007) and in the session setting booking.backend.
const (
	BackendPostgres  = "postgres"
	BackendKurrentDB = "kurrentdb"
)

// BackendSetting is the PostgreSQL session setting (a run-time parameter of
// every connection of the service's pool, see SetBackend) whose value the
// position tables' trigger stamps on every position written.
const BackendSetting = "booking.backend"

// SetBackend makes every connection of a pool built from cfg stamp backend
// on the positions it writes (checkpoints, projection_checkpoints,
// notify_relays). Call it on the pool configuration before the pool is
// created.
func SetBackend(cfg *pgxpool.Config, backend string) {
	cfg.ConnConfig.RuntimeParams[BackendSetting] = backend
}

// BackendMismatchError reports stored log positions written on another
// event store backend than the one the service is started on. Positions
// are not comparable across backends, so the service refuses to start;
// Error says what to rebuild or reset.
type BackendMismatchError struct {
	// Want is the backend the service is started on.
	Want string
	// Checkpoints, Projections and Relays name the rows of checkpoints,
	// projection_checkpoints and notify_relays at a non-zero position
	// written by another backend, each as "name (backend)".
	Checkpoints, Projections, Relays []string
}

// Error lists the positions at fault and, for each table, the way out:
// rebuild the read models, reset the workers' checkpoints, reset the
// relay's checkpoint together with NATS stream BOOKING.
func (e *BackendMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the event store is %s (BOOKING_EVENT_STORE), but the database holds log positions written on another backend; positions are not comparable across backends:", e.Want)
	writeWaysOut(&b, e.Checkpoints, e.Projections, e.Relays)
	b.WriteString(" see docs/kurrentdb.md, \"Switching backends\"")
	return b.String()
}

// writeWaysOut writes, for each kind of stored position named, how to
// rebuild or reset it: the read models (projections), the workers'
// checkpoints and the relay's checkpoint with NATS stream BOOKING.
func writeWaysOut(b *strings.Builder, checkpoints, projections, relays []string) {
	if len(projections) > 0 {
		fmt.Fprintf(b, " read models %s: rebuild them with `BOOKING_EVENT_STORE=… booking projections rebuild --switch-backend`;", strings.Join(projections, ", "))
	}
	if len(checkpoints) > 0 {
		fmt.Fprintf(b, " worker checkpoints %s: reset them (DELETE FROM checkpoints; the workers then re-read the whole log, which is safe: they are idempotent);", strings.Join(checkpoints, ", "))
	}
	if len(relays) > 0 {
		fmt.Fprintf(b, " notification relay %s: reset it (DELETE FROM notify_relays) and delete NATS stream BOOKING, whose messages carry the old positions (nats stream rm BOOKING; with the embedded NATS server, remove $BOOKING_DATA_DIR/nats while the service is stopped), which makes the relay republish the whole log;", strings.Join(relays, ", "))
	}
}

// CheckBackend returns a *BackendMismatchError if any stored position
// (checkpoints, projection_checkpoints, notify_relays) other than the
// start of the log was written by a backend other than want. Returns a
// wrapped error if a query fails. Call it at start, before any worker
// moves a position.
func CheckBackend(ctx context.Context, pool *pgxpool.Pool, want string) error {
	e := &BackendMismatchError{Want: want}
	if err := collectNames(ctx, pool, "backend", `name || ' (' || backend || ')'`,
		`backend <> $1 AND (commit_tx, prepare) <> (0, 0)`, [3]*[]string{&e.Checkpoints, &e.Projections, &e.Relays}, want); err != nil {
		return err
	}
	if len(e.Checkpoints)+len(e.Projections)+len(e.Relays) > 0 {
		return e
	}
	return nil
}

// PositionsAheadError reports stored log positions beyond the head of the
// event log the service is started on: the log is not the one they were
// read from (a fresh KurrentDB server, a restored backup, a replaced
// cluster). The workers would skip every event up to those positions, or
// fail on a position that is not an event boundary, so the service
// refuses to start; Error says what to rebuild or reset.
type PositionsAheadError struct {
	// Head is the position of the last event of the log.
	Head eventstore.Position
	// Checkpoints, Projections and Relays name the rows of checkpoints,
	// projection_checkpoints and notify_relays beyond Head, each as
	// "name (commit/prepare)".
	Checkpoints, Projections, Relays []string
}

// Error lists the positions at fault and, for each table, the way out, as
// BackendMismatchError does.
func (e *PositionsAheadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the database holds log positions beyond the head of the event log (BOOKING_EVENT_STORE; last event at %d/%d): "+
		"the event store is not the log they were read from (another server, a restored backup?); point BOOKING_EVENT_STORE back at that log, or reset:",
		e.Head.Commit, e.Head.Prepare)
	writeWaysOut(&b, e.Checkpoints, e.Projections, e.Relays)
	b.WriteString(" see docs/kurrentdb.md, \"Another log of the same backend\"")
	return b.String()
}

// CheckHead returns a *PositionsAheadError if any stored position
// (checkpoints, projection_checkpoints, notify_relays) is beyond head, the
// position of the last event of the event log (kurrentdb.Store.Head).
// Every stored position is that of an event read from the log, so none
// can be beyond its head unless the log is another one. Use it only on a
// log whose head never moves back (KurrentDB's; PostgreSQL's purge can
// delete the last events). Returns a wrapped error if a query fails. Call
// it at start, before any worker moves a position.
func CheckHead(ctx context.Context, pool *pgxpool.Pool, head eventstore.Position) error {
	e := &PositionsAheadError{Head: head}
	if err := collectNames(ctx, pool, "positions", `name || ' (' || commit_tx || '/' || prepare || ')'`,
		`(commit_tx, prepare) > ($1::bigint, $2::bigint)`, [3]*[]string{&e.Checkpoints, &e.Projections, &e.Relays},
		int64(head.Commit), int64(head.Prepare)); err != nil {
		return err
	}
	if len(e.Checkpoints)+len(e.Projections)+len(e.Relays) > 0 {
		return e
	}
	return nil
}

// collectNames appends to into[0], into[1] and into[2] the rows `SELECT sel`
// of checkpoints, projection_checkpoints and notify_relays that match where
// (with args), ordered by name; errors name what was checked and the table.
func collectNames(ctx context.Context, pool *pgxpool.Pool, what, sel, where string, into [3]*[]string, args ...any) error {
	for i, table := range positionTables {
		rows, err := pool.Query(ctx, "SELECT "+sel+" FROM "+table+" WHERE "+where+" ORDER BY name", args...)
		var names []string
		if err == nil {
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return fmt.Errorf("pgcoord: check the %s of %s: %w", what, table, err)
		}
		*into[i] = append(*into[i], names...)
	}
	return nil
}
