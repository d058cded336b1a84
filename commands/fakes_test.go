package commands

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/memstore"
	"github.com/retrysafe/booking/provider"
)

// Hand-written fakes of the interfaces commands declares: the in-memory
// event store of package memstore (run through the eventstore conformance
// suite like every backend), a settable clock, and a recording payment
// provider. Safe for concurrent use.

// memStore is the in-memory EventStore the tests use.
type memStore = memstore.Store

func newMemStore() *memStore { return memstore.New() }

// fakeClock is a settable Clock, standing in for the database clock. It
// counts its moves (movableClock), so a Handler's clock reading taken
// before a move is not used after it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	moves uint64
	n     int // reads
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

// Now implements Clock.
func (c *fakeClock) Now(context.Context) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.now, nil
}

// Advance moves the clock by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.moves++
}

// Moves implements movableClock.
func (c *fakeClock) Moves() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.moves
}

// reads returns how many times Now was called.
func (c *fakeClock) reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// fakeCall is one recorded provider call.
type fakeCall struct {
	Op  string // "charge", "charge_by_key", "search", "get", "refund", "list_refunds"
	Key string // idempotency key (charge, refund, charge_by_key) or charge id
}

// chargeFault scripts the answer to one CreateChargeRaw call.
type chargeFault int

const (
	faultNone          chargeFault = iota
	faultInUse                     // 409 idempotency_key_in_use, nothing executed
	faultUnknownCommit             // the charge commits, the answer is lost
	faultUnknownBefore             // no answer, nothing committed (5xx before commit)
	faultUnavailable               // never sent
	faultIdempotency               // 400 idempotency_error
	faultInvalid                   // 400 invalid_request_error (an unusable token)
	faultDecline                   // 402: a failed charge is recorded
)

// fakePayments is a recording provider with Stripe-like idempotency. Each
// CreateChargeRaw takes the next scripted fault (faultNone when none is
// left). Keys can be forgotten (the provider's window passing) while charges
// stay searchable by metadata.
type fakePayments struct {
	mu      sync.Mutex
	calls   []fakeCall
	faults  []chargeFault
	charges []*provider.Charge
	byKey   map[string]string // charge key → charge id (forgotten by forgetKeys)
	refunds []provider.Refund
	refKeys map[string]string // refund key → refund id
	// refund404 answers the next n refunds 404 resource_missing whether
	// the charge exists or not (a wrong route, say).
	refund404 int
	// onCharge, when set, runs (without the lock) at the start of every
	// CreateChargeRaw; tests use it to pause or interleave.
	onCharge func(key string)
}

func newFakePayments(faults ...chargeFault) *fakePayments {
	return &fakePayments{faults: faults, byKey: map[string]string{}, refKeys: map[string]string{}}
}

func (p *fakePayments) record(op, key string) {
	p.calls = append(p.calls, fakeCall{Op: op, Key: key})
}

func fakeID(prefix string) string { return prefix + rand.Text()[:12] }

func apiError(sentinel error, e provider.APIError) error { return fmt.Errorf("%w: %w", sentinel, &e) }

// CreateChargeRaw implements Payments.
func (p *fakePayments) CreateChargeRaw(ctx context.Context, key string, body []byte) (provider.Charge, error) {
	if hook := p.onCharge; hook != nil {
		hook(key)
	}
	if err := ctx.Err(); err != nil {
		return provider.Charge{}, fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	req, err := provider.ParseChargeRequest(body)
	if err != nil {
		return provider.Charge{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("charge", key)
	fault := faultNone
	if len(p.faults) > 0 {
		fault, p.faults = p.faults[0], p.faults[1:]
	}
	switch fault {
	case faultInUse:
		return provider.Charge{}, apiError(provider.ErrKeyInUse, provider.APIError{StatusCode: 409, Type: provider.TypeIdempotencyKeyInUse})
	case faultUnknownBefore:
		return provider.Charge{}, fmt.Errorf("%w: 500", provider.ErrOutcomeUnknown)
	case faultUnavailable:
		return provider.Charge{}, fmt.Errorf("%w: connection refused", provider.ErrUnavailable)
	case faultIdempotency:
		return provider.Charge{}, apiError(provider.ErrIdempotency, provider.APIError{StatusCode: 400, Type: provider.TypeIdempotencyError})
	case faultInvalid:
		return provider.Charge{}, apiError(provider.ErrInvalidRequest, provider.APIError{StatusCode: 400, Type: provider.TypeInvalidRequestError,
			Code: provider.CodeResourceMissing, Param: "token"})
	}
	if id, ok := p.byKey[key]; ok { // replay
		ch := p.chargeLocked(id)
		if ch.Status == provider.StatusFailed {
			return provider.Charge{}, apiError(provider.ErrDeclined, provider.APIError{StatusCode: 402, Charge: &ch})
		}
		ch.Replayed = true
		return ch, nil
	}
	ch := &provider.Charge{ID: fakeID("ch_"), Object: "charge", Amount: req.Amount, Currency: req.Currency, Status: provider.StatusSucceeded,
		IdempotencyKey: key, Metadata: req.Metadata}
	if fault == faultDecline {
		ch.Status, ch.FailureCode, ch.FailureMessage = provider.StatusFailed, provider.CodeCardDeclined, "declined"
	}
	p.charges = append(p.charges, ch)
	p.byKey[key] = ch.ID
	switch {
	case fault == faultUnknownCommit:
		return provider.Charge{}, fmt.Errorf("%w: connection reset", provider.ErrOutcomeUnknown)
	case ch.Status == provider.StatusFailed:
		c := *ch
		return provider.Charge{}, apiError(provider.ErrDeclined, provider.APIError{StatusCode: 402, Type: provider.TypeCardError, Charge: &c})
	}
	return *ch, nil
}

func (p *fakePayments) chargeLocked(id string) provider.Charge {
	for _, c := range p.charges {
		if c.ID == id {
			return *c
		}
	}
	return provider.Charge{}
}

// addCharge records a charge made outside the service's sends (a stray
// charge of order orderID, attempt n) and returns it.
func (p *fakePayments) addCharge(orderID string, n int, amount domain.Money) provider.Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := &provider.Charge{ID: fakeID("ch_"), Object: "charge", Amount: amount.Amount, Currency: amount.Currency, Status: provider.StatusSucceeded,
		IdempotencyKey: fakeID("stray-"), Metadata: map[string]string{provider.MetadataOrderID: orderID, provider.MetadataAttempt: strconv.Itoa(n)}}
	p.charges = append(p.charges, ch)
	return *ch
}

// ChargeByKey implements Payments.
func (p *fakePayments) ChargeByKey(_ context.Context, key string) (provider.Charge, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("charge_by_key", key)
	id, ok := p.byKey[key]
	if !ok {
		return provider.Charge{}, false, nil
	}
	return p.chargeLocked(id), true, nil
}

// SearchCharges implements Payments.
func (p *fakePayments) SearchCharges(_ context.Context, orderID string, attempt int) ([]provider.Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("search", orderID+"/"+strconv.Itoa(attempt))
	var out []provider.Charge
	for _, c := range p.charges {
		if c.Metadata[provider.MetadataOrderID] == orderID && (attempt == 0 || c.Attempt() == attempt) {
			out = append(out, *c)
		}
	}
	return out, nil
}

// GetCharge implements Payments.
func (p *fakePayments) GetCharge(_ context.Context, id string) (provider.Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("get", id)
	ch := p.chargeLocked(id)
	if ch.ID == "" {
		return provider.Charge{}, apiError(provider.ErrNotFound, provider.APIError{StatusCode: 404, Code: provider.CodeResourceMissing})
	}
	return ch, nil
}

// Refund implements Payments: idempotent by key; a charge with nothing left
// to refund is refused with charge_already_refunded.
func (p *fakePayments) Refund(_ context.Context, key, chargeID string, amount int64) (provider.Refund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("refund", key)
	if p.refund404 > 0 {
		p.refund404--
		return provider.Refund{}, apiError(provider.ErrNotFound, provider.APIError{StatusCode: 404, Code: provider.CodeResourceMissing})
	}
	if id, ok := p.refKeys[key]; ok {
		for _, r := range p.refunds {
			if r.ID == id {
				r.Replayed = true
				return r, nil
			}
		}
	}
	var ch *provider.Charge
	for _, c := range p.charges {
		if c.ID == chargeID {
			ch = c
		}
	}
	if ch == nil {
		return provider.Refund{}, apiError(provider.ErrNotFound, provider.APIError{StatusCode: 404, Code: provider.CodeResourceMissing,
			Message: "No such charge."})
	}
	left := ch.Amount - ch.RefundedAmount
	if amount == 0 {
		amount = left
	}
	if left == 0 {
		return provider.Refund{}, apiError(provider.ErrInvalidRequest, provider.APIError{StatusCode: 400, Code: provider.CodeChargeAlreadyRefunded})
	}
	ch.RefundedAmount += amount
	ch.Refunded = ch.RefundedAmount == ch.Amount
	r := provider.Refund{ID: fakeID("re_"), Object: "refund", Amount: amount, Currency: ch.Currency, Charge: chargeID,
		Status: provider.StatusSucceeded, IdempotencyKey: key}
	p.refunds = append(p.refunds, r)
	p.refKeys[key] = r.ID
	return r, nil
}

// ListRefunds implements Payments.
func (p *fakePayments) ListRefunds(_ context.Context, chargeID string) ([]provider.Refund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("list_refunds", chargeID)
	var out []provider.Refund
	for _, r := range p.refunds {
		if r.Charge == chargeID {
			out = append(out, r)
		}
	}
	return out, nil
}

// forgetKeys forgets every idempotency key, as the provider does once its
// window has passed; charges stay searchable by metadata.
func (p *fakePayments) forgetKeys() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.byKey, p.refKeys = map[string]string{}, map[string]string{}
}

// forgetCharges forgets every charge and refund, as a provider that lost
// its state would.
func (p *fakePayments) forgetCharges() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.charges, p.refunds = nil, nil
	p.byKey, p.refKeys = map[string]string{}, map[string]string{}
}

// net returns the minor units charged (succeeded charges) net of refunds,
// and the number of succeeded charges.
func (p *fakePayments) net() (int64, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	var count int
	for _, c := range p.charges {
		if c.Status == provider.StatusSucceeded {
			n += c.Amount - c.RefundedAmount
			count++
		}
	}
	return n, count
}

// ops returns the recorded calls' operations, in order.
func (p *fakePayments) ops() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.calls))
	for i, c := range p.calls {
		out[i] = c.Op
	}
	return out
}

// count returns how many calls of op were made.
func (p *fakePayments) count(op string) int {
	n := 0
	for _, o := range p.ops() {
		if o == op {
			n++
		}
	}
	return n
}

// recordingMetrics is a Metrics that counts reconciliations by result.
type recordingMetrics struct {
	nopMetrics
	mu        sync.Mutex
	results   map[string]int
	redundant int
}

func newRecordingMetrics() *recordingMetrics { return &recordingMetrics{results: map[string]int{}} }

func (m *recordingMetrics) Reconciliation(result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.results[result]++
}

// UnknownAppend counts under "unknown_append:"+result.
func (m *recordingMetrics) UnknownAppend(result string) { m.Reconciliation("unknown_append:" + result) }

func (m *recordingMetrics) RedundantEffect() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.redundant++
}

func (m *recordingMetrics) get(result string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[result]
}

// newTestRegistry returns the registry of every domain event type, as the
// service builds it.
func newTestRegistry() *eventstore.Registry { return NewRegistry() }

// mustAppend appends events with fresh ids to stream at Any, or fails tb.
func mustAppend(tb testing.TB, s EventStore, stream string, events ...domain.Event) {
	tb.Helper()
	data := make([]eventstore.EventData, len(events))
	for i, e := range events {
		d, err := eventstore.Encode(NewID(), e, eventstore.Metadata{SchemaVersion: domain.SchemaVersion})
		if err != nil {
			tb.Fatalf("encode %T: %v", e, err)
		}
		data[i] = d
	}
	if _, err := s.Append(context.Background(), stream, eventstore.Any(), data...); err != nil {
		tb.Fatalf("append to %s: %v", stream, err)
	}
}

// memKeys is an in-memory Keys (the key table). Data keys are kept
// unwrapped: wrapping is keystore's (tested there).
type memKeys struct {
	mu   sync.Mutex
	rows map[string]*memKeyRow
	// erased holds the erasures left to record: when each deleted key went.
	erased map[string]time.Time
	fail   error // when set, every call fails with it (the database is down)
}

type memKeyRow struct {
	dk      *envelope.DataKey
	held    []byte
	shredAt time.Time
}

func newMemKeys() *memKeys {
	return &memKeys{rows: map[string]*memKeyRow{}, erased: map[string]time.Time{}}
}

// shredLocked deletes orderID's key, leaving its erasure to record; k.mu is held.
func (k *memKeys) shredLocked(orderID string) {
	if _, ok := k.rows[orderID]; !ok {
		return
	}
	delete(k.rows, orderID)
	if _, ok := k.erased[orderID]; !ok {
		k.erased[orderID] = time.Now().UTC()
	}
}

func (k *memKeys) Erasures(_ context.Context, limit int) (map[string]time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return nil, k.fail
	}
	out := map[string]time.Time{}
	for id, at := range k.erased {
		if len(out) == limit {
			break
		}
		out[id] = at
	}
	return out, nil
}

func (k *memKeys) ForgetErasures(_ context.Context, orderIDs []string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return k.fail
	}
	for _, id := range orderIDs {
		delete(k.erased, id)
	}
	return nil
}

// testDataKey is a fixed data key per order, so fixtures can seal bytes
// before the handler runs.
func testDataKey(orderID string) *envelope.DataKey {
	sum := sha256.Sum256([]byte("test data key " + orderID))
	dk, err := envelope.DataKeyFromBytes(sum[:])
	if err != nil {
		panic(err)
	}
	return dk
}

func (k *memKeys) Create(_ context.Context, orderID string, dk *envelope.DataKey, held []byte, shredAt time.Time) (*envelope.DataKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return nil, k.fail
	}
	if r, ok := k.rows[orderID]; ok {
		return r.dk, nil
	}
	k.rows[orderID] = &memKeyRow{dk: dk, held: held, shredAt: shredAt}
	return dk, nil
}

func (k *memKeys) Key(_ context.Context, orderID string) (*envelope.DataKey, bool, error) {
	r, ok, err := k.row(orderID)
	if !ok {
		return nil, false, err
	}
	return r.dk, true, nil
}

func (k *memKeys) HeldToken(_ context.Context, orderID string) ([]byte, bool, error) {
	r, ok, err := k.row(orderID)
	if !ok {
		return nil, false, err
	}
	return r.held, true, nil
}

// row returns a copy of the row of orderID, whether it exists, and the
// armed failure (with ok false) if any.
func (k *memKeys) row(orderID string) (memKeyRow, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return memKeyRow{}, false, k.fail
	}
	r, ok := k.rows[orderID]
	if !ok {
		return memKeyRow{}, false, nil
	}
	return *r, true, nil
}

func (k *memKeys) Placing(_ context.Context, orderID string, deadline time.Time) ([]byte, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return nil, false, k.fail
	}
	r, ok := k.rows[orderID]
	if !ok {
		return nil, false, nil
	}
	if deadline.Before(r.shredAt) {
		r.shredAt = deadline
	}
	return r.held, true, nil
}

func (k *memKeys) Placed(_ context.Context, orderID string, deadline time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return k.fail
	}
	if r, ok := k.rows[orderID]; ok {
		r.held = nil
		if deadline.Before(r.shredAt) {
			r.shredAt = deadline
		}
	}
	return nil
}

func (k *memKeys) Shred(_ context.Context, orderID string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return k.fail
	}
	k.shredLocked(orderID)
	return nil
}

func (k *memKeys) ShredMany(_ context.Context, orderIDs []string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return k.fail
	}
	for _, id := range orderIDs {
		k.shredLocked(id)
	}
	return nil
}

func (k *memKeys) ShredDue(_ context.Context, now time.Time) (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return 0, k.fail
	}
	var n int64
	for id, r := range k.rows {
		if !now.Before(r.shredAt) {
			k.shredLocked(id)
			n++
		}
	}
	return n, nil
}

// has reports whether orderID has a key, and whether a token is held for it.
func (k *memKeys) has(orderID string) (exists, held bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.rows[orderID]
	return ok, ok && r.held != nil
}

func (k *memKeys) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.rows)
}

// processes is several processes of one service in the in-memory tests:
// Handlers that share one event store, database clock, key table and
// payment provider, as replicas share PostgreSQL and the provider.
type processes struct {
	mem   *memStore
	clock *fakeClock
	keys  *memKeys
	pay   *fakePayments
}

func newProcesses() *processes {
	p := &processes{mem: newMemStore(), clock: newFakeClock(payT0), keys: newMemKeys(), pay: newFakePayments()}
	p.mem.SetClock(p.clock)
	return p
}

// handler returns one process, executor exec, with cfg's changes applied
// to DefaultConfig; store is the shared store unless one is given (a
// wrapper of p.mem).
func (p *processes) handler(exec string, store EventStore, change func(*Config)) *Handler {
	cfg := DefaultConfig()
	cfg.Executor = exec
	if change != nil {
		change(&cfg)
	}
	if store == nil {
		store = p.mem
	}
	return New(cfg, store, p.clock, p.pay, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithKeys(p.keys))
}

// scheduleShow schedules a show of capacity seats starting in startsIn on
// h, and fails t if it is refused.
func scheduleShow(t *testing.T, h *Handler, capacity int, startsIn time.Duration) domain.Show {
	t.Helper()
	show, _, err := h.ScheduleShow(context.Background(), Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Show", StartsAt: payT0.Add(startsIn), Capacity: capacity, Price: payPrice})
	if err != nil {
		t.Fatal(err)
	}
	return show
}
