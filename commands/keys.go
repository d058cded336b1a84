package commands

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Secrets at rest (crypto-shredding). An order's payment token (the
// payment method) and the client secret of a payment that requires the
// customer's action never enter an intent stream and never sit in the log
// in clear:
//
//   - PlaceOrder makes a fresh data key for the order id it is about to
//     record, seals the token under it and writes both to the key table
//     with the intent stream (Keys.Create, the key wrapped by a master key)
//     before IntentRecorded, which it sends within prepWindow.
//   - The order's follow-up copies the sealed token into OrderPlaced
//     (Keys.HeldToken; the request that recorded the intent reads it with
//     Keys.Placing, which makes the row due at the payment deadline in the
//     same round trip), then drops it from the key table and makes the row
//     due at the payment deadline (Keys.Placed; the placing request drops
//     it only if the order has not ended, and so shredded its key, by the
//     time it answers).
//   - Starting an attempt stores its inputs and the digest of its request
//     (PaymentAttemptStarted); every send of the attempt opens the token
//     and rebuilds the request. Attempts stored before held the request
//     bytes, sealed (or, in schema version 1, clear).
//   - A payment that requires the customer's action is recorded with its
//     client secret and next action sealed (PaymentActionRequired), opened
//     only to show them to the order's actor.
//   - The key is deleted once the order can send no more (Keys.Shred): with
//     key units in the unit that appends OrderConfirmed, OrderFailed,
//     OrderCancelRequested, OrderCancelled or OrderNeedsReview (shredIn),
//     else by the request after it; by the process manager after each of
//     them, and after a refused order intent (its order never exists); by
//     the reconciler for every row whose due time passed (Keys.ShredDue:
//     the payment deadline, or the intent's retention for a row whose
//     order was never placed), and within a minute for a row still holding
//     its token whose intent does not name its order or refused it: the
//     order can never be placed
//     (Keys.Unplaced, shredUnplaced: a process stopped between the key and
//     the intent, or before it deleted the key of a lost race).
//     Deleting is idempotent, so every path may repeat it after a crash.
//   - Each delete leaves the key's erasure to record, in the same statement;
//     the unit that ends the order records it in the order's stream
//     (PaymentSecretsShredded) in the same commit, else the reconciler does
//     (erasure.go).
//
// A missing key means the secrets are gone: the order is then paid as if
// it had no token (it fails), and an order that ended replays, renders and
// rebuilds without them.

// Keys is the key table (PostgreSQL table order_keys, implemented by
// package commands/keystore): one data key per order, stored wrapped by a
// master key, plus the order's sealed payment token until the order stream
// carries it. Implementations are safe for concurrent use.
type Keys interface {
	// Create stores dk as orderID's data key with heldToken (the token
	// sealed under dk; nil for none) held for the intent stream intent (""
	// for none), due for shredding at shredAt, unless orderID has a key
	// already. It returns the key stored for orderID.
	Create(ctx context.Context, orderID, intent string, dk *envelope.DataKey, heldToken []byte, shredAt time.Time) (*envelope.DataKey, error)
	// Unplaced returns up to limit keys that still hold a token and were
	// created at or before before (database clock), oldest first: the
	// intent each was held for, by order id. Keys made without an intent
	// are left out.
	Unplaced(ctx context.Context, before time.Time, limit int) (map[string]string, error)
	// Key returns orderID's data key; ok is false when it has none (never
	// created, or shredded).
	Key(ctx context.Context, orderID string) (dk *envelope.DataKey, ok bool, err error)
	// HeldToken returns the sealed token held for orderID (nil once placed);
	// exists is false when orderID has no key.
	HeldToken(ctx context.Context, orderID string) (token []byte, exists bool, err error)
	// Placing makes the key due at deadline if that is earlier and returns
	// the sealed token held for orderID (nil once placed), in one round
	// trip; exists is false when orderID has no key. The request that
	// places an order calls it right before OrderPlaced: the token stays
	// held until Placed, so a crash in between loses nothing.
	Placing(ctx context.Context, orderID string, deadline time.Time) (token []byte, exists bool, err error)
	// Placed drops the held token and makes the key due at deadline if that
	// is earlier. A missing key is a no-op.
	Placed(ctx context.Context, orderID string, deadline time.Time) error
	// Shred deletes orderID's key; idempotent. Every delete (Shred,
	// ShredMany, ShredDue) leaves, in the same statement, the key's erasure
	// to record (Erasures).
	Shred(ctx context.Context, orderID string) error
	// ShredMany deletes the keys of every order in orderIDs in one
	// statement; idempotent.
	ShredMany(ctx context.Context, orderIDs []string) error
	// ShredDue deletes every key due at or before now (database clock) and
	// returns how many.
	ShredDue(ctx context.Context, now time.Time) (int64, error)
	// Erasures returns up to limit deleted keys whose erasure is still to
	// be recorded, the oldest first: when each order's key was deleted
	// (database clock), by order id.
	Erasures(ctx context.Context, limit int) (map[string]time.Time, error)
	// ForgetErasures drops the erasures of orderIDs once recorded and
	// returns the ids whose erasure this call dropped (each one is dropped
	// by one call only); idempotent.
	ForgetErasures(ctx context.Context, orderIDs []string) ([]string, error)
}

// KeyUnits is the event store and the key table in one PostgreSQL database
// (keystore.Units): a unit of work may then write the key table in the same
// transaction as its events. With it (WithKeyUnits), an order's key is
// created in the unit that records the order's intent, its held token
// dropped in the unit that places the order, and the key deleted in the
// unit that ends the order's sends, so none is a statement of its own;
// without it (events on KurrentDB) each is, in the order the Keys methods
// say. Implementations are safe for concurrent use.
type KeyUnits interface {
	// AppendCreatingKey appends as EventStore.AppendMulti does and creates
	// orderID's key as Keys.Create does (nothing when orderID has one), in
	// one transaction: all of it or none. A repeat of a unit that committed
	// before creates no key (one deleted since stays deleted).
	AppendCreatingKey(ctx context.Context, orderID, intent string, dk *envelope.DataKey, heldToken []byte, shredAt time.Time,
		appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error)
	// AppendPlacingKey appends as EventStore.AppendMulti does and marks
	// orderID's key placed as Keys.Placed does, in one transaction; keyed
	// is false, with nothing written, when orderID has no key.
	AppendPlacingKey(ctx context.Context, orderID string, deadline time.Time,
		appends ...eventstore.StreamAppend) (res []eventstore.AppendResult, keyed bool, err error)
	// AppendShreddingKey appends as EventStore.AppendMulti does and deletes
	// orderID's key as Keys.Shred does (its erasure left to record; nothing
	// when orderID has no key), in one transaction; idempotent.
	AppendShreddingKey(ctx context.Context, orderID string, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error)
}

// WithKeyUnits installs the key units: the key table's writes then join the
// event store's units of work. Only for an event store and a key table in
// one database (booking serve on PostgreSQL).
func WithKeyUnits(u KeyUnits) Option { return func(h *core) { h.units = u } }

// keyWrite is a key-table write that joins a unit of work (KeyUnits): the
// creation of an order's key with the intent that names the order, its
// placement with OrderPlaced, or its deletion (shred, the order's id) with
// the event that ends the order's sends (shredIn). The zero value writes
// nothing.
type keyWrite struct {
	create *keyCreate
	place  *keyPlace
	shred  string
	// recorded says that the unit also records shred's erasure
	// (recordErasureIn): the reconciler only drops the row the delete
	// leaves, on its next pass.
	recorded bool
}

// shredIn returns kw with, when the unit's parts end an order's sends (an
// event of domain.EndsSending on the order's stream) and key units are
// installed, that order's key deleted in the unit: the key is gone exactly
// when the order can send no more, in the same commit, and a unit that
// does not end an order deletes nothing. The unit also records the
// erasure (recordErasureIn), so the delete and its record are one commit.
// A kw that writes the key table already is returned as it is (no unit
// creates or places a key and ends the order), as is every kw without key
// units: the order's end then deletes the key after the commit
// (afterOrderEvents). Neither is a key this process deleted already (the
// written set): a unit that repeats an order's end, such as a webhook's
// record of a result the request recorded, finds nothing to delete (no
// key is made again once its order can send no more). Its error is the
// clock's (streams.now), wrapping domain.ErrUnavailable.
func (h *core) shredIn(ctx context.Context, kw keyWrite, parts []unitPart) (keyWrite, error) {
	if h.units == nil || kw != (keyWrite{}) {
		return kw, nil
	}
	for i, p := range parts {
		if cat, id, _ := domain.CategoryOf(p.s.name); cat == domain.CategoryOrder && slices.ContainsFunc(p.evs, endsSendingPending) {
			if h.streams.wrote(keyShredded(id)) {
				return kw, nil
			}
			recorded, err := h.recordErasureIn(ctx, &parts[i], id)
			return keyWrite{shred: id, recorded: recorded}, err
		}
	}
	return kw, nil
}

// endsSendingPending reports whether p is an event after which its order can
// send no more (endsSending).
func endsSendingPending(p pending) bool { return endsSending(p.e) }

// keyCreate is Keys.Create's arguments.
type keyCreate struct {
	orderID, intent string
	dk              *envelope.DataKey
	held            []byte
	shredAt         time.Time
}

// keyPlace is Keys.Placed's arguments.
type keyPlace struct {
	orderID  string
	deadline time.Time
}

// WithKeys installs the key table. A Handler without one refuses orders
// (503) and keeps no secrets.
func WithKeys(k Keys) Option { return func(h *core) { h.keys = k } }

// errNoKeys is the failure of a handler built without a key table.
var errNoKeys = errors.New("commands: no key table configured")

// noKeys is the key table of a Handler built without WithKeys.
type noKeys struct{}

func (noKeys) Create(context.Context, string, string, *envelope.DataKey, []byte, time.Time) (*envelope.DataKey, error) {
	return nil, errNoKeys
}
func (noKeys) Unplaced(context.Context, time.Time, int) (map[string]string, error) { return nil, nil }
func (noKeys) Key(context.Context, string) (*envelope.DataKey, bool, error) {
	return nil, false, errNoKeys
}
func (noKeys) HeldToken(context.Context, string) ([]byte, bool, error) { return nil, false, errNoKeys }
func (noKeys) Placing(context.Context, string, time.Time) ([]byte, bool, error) {
	return nil, false, errNoKeys
}
func (noKeys) Placed(context.Context, string, time.Time) error    { return nil }
func (noKeys) Shred(context.Context, string) error                { return nil }
func (noKeys) ShredMany(context.Context, []string) error          { return nil }
func (noKeys) ShredDue(context.Context, time.Time) (int64, error) { return 0, nil }
func (noKeys) Erasures(context.Context, int) (map[string]time.Time, error) {
	return nil, nil
}
func (noKeys) ForgetErasures(context.Context, []string) ([]string, error) { return nil, nil }

// TokenAAD is the associated data that binds an order's sealed payment
// token to the order: a ciphertext copied to another order does not open.
func TokenAAD(orderID string) []byte { return []byte("booking/order/" + orderID + "/payment_token") }

// RequestAAD is the associated data that binds the sealed request bytes of
// a schema-version-2 attempt n (1-based) to the order and the attempt.
func RequestAAD(orderID string, n int) []byte {
	return []byte("booking/order/" + orderID + "/attempt/" + strconv.Itoa(n) + "/request_body")
}

// heldSecrets is an order's data key and, when this request stored it, the
// payment token sealed under it: what holdToken put in the key table, kept
// by the request that recorded the order's intent so that placing and paying
// the order need not read them back. Never cached beyond the request.
type heldSecrets struct {
	dk     *envelope.DataKey
	sealed []byte // nil when the key table kept another request's token
}

// holdToken makes orderID's data key and holds the token sealed under it in
// the key table for the intent stream intent, due for shredding after the
// intent's retention: called before the order's intent is recorded. It
// returns the key the table holds for orderID, with the sealed token when
// it is this call's.
func (h *core) holdToken(ctx context.Context, orderID, intent, token string, now time.Time) (*heldSecrets, error) {
	sec := sealToken(orderID, token)
	stored, err := h.keys.Create(ctx, orderID, intent, sec.dk, sec.sealed, now.Add(h.cfg.IntentRetention))
	if err != nil {
		return nil, unavailable(err)
	}
	if stored != sec.dk {
		return &heldSecrets{dk: stored}, nil
	}
	return sec, nil
}

// sealToken makes a fresh data key for orderID and seals token under it.
func sealToken(orderID, token string) *heldSecrets {
	dk := envelope.NewDataKey()
	return &heldSecrets{dk: dk, sealed: dk.Seal([]byte(token), TokenAAD(orderID))}
}

// heldKey is the key-table write that holds the token sealed in sec for
// orderID's intent, due after the intent's retention: holdToken's, as part
// of the unit that records the intent (KeyUnits).
func (h *core) heldKey(orderID, intent string, sec *heldSecrets, now time.Time) keyWrite {
	return keyWrite{create: &keyCreate{orderID: orderID, intent: intent, dk: sec.dk, held: sec.sealed, shredAt: now.Add(h.cfg.IntentRetention)}}
}

// sealedTokenOf returns the sealed token to place order c with: the one held
// in the key table, or, for an intent recorded before tokens were held there
// (schema version 1, token in clear on the intent), that token sealed under
// a new key. nil when neither is known (the payment then fails).
func (h *core) sealedTokenOf(ctx context.Context, c domain.OrderClaimed) ([]byte, error) {
	held, exists, err := h.keys.HeldToken(ctx, c.OrderID)
	if err != nil || exists {
		return held, unavailable(err)
	}
	s, err := h.streams.load(ctx, c.Intent)
	if err != nil {
		return nil, err
	}
	in := fold[domain.Intent](s.events)
	token, _ := in.Recorded.Private["payment_token"].(string)
	if token == "" {
		return nil, nil
	}
	now, err := h.streams.now(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := h.holdToken(ctx, c.OrderID, c.Intent, token, now); err != nil {
		return nil, err
	}
	held, _, err = h.keys.HeldToken(ctx, c.OrderID)
	return held, unavailable(err)
}

// errKeyGone means an order's data key is gone: what was sealed under it
// cannot be read any more.
var errKeyGone = errors.New("the order's data key is gone (shredded)")

// orderKey returns o's data key. create makes one (due at the payment
// deadline) for an order placed before secrets were sealed (schema version
// 1), which has none. Returns errKeyGone (wrapped) when there is none.
func (h *core) orderKey(ctx context.Context, o domain.Order, create bool) (*envelope.DataKey, error) {
	dk, ok, err := h.keys.Key(ctx, o.ID)
	if err != nil {
		h.log.ErrorContext(ctx, "an order's data key cannot be read: is every master key that wraps one configured?", "order_id", o.ID, "err", err)
		return nil, unavailable(err)
	}
	if ok {
		return dk, nil
	}
	if create && o.PaymentToken != "" {
		dk, err = h.keys.Create(ctx, o.ID, "", envelope.NewDataKey(), nil, o.PaymentDeadline)
		return dk, unavailable(err)
	}
	return nil, fmt.Errorf("order %s: %w", o.ID, errKeyGone)
}

// legacyBody returns the request bytes of attempt a of o, stored by a
// schema-version-1 (clear) or -2 (sealed under the order's data key; held,
// when not nil, is that key as the placing request holds it) event, checked
// against the attempt's RequestSHA256. Returns errKeyGone (wrapped) when
// the key is gone.
func (h *core) legacyBody(ctx context.Context, o domain.Order, a domain.Attempt, held *envelope.DataKey) ([]byte, error) {
	body := []byte(a.RequestBody)
	if a.RequestBody == "" {
		dk, err := held, error(nil)
		if dk == nil {
			if dk, err = h.orderKey(ctx, o, false); err != nil {
				return nil, err
			}
		}
		if body, err = dk.Open(a.SealedRequestBody, RequestAAD(o.ID, a.N)); err != nil {
			return nil, fmt.Errorf("order %s attempt %d: request bytes: %w", o.ID, a.N, err)
		}
	} else if _, err := h.orderKey(ctx, o, false); err != nil {
		return nil, err // the key's deletion ends the sends, as for sealed bytes
	}
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != a.RequestSHA256 {
		return nil, fmt.Errorf("order %s attempt %d: the request bytes do not match request_sha256", o.ID, a.N)
	}
	return body, nil
}

// shred deletes an order's data key once it can send no more, and returns
// once it is deleted: it joins the batch of keys waiting to be deleted (see
// keyShredder) and sends that batch at once. A failure is returned (and
// logged by the caller): the process manager repeats it, and the reconciler
// deletes every key whose due time passed.
func (h *core) shred(ctx context.Context, orderID string) error {
	if h.streams.wrote(keyShredded(orderID)) {
		return nil // deleted by this process already: a key is never made again once its order can send no more
	}
	b := h.shredder.add(h, orderID, true)
	select {
	case <-b.done:
		return unavailable(b.err)
	case <-ctx.Done():
		return unavailable(ctx.Err())
	}
}

// shredSoon deletes the data key of an order that has ended (confirmed,
// failed or cancelled: it can send nothing, whatever its key) within
// shredDelay, batched with the keys of other orders that ended meanwhile,
// without waiting: the request that ended the order does not pay the
// delete. A no-op when the unit that ended the order deleted the key
// (key units, shredIn). Should this process stop first, the process
// manager's follow-up of the order's end deletes it (at least once), and
// the reconciler's due sweep is the last resort.
func (h *core) shredSoon(orderID string) {
	if h.streams.wrote(keyShredded(orderID)) {
		return
	}
	h.shredder.add(h, orderID, false)
}

// shredDelay bounds how long the key of an order that ended waits in this
// process (shredSoon) before the batched delete that names it is sent.
const shredDelay = 5 * time.Second

// maxShredBatch bounds the orders one batched delete names; a batch that
// reaches it is sent at once.
const maxShredBatch = 1000

// shredTimeout bounds one batched delete.
const shredTimeout = 15 * time.Second

// keyShredder batches the deletes of order keys (crypto-shredding) into one
// statement (Keys.ShredMany) per batch. A batch fills from its first key
// until shredDelay has passed, maxShredBatch keys joined, or a caller that
// waits for its key (shred) sends it at once; keys added while a batch is
// in flight fill the next. Bound: at most maxShredBatch keys per batch, and
// batches in flight, each bounded by shredTimeout; eviction: a key leaves
// when its batch's delete returns (noted in the written set on success).
// Safe for concurrent use; the zero value is ready.
type keyShredder struct {
	mu      sync.Mutex
	filling *shredBatch
	// of maps every key waiting or in flight to its batch.
	of map[string]*shredBatch
}

// shredBatch is one batched delete: done is closed once it returned, with
// err its outcome.
type shredBatch struct {
	ids   []string
	timer *time.Timer
	done  chan struct{}
	err   error
}

// add puts orderID in the batch being filled (unless it is waiting or in
// flight already) and returns its batch. now sends the batch at once when
// orderID is still waiting in it.
func (s *keyShredder) add(h *core, orderID string, now bool) *shredBatch {
	s.mu.Lock()
	if s.of == nil {
		s.of = map[string]*shredBatch{}
	}
	b, ok := s.of[orderID]
	if !ok {
		if s.filling == nil {
			nb := &shredBatch{done: make(chan struct{})}
			nb.timer = time.AfterFunc(shredDelay, func() { s.send(context.Background(), h, nb) })
			s.filling = nb
		}
		b = s.filling
		b.ids = append(b.ids, orderID)
		s.of[orderID] = b
		now = now || len(b.ids) >= maxShredBatch
	}
	s.mu.Unlock()
	if now {
		s.send(context.Background(), h, b)
	}
	return b
}

// FlushShreds sends the key deletes waiting in this process at once (see
// keyShredder) and waits for them, or for ctx's end: call it when the
// process stops, before its pool closes. What it cannot delete is left to
// the process manager and the reconciler's due sweep.
func (h *Workers) FlushShreds(ctx context.Context) {
	s := &h.shredder
	s.mu.Lock()
	var waiting []*shredBatch
	seen := map[*shredBatch]bool{}
	for _, b := range s.of {
		if !seen[b] {
			seen[b] = true
			waiting = append(waiting, b)
		}
	}
	s.mu.Unlock()
	for _, b := range waiting {
		go s.send(ctx, h.core, b) // a no-op for a batch in flight
		select {
		case <-b.done:
		case <-ctx.Done():
			return
		}
	}
}

// send sends b's delete unless it was sent already, within shredTimeout
// and ctx (FlushShreds's budget; a timer's send has none), and records the
// outcome: the deleted keys are noted in the written set before they leave
// the shredder, so a later shred finds them deleted.
func (s *keyShredder) send(ctx context.Context, h *core, b *shredBatch) {
	s.mu.Lock()
	if s.filling != b {
		s.mu.Unlock()
		return // sent already
	}
	s.filling = nil
	b.timer.Stop()
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, shredTimeout)
	err := h.keys.ShredMany(ctx, b.ids)
	cancel()
	if err == nil {
		for _, id := range b.ids {
			h.streams.noteDone(keyShredded(id))
		}
		h.wakeErasures()
	} else {
		h.log.Warn("order keys not deleted yet; the process manager retries, the reconciler deletes them when due",
			"orders", len(b.ids), "err", err)
	}
	s.mu.Lock()
	b.err = err
	for _, id := range b.ids {
		if s.of[id] == b {
			delete(s.of, id)
		}
	}
	s.mu.Unlock()
	close(b.done)
}

// prepWindow bounds the time from the start of an order's prep (its key
// and held token written, holdToken) to the last send of the intent record
// that names the order: past it the request does not send it and answers
// 503 (see intentPrep). Each send is bounded by the event store's append
// timeout besides (5 s by default).
const prepWindow = 10 * time.Second

// unplacedAge is how old (database clock) a key still holding its token
// must be before the reconciler asks whether its order can still be placed
// (shredUnplaced): past prepWindow and the append timeout with room to
// spare, so that no live request can still record the intent that names
// the order.
const unplacedAge = 30 * time.Second

// unplacedBatch bounds the keys one reconciler pass looks at (Keys.Unplaced).
const unplacedBatch = 100

// shredUnplaced deletes the keys held for orders that can never be placed:
// a key still holding its token unplacedAge after it was made, whose
// intent does not name its order — never recorded (the process stopped
// between the key and the intent, or before it deleted the key of a race
// it lost), expired, or recorded for another order — or names it and has
// a refusal. A key whose intent names its order with no refusal is left:
// the order is placed (which drops the token) or refused (which deletes
// the key), by the request or by recovery after its lease. The due sweep
// (ShredDue, the intent's retention) stays the backstop. Failures are
// logged; the next pass retries. Called by each reconciler pass.
func (h *core) shredUnplaced(ctx context.Context) {
	now, err := h.streams.now(ctx)
	var held map[string]string
	if err == nil {
		held, err = h.keys.Unplaced(ctx, now.Add(-unplacedAge), unplacedBatch)
	}
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "keys of orders never placed not looked at yet; next pass retries", "err", err)
		}
		return
	}
	deleted := 0
	for orderID, intent := range held {
		s, err := h.streams.load(ctx, intent)
		if err != nil {
			h.log.WarnContext(ctx, "the intent of a key not placed cannot be read; next pass retries", "order_id", orderID, "err", err)
			continue
		}
		if in := fold[domain.Intent](s.events); in.Exists() && in.Recorded.TargetID == orderID && in.Rejection == nil {
			continue // the order is placed or refused by its request or by recovery
		}
		if err := h.shred(ctx, orderID); err != nil {
			h.log.WarnContext(ctx, "key of an order never placed not deleted yet; next pass retries", "order_id", orderID, "err", err)
			continue
		}
		deleted++
	}
	if deleted > 0 {
		h.log.InfoContext(ctx, "order keys deleted: held for orders never placed", "keys", deleted)
	}
}

// endsOrder reports whether e gives the order a final status other than
// review (domain.EndsOrder: confirmed, failed, cancelled): no step of its
// payment sends again, whether its key exists or not. OrderNeedsReview is
// not counted: after it the key is deleted at once, as after the other
// events of domain.EndsSending, not batched (afterOrderEvents).
func endsOrder(e domain.Event) bool {
	_, review := e.(domain.OrderNeedsReview)
	return domain.EndsOrder(e.EventType()) && !review
}

// endsSending reports whether e means the order can send no more payment
// requests: its data key may be shredded.
func endsSending(e domain.Event) bool { return domain.EndsSending(e.EventType()) }
