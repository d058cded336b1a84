package commands

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
)

// Hand-written fakes of the interfaces commands declares (STYLE §5): an
// in-memory event store with the expected-revision and idempotent-append
// semantics of eventstore.Store, a settable clock, and a recording payment
// provider. Safe for concurrent use.

// memStore is an in-memory EventStore. Appends follow eventstore.Store: the
// expected revision must hold, except that a repeat whose ids are all stored
// at the place the expected revision names succeeds without writing; ids
// are unique across all streams. Truncate hides events below a revision and
// keeps the stream's last revision.
type memStore struct {
	mu      sync.Mutex
	streams map[string]*memStream
	ids     map[string]string // event id → stream
	seq     uint64
	// beforeAppend, when set, runs (without the lock) before each append;
	// tests use it to interleave a competing writer.
	beforeAppend func(stream string)
	// afterAppend, when set, runs (without the lock) after each append that
	// wrote events, with their types.
	afterAppend func(stream string, types []string)
	// clock, when set, stamps RecordedAt (the database clock); else the host clock.
	clock *fakeClock
}

type memStream struct {
	events   []eventstore.RecordedEvent // all, including truncated ones
	truncate eventstore.Revision
}

func newMemStore() *memStore {
	return &memStore{streams: map[string]*memStream{}, ids: map[string]string{}}
}

// Append implements EventStore.
func (m *memStore) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	if len(events) == 0 {
		return eventstore.AppendResult{}, errors.New("memstore: no events")
	}
	if err := ctx.Err(); err != nil {
		return eventstore.AppendResult{}, err
	}
	if hook := m.beforeAppend; hook != nil {
		hook(stream)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.streams[stream]
	last := int64(-1)
	if s != nil {
		last = int64(len(s.events)) - 1
	}
	holds := false
	switch rev, exact := expected.ExactRevision(); {
	case expected.IsAny():
		holds = true
	case expected.IsNoStream():
		holds = last == -1
	case expected.IsStreamExists():
		holds = last >= 0
	case exact:
		holds = last == int64(rev)
	}
	dup := false
	for _, e := range events {
		if _, ok := m.ids[e.ID]; ok {
			dup = true
		}
	}
	if !holds || dup {
		if m.alreadyAppendedLocked(stream, s, expected, events) {
			r := s.events[m.indexLocked(s, events[len(events)-1].ID)]
			return eventstore.AppendResult{NextRevision: r.Revision, Position: r.Position}, nil
		}
		return eventstore.AppendResult{}, &eventstore.RevisionConflictError{Stream: stream, Expected: expected, Actual: last}
	}
	if s == nil {
		s = &memStream{}
		m.streams[stream] = s
	}
	recordedAt := time.Now().UTC()
	if m.clock != nil {
		recordedAt, _ = m.clock.Now(ctx)
	}
	var res eventstore.AppendResult
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.Type
		m.seq++
		r := eventstore.RecordedEvent{ID: e.ID, Stream: stream, Type: e.Type, Revision: uint64(len(s.events)),
			Position: eventstore.Position{Commit: m.seq, Prepare: m.seq}, Data: e.Data, Metadata: e.Metadata, RecordedAt: recordedAt}
		s.events = append(s.events, r)
		m.ids[e.ID] = stream
		res = eventstore.AppendResult{NextRevision: r.Revision, Position: r.Position}
	}
	if hook := m.afterAppend; hook != nil {
		m.mu.Unlock()
		hook(stream, types)
		m.mu.Lock()
	}
	return res, nil
}

func (m *memStore) indexLocked(s *memStream, id string) int {
	return slices.IndexFunc(s.events, func(r eventstore.RecordedEvent) bool { return r.ID == id })
}

// alreadyAppendedLocked reports whether every event of the batch is stored in
// the stream where expected puts it (KurrentDB's idempotent append).
func (m *memStore) alreadyAppendedLocked(stream string, s *memStream, expected eventstore.ExpectedRevision, events []eventstore.EventData) bool {
	if s == nil {
		return false
	}
	first := -1
	if rev, exact := expected.ExactRevision(); exact {
		first = int(rev) + 1
	} else if expected.IsNoStream() {
		first = 0
	}
	for i, e := range events {
		if m.ids[e.ID] != stream {
			return false
		}
		idx := m.indexLocked(s, e.ID)
		if first >= 0 && idx != first+i {
			return false
		}
	}
	return true
}

// ReadStream implements EventStore.
func (m *memStore) ReadStream(ctx context.Context, stream string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.streams[stream]
	if s == nil {
		return nil, eventstore.ErrStreamNotFound
	}
	var out []eventstore.RecordedEvent
	for _, r := range s.events {
		if r.Revision >= from && r.Revision >= s.truncate {
			out = append(out, r)
		}
		if limit > 0 && len(out) == limit {
			break
		}
	}
	if len(out) == 0 && from <= s.truncate {
		return nil, eventstore.ErrStreamNotFound
	}
	return out, nil
}

// Truncate implements EventStore.
func (m *memStore) Truncate(_ context.Context, stream string, before eventstore.Revision) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.streams[stream]; s != nil && before > s.truncate {
		s.truncate = min(before, eventstore.Revision(len(s.events)))
	}
	return nil
}

// SubscribeAll implements Log: batches of every event after position after,
// in append order, polling every millisecond once caught up, until ctx is
// done (ctx.Err()) or fn fails (its error).
func (m *memStore) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error {
	for {
		m.mu.Lock()
		var batch []eventstore.RecordedEvent
		for _, s := range m.streams {
			for _, r := range s.events {
				if after.Less(r.Position) {
					batch = append(batch, r)
				}
			}
		}
		m.mu.Unlock()
		slices.SortFunc(batch, func(a, b eventstore.RecordedEvent) int {
			if a.Position.Less(b.Position) {
				return -1
			}
			return 1
		})
		if len(batch) > 0 {
			if err := fn(ctx, batch); err != nil {
				return err
			}
			after = batch[len(batch)-1].Position
			continue
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return err
		}
	}
}

// types returns the event types of stream, in order (nil when none).
func (m *memStore) types(stream string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	if s := m.streams[stream]; s != nil {
		for _, r := range s.events {
			out = append(out, r.Type)
		}
	}
	return out
}

// fakeClock is a settable Clock, standing in for the database clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

// Now implements Clock.
func (c *fakeClock) Now(context.Context) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now, nil
}

// Advance moves the clock by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
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

// newTestRegistry returns the registry of every domain event type.
func newTestRegistry() *eventstore.Registry {
	types := domain.EventTypes()
	typed := make([]eventstore.Typed, len(types))
	for i, t := range types {
		typed[i] = t
	}
	return eventstore.NewRegistry(typed...)
}

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
	fail error // when set, every call fails with it (the database is down)
}

type memKeyRow struct {
	dk      *envelope.DataKey
	held    []byte
	shredAt time.Time
}

func newMemKeys() *memKeys { return &memKeys{rows: map[string]*memKeyRow{}} }

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
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return nil, false, k.fail
	}
	r, ok := k.rows[orderID]
	if !ok {
		return nil, false, nil
	}
	return r.dk, true, nil
}

func (k *memKeys) HeldToken(_ context.Context, orderID string) ([]byte, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return nil, false, k.fail
	}
	r, ok := k.rows[orderID]
	if !ok {
		return nil, false, nil
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
	delete(k.rows, orderID)
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
			delete(k.rows, id)
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
