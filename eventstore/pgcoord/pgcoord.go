package pgcoord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// Clock is the database clock: PostgreSQL's now() read by a statement of
// its own, the one clock every decision of the service uses whatever the
// event store. Create it with NewClock.
type Clock struct{ pool *pgxpool.Pool }

// NewClock returns the clock of pool's server.
func NewClock(pool *pgxpool.Pool) *Clock { return &Clock{pool: pool} }

// Now returns PostgreSQL's now() (the start of the statement's transaction,
// microsecond precision) in UTC. Returns a wrapped error if the query
// fails. Safe for concurrent use; it implements commands.Clock.
func (c *Clock) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := c.pool.QueryRow(ctx, "SELECT now()").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("pgcoord: database clock: %w", err)
	}
	return t.UTC(), nil
}

// Checkpoints stores named consumer positions in the log (table
// checkpoints, migration 00002): how far a background job such as the
// follow-ups has handled the event log. Create it with NewCheckpoints.
// Read models keep their own checkpoints with their rows (package
// projections), since they must move in the same transaction.
type Checkpoints struct{ pool *pgxpool.Pool }

// NewCheckpoints returns the checkpoints stored in pool's database.
func NewCheckpoints(pool *pgxpool.Pool) *Checkpoints { return &Checkpoints{pool: pool} }

// Load returns the saved position of name, or the zero Position (the start
// of the log) if none was saved. Returns a wrapped error if the query
// fails. Safe for concurrent use; it implements commands.Checkpoints.
func (c *Checkpoints) Load(ctx context.Context, name string) (eventstore.Position, error) {
	var commit, prepare int64
	err := c.pool.QueryRow(ctx, "SELECT commit_tx, prepare FROM checkpoints WHERE name = $1", name).Scan(&commit, &prepare)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Position{}, nil
	}
	if err != nil {
		return eventstore.Position{}, fmt.Errorf("pgcoord: load checkpoint %q: %w", name, err)
	}
	return eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}, nil
}

// Save stores pos as name's position, replacing the saved one (even a
// later one: the caller decides the order). Returns a wrapped error if the
// statement fails. Safe for concurrent use; it implements
// commands.Checkpoints.
func (c *Checkpoints) Save(ctx context.Context, name string, pos eventstore.Position) error {
	_, err := c.pool.Exec(ctx, `INSERT INTO checkpoints (name, commit_tx, prepare) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET commit_tx = excluded.commit_tx, prepare = excluded.prepare, updated_at = now()`,
		name, int64(pos.Commit), int64(pos.Prepare))
	if err != nil {
		return fmt.Errorf("pgcoord: save checkpoint %q at %s: %w", name, pos, err)
	}
	return nil
}
