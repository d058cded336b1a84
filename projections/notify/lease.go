package notify

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgcoord"
)

// ErrLeaseHeld is returned when another relay instance holds the lease
// (pgcoord.ErrLeaseHeld).
var ErrLeaseHeld = pgcoord.ErrLeaseHeld

// ErrFenced is returned when this instance's lease was taken over (its
// fencing token is no longer the current one): it must stop publishing and
// can no longer move the checkpoint (pgcoord.ErrFenced).
var ErrFenced = pgcoord.ErrFenced

// lease is one acquisition of a relay's lease; its row in notify_relays
// also holds the relay's checkpoint. The SQL lives in pgcoord.Leases.
type lease struct{ *pgcoord.Lease }

// acquireLease takes the lease of name for ttl (see pgcoord.Leases.Acquire).
// Returns ErrLeaseHeld if another instance holds it.
func acquireLease(ctx context.Context, pool *pgxpool.Pool, name, owner string, ttl time.Duration) (*lease, error) {
	l, err := pgcoord.NewLeases(pool).Acquire(ctx, name, owner, ttl)
	if err != nil {
		return nil, err
	}
	return &lease{l}, nil
}

func (l *lease) renew(ctx context.Context) error { return l.Renew(ctx) }

func (l *lease) saveCheckpoint(ctx context.Context, pos eventstore.Position) error {
	return l.SaveCheckpoint(ctx, pos)
}

func (l *lease) release(ctx context.Context) error { return l.Release(ctx) }

// RelayState is a relay's row in notify_relays, for tests and operators.
type RelayState = pgcoord.LeaseState

// LoadRelayState returns the lease and checkpoint of relay name, or
// pgx.ErrNoRows (wrapped) if it never ran.
func LoadRelayState(ctx context.Context, pool *pgxpool.Pool, name string) (RelayState, error) {
	return pgcoord.NewLeases(pool).State(ctx, name)
}
