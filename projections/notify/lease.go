package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// ErrLeaseHeld is returned when another relay instance holds the lease.
var ErrLeaseHeld = errors.New("notify: relay lease held by another instance")

// ErrFenced is returned when this instance's lease was taken over (its
// fencing token is no longer the current one): it must stop publishing and
// can no longer move the checkpoint.
var ErrFenced = errors.New("notify: relay lease taken over (fenced)")

// lease is one acquisition of a relay's lease in table notify_relays.
type lease struct {
	pool  *pgxpool.Pool
	name  string
	owner string
	token int64
	ttl   time.Duration

	// checkpoint is the position saved in the row at acquisition.
	checkpoint eventstore.Position
}

const acquireSQL = `
INSERT INTO notify_relays AS r (name, owner, token, lease_until)
VALUES ($1, $2, 1, now() + $3::interval)
ON CONFLICT (name) DO UPDATE
   SET owner = excluded.owner, token = r.token + 1,
       lease_until = excluded.lease_until, acquired_at = now()
 WHERE r.lease_until <= now() OR r.owner = excluded.owner
RETURNING token, commit_tx, prepare`

// acquireLease takes the lease of name for ttl if it is free (never taken,
// expired by the database clock, or released) or already owner's,
// incrementing its fencing token either way. Returns ErrLeaseHeld if another
// instance holds it.
func acquireLease(ctx context.Context, pool *pgxpool.Pool, name, owner string, ttl time.Duration) (*lease, error) {
	l := &lease{pool: pool, name: name, owner: owner, ttl: ttl}
	var commit, prepare int64
	err := pool.QueryRow(ctx, acquireSQL, name, owner, ttl).Scan(&l.token, &commit, &prepare)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrLeaseHeld
	}
	if err != nil {
		return nil, fmt.Errorf("notify: acquire relay lease %q: %w", name, err)
	}
	l.checkpoint = eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
	return l, nil
}

// renew extends the lease to now() + ttl (database clock). Returns ErrFenced
// if the token is no longer current.
func (l *lease) renew(ctx context.Context) error {
	tag, err := l.pool.Exec(ctx,
		`UPDATE notify_relays SET lease_until = now() + $3::interval WHERE name = $1 AND token = $2`,
		l.name, l.token, l.ttl)
	if err != nil {
		return fmt.Errorf("notify: renew relay lease %q: %w", l.name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrFenced
	}
	return nil
}

// saveCheckpoint moves the checkpoint forward to pos, only while l's token is
// current: the fencing that keeps a stale relay from moving it. A pos behind
// the saved one leaves it unchanged. Returns ErrFenced if the token is no
// longer current.
func (l *lease) saveCheckpoint(ctx context.Context, pos eventstore.Position) error {
	tag, err := l.pool.Exec(ctx, `
UPDATE notify_relays
   SET commit_tx = CASE WHEN (commit_tx, prepare) < ($3::bigint, $4::bigint) THEN $3 ELSE commit_tx END,
       prepare   = CASE WHEN (commit_tx, prepare) < ($3::bigint, $4::bigint) THEN $4 ELSE prepare END,
       checkpointed_at = now()
 WHERE name = $1 AND token = $2`,
		l.name, l.token, int64(pos.Commit), int64(pos.Prepare))
	if err != nil {
		return fmt.Errorf("notify: save relay checkpoint %q at %s: %w", l.name, pos, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrFenced
	}
	return nil
}

// release ends the lease now, if l's token is still current, so a standby
// takes over without waiting for it to expire.
func (l *lease) release(ctx context.Context) error {
	_, err := l.pool.Exec(ctx,
		`UPDATE notify_relays SET lease_until = now() WHERE name = $1 AND token = $2`, l.name, l.token)
	if err != nil {
		return fmt.Errorf("notify: release relay lease %q: %w", l.name, err)
	}
	return nil
}

// RelayState is a relay's row in notify_relays, for tests and operators.
type RelayState struct {
	Owner      string
	Token      int64
	LeaseUntil time.Time
	Checkpoint eventstore.Position
}

// LoadRelayState returns the lease and checkpoint of relay name, or
// pgx.ErrNoRows (wrapped) if it never ran.
func LoadRelayState(ctx context.Context, pool *pgxpool.Pool, name string) (RelayState, error) {
	var (
		s               RelayState
		commit, prepare int64
	)
	err := pool.QueryRow(ctx,
		`SELECT owner, token, lease_until, commit_tx, prepare FROM notify_relays WHERE name = $1`, name).
		Scan(&s.Owner, &s.Token, &s.LeaseUntil, &commit, &prepare)
	if err != nil {
		return RelayState{}, fmt.Errorf("notify: load relay %q: %w", name, err)
	}
	s.Checkpoint = eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
	return s, nil
}
