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

// ErrLeaseHeld is returned by Leases.Acquire when another owner holds the
// lease.
var ErrLeaseHeld = errors.New("pgcoord: lease held by another instance")

// ErrFenced is returned when a Lease was taken over (its fencing token is
// no longer the current one): its holder must stop acting under it and can
// no longer move its checkpoint.
var ErrFenced = errors.New("pgcoord: lease taken over (fenced)")

// Leases are named, fenced leases with a checkpoint, one row each in table
// notify_relays (migration 00004): one active holder across replicas until
// lease_until by the database clock, and a fencing token that every
// acquisition increments and every write checks. Create it with NewLeases;
// it is safe for concurrent use.
type Leases struct{ pool *pgxpool.Pool }

// NewLeases returns the leases stored in pool's database.
func NewLeases(pool *pgxpool.Pool) *Leases { return &Leases{pool: pool} }

const acquireSQL = `
INSERT INTO notify_relays AS r (name, owner, token, lease_until)
VALUES ($1, $2, 1, now() + $3::interval)
ON CONFLICT (name) DO UPDATE
   SET owner = excluded.owner, token = r.token + 1,
       lease_until = excluded.lease_until, acquired_at = now()
 WHERE r.lease_until <= now() OR r.owner = excluded.owner
RETURNING token, commit_tx, prepare`

// Acquire takes the lease name for ttl (by the database clock) if it is
// free (never taken, expired, or released) or already owner's,
// incrementing its fencing token either way. Returns ErrLeaseHeld if
// another owner holds it, or a wrapped error if the statement fails.
func (ls *Leases) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (*Lease, error) {
	l := &Lease{pool: ls.pool, name: name, ttl: ttl}
	var commit, prepare int64
	err := ls.pool.QueryRow(ctx, acquireSQL, name, owner, ttl).Scan(&l.token, &commit, &prepare)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrLeaseHeld
	}
	if err != nil {
		return nil, fmt.Errorf("pgcoord: acquire lease %q: %w", name, err)
	}
	l.checkpoint = eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
	return l, nil
}

// Held returns the Lease name at fencing token token without acquiring it,
// renewing for ttl: a holder that kept its token (across a restart, or a
// test playing a stale holder) acts under it, fenced like any other.
// It does no I/O.
func (ls *Leases) Held(name string, token int64, ttl time.Duration) *Lease {
	return &Lease{pool: ls.pool, name: name, token: token, ttl: ttl}
}

// LeaseState is a lease's row, for tests and operators.
type LeaseState struct {
	Owner      string
	Token      int64
	LeaseUntil time.Time
	Checkpoint eventstore.Position
}

// State returns the holder, token, expiry and checkpoint of lease name.
// Returns a wrapped pgx.ErrNoRows if it was never acquired, or a wrapped
// error if the query fails.
func (ls *Leases) State(ctx context.Context, name string) (LeaseState, error) {
	var (
		s               LeaseState
		commit, prepare int64
	)
	err := ls.pool.QueryRow(ctx,
		`SELECT owner, token, lease_until, commit_tx, prepare FROM notify_relays WHERE name = $1`, name).
		Scan(&s.Owner, &s.Token, &s.LeaseUntil, &commit, &prepare)
	if err != nil {
		return LeaseState{}, fmt.Errorf("pgcoord: load lease %q: %w", name, err)
	}
	s.Checkpoint = eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
	return s, nil
}

// Lease is one acquisition of a lease (Leases.Acquire). Its methods are
// safe for concurrent use.
type Lease struct {
	pool       *pgxpool.Pool
	name       string
	token      int64
	ttl        time.Duration
	checkpoint eventstore.Position
}

// Token returns the acquisition's fencing token (1 for the first ever).
func (l *Lease) Token() int64 { return l.token }

// Checkpoint returns the position saved in the lease's row when it was
// acquired (the zero Position if none was saved).
func (l *Lease) Checkpoint() eventstore.Position { return l.checkpoint }

// Renew extends the lease to now() + its ttl (database clock). Returns
// ErrFenced if its token is no longer current, or a wrapped error if the
// statement fails.
func (l *Lease) Renew(ctx context.Context) error {
	tag, err := l.pool.Exec(ctx,
		`UPDATE notify_relays SET lease_until = now() + $3::interval WHERE name = $1 AND token = $2`,
		l.name, l.token, l.ttl)
	if err != nil {
		return fmt.Errorf("pgcoord: renew lease %q: %w", l.name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrFenced
	}
	return nil
}

// SaveCheckpoint moves the lease's checkpoint forward to pos, only while
// its token is current: the fencing that keeps a stale holder from moving
// it. A pos behind the saved one leaves it unchanged. Returns ErrFenced if
// the token is no longer current, or a wrapped error if the statement
// fails.
func (l *Lease) SaveCheckpoint(ctx context.Context, pos eventstore.Position) error {
	tag, err := l.pool.Exec(ctx, `
UPDATE notify_relays
   SET commit_tx = CASE WHEN (commit_tx, prepare) < ($3::bigint, $4::bigint) THEN $3 ELSE commit_tx END,
       prepare   = CASE WHEN (commit_tx, prepare) < ($3::bigint, $4::bigint) THEN $4 ELSE prepare END,
       checkpointed_at = now()
 WHERE name = $1 AND token = $2`,
		l.name, l.token, int64(pos.Commit), int64(pos.Prepare))
	if err != nil {
		return fmt.Errorf("pgcoord: save lease checkpoint %q at %s: %w", l.name, pos, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrFenced
	}
	return nil
}

// Release ends the lease now, if its token is still current, so a standby
// takes over without waiting for it to expire. Returns a wrapped error if
// the statement fails; releasing a lease already taken over does nothing.
func (l *Lease) Release(ctx context.Context) error {
	_, err := l.pool.Exec(ctx,
		`UPDATE notify_relays SET lease_until = now() WHERE name = $1 AND token = $2`, l.name, l.token)
	if err != nil {
		return fmt.Errorf("pgcoord: release lease %q: %w", l.name, err)
	}
	return nil
}

// Snapshots stores one named snapshot of the log index (table
// logindex_snapshots, migration 00009): an opaque document the index saves
// now and then and loads at start (logindex.Snapshots). Create it with
// NewSnapshots.
type Snapshots struct {
	pool *pgxpool.Pool
	name string
}

// NewSnapshots returns the snapshot named name stored in pool's database.
func NewSnapshots(pool *pgxpool.Pool, name string) *Snapshots {
	return &Snapshots{pool: pool, name: name}
}

// Load returns the saved snapshot, or nil if none was saved. Returns a
// wrapped error if the query fails. Safe for concurrent use.
func (s *Snapshots) Load(ctx context.Context) ([]byte, error) {
	var b []byte
	err := s.pool.QueryRow(ctx, "SELECT snapshot FROM logindex_snapshots WHERE name = $1", s.name).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgcoord: load snapshot %q: %w", s.name, err)
	}
	return b, nil
}

// Save replaces the saved snapshot with b. Returns a wrapped error if the
// statement fails. Safe for concurrent use.
func (s *Snapshots) Save(ctx context.Context, b []byte) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO logindex_snapshots (name, snapshot) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET snapshot = excluded.snapshot, saved_at = now()`, s.name, b)
	if err != nil {
		return fmt.Errorf("pgcoord: save snapshot %q: %w", s.name, err)
	}
	return nil
}
