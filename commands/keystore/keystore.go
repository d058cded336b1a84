// Package keystore is the PostgreSQL key table of crypto-shredding (table
// order_keys): each order's data key, wrapped by the master keys of an
// envelope.Keyring, and the order's sealed payment token until the order
// stream carries it. It implements commands.Keys with pgx; package commands
// decides when rows are written and deleted.
package keystore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
)

// shredBatch bounds the rows one ShredDue statement deletes.
const shredBatch = 1000

// Store is the order_keys table. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	ring *envelope.Keyring
}

// New returns the key table on pool, wrapping and unwrapping with ring.
func New(pool *pgxpool.Pool, ring *envelope.Keyring) *Store { return &Store{pool: pool, ring: ring} }

// wrapAAD binds a wrapped data key to its order: a wrapped key copied to
// another order's row does not unwrap.
func wrapAAD(orderID string) []byte { return []byte("booking/order-key/" + orderID) }

// Create stores dk, wrapped by the keyring's primary master key, as the data
// key of orderID with heldToken (the payment token sealed under dk; nil for
// none), the intent stream it is held for (intent; "" for none) and shredAt,
// unless orderID already has a key. It returns the data key stored for
// orderID: dk, or the one stored before (whose held token is the one kept).
// Errors are the database's.
func (s *Store) Create(ctx context.Context, orderID, intent string, dk *envelope.DataKey, heldToken []byte, shredAt time.Time) (*envelope.DataKey, error) {
	w := s.ring.Wrap(dk, wrapAAD(orderID))
	tag, err := s.pool.Exec(ctx, `INSERT INTO order_keys (order_id, intent, master_key_id, wrapped_key, held_token, shred_at)
		VALUES ($1, nullif($2, ''), $3, $4, $5, $6) ON CONFLICT (order_id) DO NOTHING`, orderID, intent, w.KeyID, w.Ciphertext, heldToken, shredAt)
	if err != nil {
		return nil, fmt.Errorf("keystore: create the key of order %s: %w", orderID, err)
	}
	if tag.RowsAffected() == 1 {
		return dk, nil
	}
	stored, ok, err := s.Key(ctx, orderID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("keystore: the key of order %s was shredded while it was being created", orderID)
	}
	return stored, nil
}

// Key returns the data key of orderID; ok is false when the order has none
// (never created, or shredded). Returns an error wrapping
// envelope.ErrUnknownMasterKey when the master key that wrapped it is not
// configured, envelope.ErrDecrypt when it does not unwrap, or the database's
// error.
func (s *Store) Key(ctx context.Context, orderID string) (*envelope.DataKey, bool, error) {
	var w envelope.Wrapped
	err := s.pool.QueryRow(ctx, `SELECT master_key_id, wrapped_key FROM order_keys WHERE order_id = $1`, orderID).Scan(&w.KeyID, &w.Ciphertext)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("keystore: read the key of order %s: %w", orderID, err)
	}
	dk, err := s.ring.Unwrap(w, wrapAAD(orderID))
	if err != nil {
		return nil, false, fmt.Errorf("keystore: unwrap the key of order %s: %w", orderID, err)
	}
	return dk, true, nil
}

// HeldToken returns the sealed payment token held for orderID (nil once the
// order stream carries it); exists is false when the order has no key row.
func (s *Store) HeldToken(ctx context.Context, orderID string) (token []byte, exists bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT held_token FROM order_keys WHERE order_id = $1`, orderID).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("keystore: read the held token of order %s: %w", orderID, err)
	}
	return token, true, nil
}

// Unplaced returns up to limit keys that still hold a token and were
// created at or before before (the caller's reading of the database
// clock), oldest first: the intent stream each was held for, by order id.
// Keys made without an intent are left out. Errors are the database's.
func (s *Store) Unplaced(ctx context.Context, before time.Time, limit int) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT order_id::text, intent FROM order_keys
		WHERE held_token IS NOT NULL AND created_at <= $1 AND intent IS NOT NULL ORDER BY created_at LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("keystore: keys of orders not placed: %w", err)
	}
	out := map[string]string{}
	var id, intent string
	if _, err := pgx.ForEachRow(rows, []any{&id, &intent}, func() error { out[id] = intent; return nil }); err != nil {
		return nil, fmt.Errorf("keystore: keys of orders not placed: %w", err)
	}
	return out, nil
}

// Placing makes the row of orderID due for shredding at deadline (the
// payment deadline) unless it was due earlier, and returns the sealed token
// it holds (nil once placed), in one statement; exists is false when the
// order has no key row. Errors are the database's.
func (s *Store) Placing(ctx context.Context, orderID string, deadline time.Time) (token []byte, exists bool, err error) {
	err = s.pool.QueryRow(ctx, `UPDATE order_keys SET shred_at = least(shred_at, $2) WHERE order_id = $1 RETURNING held_token`,
		orderID, deadline).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("keystore: mark order %s placing: %w", orderID, err)
	}
	return token, true, nil
}

// Placed records that the order stream carries the token now: the held
// token is dropped and the row is due for shredding at deadline (the
// payment deadline) unless it was due earlier. A missing row is a no-op.
func (s *Store) Placed(ctx context.Context, orderID string, deadline time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE order_keys SET held_token = NULL, shred_at = least(shred_at, $2) WHERE order_id = $1`, orderID, deadline)
	if err != nil {
		return fmt.Errorf("keystore: mark order %s placed: %w", orderID, err)
	}
	return nil
}

// Shred deletes the data key of orderID, making everything sealed under it
// unreadable, and leaves its erasure to record (Erasures) in the same
// statement. It is idempotent.
func (s *Store) Shred(ctx context.Context, orderID string) error {
	if err := s.ShredMany(ctx, []string{orderID}); err != nil {
		return fmt.Errorf("keystore: shred the key of order %s: %w", orderID, errors.Unwrap(err))
	}
	return nil
}

// shredSQL deletes the keys its subquery $1 names and, in the same
// statement, records each deleted key's erasure (order_key_erasures) to be
// appended to its order's stream: never a key gone without its erasure
// pending, never an erasure before its key is gone.
const shredSQL = `WITH gone AS (DELETE FROM order_keys WHERE order_id IN (%s) RETURNING order_id)
	INSERT INTO order_key_erasures (order_id) SELECT order_id FROM gone ON CONFLICT (order_id) DO NOTHING`

// shredOneSQL is shredSQL for the one order id $1 (a UUID).
var shredOneSQL = fmt.Sprintf(shredSQL, `$1::text::uuid`)

// ShredMany deletes the data keys of every order in orderIDs (UUIDs) in one
// statement, making everything sealed under them unreadable, and leaves
// their erasures to record (Erasures). It is idempotent; no ids is a no-op.
// Errors are the database's.
func (s *Store) ShredMany(ctx context.Context, orderIDs []string) error {
	if len(orderIDs) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(shredSQL, `SELECT unnest($1::text[]::uuid[])`), orderIDs); err != nil {
		return fmt.Errorf("keystore: shred the keys of %d orders: %w", len(orderIDs), err)
	}
	return nil
}

// ShredDue deletes every data key whose shred_at is at or before now (the
// caller's reading of the database clock), in batches, leaving their
// erasures to record (Erasures), and returns how many it deleted. It stops
// at ctx's end or the first error.
func (s *Store) ShredDue(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	q := fmt.Sprintf(shredSQL, `SELECT order_id FROM order_keys WHERE shred_at <= $1 LIMIT $2`)
	for {
		tag, err := s.pool.Exec(ctx, q, now, shredBatch)
		if err != nil {
			return n, fmt.Errorf("keystore: shred due keys: %w", err)
		}
		n += tag.RowsAffected()
		if tag.RowsAffected() < shredBatch {
			return n, nil
		}
	}
}

// Erasures returns up to limit deleted keys whose erasure is still to be
// recorded, the oldest first: when each order's key was deleted (database
// clock, UTC), by order id. Errors are the database's.
func (s *Store) Erasures(ctx context.Context, limit int) (map[string]time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT order_id::text, shredded_at FROM order_key_erasures ORDER BY shredded_at, order_id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("keystore: erasures to record: %w", err)
	}
	out := map[string]time.Time{}
	var id string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		out[id] = at.UTC()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("keystore: erasures to record: %w", err)
	}
	return out, nil
}

// ForgetErasures drops the erasures of orderIDs (UUIDs), recorded in their
// order streams, in one statement, and returns the ids whose erasure it
// dropped (a row is deleted by one statement only, so each id is returned
// by one call). It is idempotent; no ids is a no-op. Errors are the
// database's.
func (s *Store) ForgetErasures(ctx context.Context, orderIDs []string) ([]string, error) {
	if len(orderIDs) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `DELETE FROM order_key_erasures WHERE order_id = ANY($1::text[]::uuid[]) RETURNING order_id::text`, orderIDs)
	if err == nil {
		var dropped []string
		if dropped, err = pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
			return dropped, nil
		}
	}
	return nil, fmt.Errorf("keystore: forget %d recorded erasures: %w", len(orderIDs), err)
}

// MasterKeyUse returns how many data keys each master key id wraps.
func (s *Store) MasterKeyUse(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT master_key_id, count(*) FROM order_keys GROUP BY master_key_id`)
	if err != nil {
		return nil, fmt.Errorf("keystore: count keys by master key: %w", err)
	}
	out := map[string]int64{}
	var id string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("keystore: count keys by master key: %w", err)
	}
	return out, nil
}

// CheckMasterKeys returns an error naming every master key id that wraps a
// stored data key but is missing from the keyring: those orders could not
// be paid. Run it at start.
func (s *Store) CheckMasterKeys(ctx context.Context) error {
	use, err := s.MasterKeyUse(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for id, n := range use {
		if !s.ring.Has(id) {
			missing = append(missing, fmt.Sprintf("%s (%d order keys)", id, n))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("master keys %v wrap stored order keys but are not configured: keep them listed until no order key uses them", missing)
	}
	return nil
}

// Units is the key table and the event store in one PostgreSQL database: a
// unit of work of the event store (pgstore.Store.AppendMultiWith) may then
// write the key table in the same transaction. It implements
// commands.KeyUnits.
type Units struct {
	Events *pgstore.Store
	Keys   *Store
}

// keyGoneState is the SQLSTATE order_key_placed raises for an order without
// a key (migration 00014).
const keyGoneState = "KY404"

// AppendCreatingKey appends as AppendMulti does and stores dk as orderID's
// data key as Create does (held for intent, holding heldToken, due at
// shredAt; nothing when orderID has a key), in one transaction: the key is
// durable with the events, or neither is written. A repeat of a unit that
// committed before (its events stored by an earlier transaction) creates
// no key, so a repeat never makes again a key deleted since. Errors are
// AppendMultiWith's.
func (u Units) AppendCreatingKey(ctx context.Context, orderID, intent string, dk *envelope.DataKey, heldToken []byte, shredAt time.Time,
	appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	w := u.Keys.ring.Wrap(dk, wrapAAD(orderID))
	ids := eventIDs(appends)
	return u.Events.AppendMultiWith(ctx, func(b *pgx.Batch) {
		b.Queue(createWithUnitSQL, orderID, intent, w.KeyID, w.Ciphertext, heldToken, shredAt, ids)
	}, appends...)
}

// createWithUnitSQL creates an order's key when the unit's append wrote its
// events in this transaction (eventstore_wrote, migration 00015), and
// only then: a repeat of a unit that committed before creates nothing, so
// a key deleted since (the order ended in between) is not made again.
const createWithUnitSQL = `INSERT INTO order_keys (order_id, intent, master_key_id, wrapped_key, held_token, shred_at)
	SELECT $1::uuid, nullif($2::text, ''), $3::text, $4::bytea, $5::bytea, $6::timestamptz
	WHERE eventstore_wrote($7::text[]::uuid[])
	ON CONFLICT (order_id) DO NOTHING`

// eventIDs returns the ids of every event of appends.
func eventIDs(appends []eventstore.StreamAppend) []string {
	var ids []string
	for _, a := range appends {
		for _, e := range a.Events {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// AppendPlacingKey appends as AppendMulti does and marks orderID's key
// placed as Placed does (the held token dropped, due at deadline unless
// due earlier), in one transaction. keyed is false, with nothing written
// and no error, when orderID has no key. Other errors are
// AppendMultiWith's.
func (u Units) AppendPlacingKey(ctx context.Context, orderID string, deadline time.Time,
	appends ...eventstore.StreamAppend) (res []eventstore.AppendResult, keyed bool, err error) {
	res, err = u.Events.AppendMultiWith(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT order_key_placed($1, $2)`, orderID, deadline)
	}, appends...)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == keyGoneState {
		return nil, false, nil
	}
	return res, err == nil, err
}

// AppendShreddingKey appends as AppendMulti does and deletes orderID's data
// key as Shred does (its erasure left to record, Erasures; nothing when
// orderID has no key), in one transaction: the key is gone with the events
// that end the order, or neither is written. Repeating the call deletes and
// records nothing more. Errors are AppendMultiWith's.
func (u Units) AppendShreddingKey(ctx context.Context, orderID string, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	return u.Events.AppendMultiWith(ctx, func(b *pgx.Batch) {
		b.Queue(shredOneSQL, orderID)
	}, appends...)
}
