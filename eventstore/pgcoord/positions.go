package pgcoord

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// The tables that store log positions, as StoredPosition.Table names them:
// the workers' checkpoints (migration 00002), the read models' (00003) and
// the notification relays' (00004). Each row has a name, a position
// (commit_tx, prepare) and the backend that wrote it (00007).
const (
	TableCheckpoints           = "checkpoints"
	TableProjectionCheckpoints = "projection_checkpoints"
	TableRelays                = "notify_relays"
)

// positionTables lists the position tables in the order every function
// here reads them.
var positionTables = [...]string{TableCheckpoints, TableProjectionCheckpoints, TableRelays}

// StoredPosition is one row of a position table: the log position the
// consumer Name (a worker, a read model, a relay) has reached.
type StoredPosition struct {
	// Table is TableCheckpoints, TableProjectionCheckpoints or TableRelays.
	Table string
	// Name is the row's name, unique within its table.
	Name string
	// Position is the row's (commit_tx, prepare).
	Position eventstore.Position
}

// StoredPositions returns every stored position written on backend
// (BackendPostgres or BackendKurrentDB), table by table in the order of
// TableCheckpoints, TableProjectionCheckpoints and TableRelays, each by
// name. Returns a wrapped error naming the table if a query fails.
func StoredPositions(ctx context.Context, pool *pgxpool.Pool, backend string) ([]StoredPosition, error) {
	var out []StoredPosition
	for _, table := range positionTables {
		rows, err := pool.Query(ctx, "SELECT name, commit_tx, prepare FROM "+table+" WHERE backend = $1 ORDER BY name", backend)
		var list []StoredPosition
		if err == nil {
			list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredPosition, error) {
				p := StoredPosition{Table: table}
				var commit, prepare int64
				err := r.Scan(&p.Name, &commit, &prepare)
				p.Position = eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
				return p, err
			})
		}
		if err != nil {
			return nil, fmt.Errorf("pgcoord: read the positions of %s: %w", table, err)
		}
		out = append(out, list...)
	}
	return out, nil
}

// MovePositions sets the position of each row moves names (Table, Name) to
// its Position, in one transaction: every row moves or none does. The
// rows are stamped with the backend of pool's sessions (SetBackend), and a
// relay's lease is left as it is. Returns an error naming the row if its
// table is not a position table or the row does not exist, or a wrapped
// error if a statement fails.
func MovePositions(ctx context.Context, pool *pgxpool.Pool, moves []StoredPosition) error {
	for _, m := range moves {
		if !slices.Contains(positionTables[:], m.Table) {
			return fmt.Errorf("pgcoord: move %s %q: not a position table", m.Table, m.Name)
		}
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, m := range moves {
			tag, err := tx.Exec(ctx, "UPDATE "+m.Table+" SET commit_tx = $2, prepare = $3 WHERE name = $1",
				m.Name, int64(m.Position.Commit), int64(m.Position.Prepare))
			if err != nil {
				return fmt.Errorf("%s %q to %s: %w", m.Table, m.Name, m.Position, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%s %q to %s: no such row", m.Table, m.Name, m.Position)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgcoord: move positions: %w", err)
	}
	return nil
}

// HeldUntil returns the latest expiry (UTC) of the leases still held by
// the database clock (lease_until > now()) and true, or false if no lease
// is held: while a relay runs, it holds its lease. Returns a wrapped error
// if the query fails.
func (ls *Leases) HeldUntil(ctx context.Context) (time.Time, bool, error) {
	var until *time.Time
	err := ls.pool.QueryRow(ctx, `SELECT max(lease_until) FROM notify_relays WHERE lease_until > now()`).Scan(&until)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("pgcoord: read the leases held: %w", err)
	}
	if until == nil {
		return time.Time{}, false, nil
	}
	return until.UTC(), true, nil
}

// DeleteSnapshots deletes every saved snapshot of the log index (table
// logindex_snapshots), so the index reads the log from its start at its
// next load: a snapshot names positions of the log it was built from,
// which mean nothing in another one. Returns a wrapped error if the
// statement fails.
func DeleteSnapshots(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `DELETE FROM logindex_snapshots`); err != nil {
		return fmt.Errorf("pgcoord: delete the log index snapshots: %w", err)
	}
	return nil
}
