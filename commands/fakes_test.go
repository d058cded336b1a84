package commands

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
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
	Op  string // "create", "get", "list", "search", "cancel", "refund", "list_refunds"
	Key string // idempotency key (create, cancel, refund) or payment id
}

// payFault scripts the answer to one CreatePayment call.
type payFault int

const (
	faultNone         payFault = iota
	faultInUse                 // 409 idempotency_key_in_use: nothing executed, nothing saved
	faultErrorBefore           // 500 before executing: nothing saved, a repeat executes
	faultErrorAfter            // executes (the payment succeeds), answers 500, which is saved: a repeat replays the 500
	faultTimeoutAfter          // executes (the payment succeeds), the answer is lost; a repeat replays the success
	faultUnavailable           // never sent
	faultIdempotency           // 400 idempotency_error
	faultInvalid               // 400 invalid_request_error (an unusable payment method): nothing executed, nothing saved
	faultDecline               // 402: the payment is declined (requires_payment_method), saved and replayed
	faultAction                // 200: the payment requires the customer's action
	faultProcessing            // 200: the payment is processing
)

// fakeAnswer is what the fake saved for an idempotency key: the digest of
// the first request's parameters, and its answer (a payment's state at the
// time, or a saved 500).
type fakeAnswer struct {
	params  string
	payment provider.Payment
	err500  bool
}

// fakePayments is a recording payment provider with Stripe's idempotency
// (https://docs.stripe.com/api/idempotent_requests): the first answer of a
// key that began executing is saved and replayed for the same key and
// parameters, a 500 included; other parameters under the key are an
// idempotency error; a request that failed validation or met a
// concurrent one is not saved. Each CreatePayment takes the next scripted
// fault (faultNone when none is left). Keys can be forgotten (the window
// passing) while payments stay listed by their creation time (the
// provider's clock, clock), forever. Safe for concurrent use.
type fakePayments struct {
	mu       sync.Mutex
	clock    *fakeClock
	calls    []fakeCall
	reqs     []provider.PaymentRequest // of the CreatePayment calls, in order
	faults   []payFault
	payments []*provider.Payment
	keys     map[string]*fakeAnswer // idempotency key → saved answer (forgotten by forgetKeys)
	refunds  []provider.PaymentRefund
	refKeys  map[string]string // refund key → refund id
	// listErr, when set, fails every ListPayments; searchBlind makes
	// SearchPayments find nothing (its lag).
	listErr     error
	searchBlind bool
	// refund404 answers the next n refunds 404 resource_missing whether
	// the payment exists or not (a wrong route, say).
	refund404 int
	// refundErrAfter makes the next n refunds execute (the money is
	// returned) and answer a 500 that is saved under their key: every
	// repeat with the key replays the 500, as Stripe does.
	refundErrAfter int
	// refund500 holds the refund keys whose saved answer is a 500.
	refund500 map[string]bool
	// cancelErrAfter makes the next n cancels execute (the payment is
	// canceled) and answer a 500 that is saved under their key.
	cancelErrAfter int
	// onCreate, when set, runs (without the lock) at the start of every
	// CreatePayment; tests use it to pause or interleave.
	onCreate func(key string)
}

func newFakePayments(faults ...payFault) *fakePayments {
	return &fakePayments{faults: faults, keys: map[string]*fakeAnswer{}, refKeys: map[string]string{}, clock: newFakeClock(payT0)}
}

func (p *fakePayments) record(op, key string) {
	p.calls = append(p.calls, fakeCall{Op: op, Key: key})
}

func fakeID(prefix string) string { return prefix + rand.Text()[:12] }

func apiError(sentinel error, e provider.APIError) error { return fmt.Errorf("%w: %w", sentinel, &e) }

// now is the provider's clock.
func (p *fakePayments) now() time.Time {
	t, _ := p.clock.Now(context.Background())
	return t
}

// CreatePayment implements Payments.
func (p *fakePayments) CreatePayment(ctx context.Context, key string, req provider.PaymentRequest) (provider.Payment, error) {
	if hook := p.onCreate; hook != nil {
		hook(key)
	}
	if err := ctx.Err(); err != nil {
		return provider.Payment{}, fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	if err := req.Validate(); err != nil {
		return provider.Payment{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("create", key)
	p.reqs = append(p.reqs, req)
	fault := faultNone
	if len(p.faults) > 0 {
		fault, p.faults = p.faults[0], p.faults[1:]
	}
	switch fault {
	case faultInUse:
		return provider.Payment{}, apiError(provider.ErrKeyInUse, provider.APIError{StatusCode: 409, Type: provider.TypeIdempotencyKeyInUse})
	case faultErrorBefore:
		return provider.Payment{}, apiError(provider.ErrOutcomeUnknown, provider.APIError{StatusCode: 500, Type: provider.TypeAPIError})
	case faultUnavailable:
		return provider.Payment{}, fmt.Errorf("%w: connection refused", provider.ErrUnavailable)
	case faultIdempotency:
		return provider.Payment{}, apiError(provider.ErrIdempotency, provider.APIError{StatusCode: 400, Type: provider.TypeIdempotencyError})
	case faultInvalid:
		return provider.Payment{}, apiError(provider.ErrInvalidRequest, provider.APIError{StatusCode: 400, Type: provider.TypeInvalidRequestError,
			Code: provider.CodeResourceMissing, Param: "payment_method"})
	}
	params := attemptDigest(req)
	if saved, ok := p.keys[key]; ok {
		if saved.params != params {
			return provider.Payment{}, apiError(provider.ErrIdempotency, provider.APIError{StatusCode: 400, Type: provider.TypeIdempotencyError})
		}
		return answer(saved, true)
	}
	pay := &provider.Payment{ID: fakeID("pi_"), Amount: req.Amount, Currency: strings.ToUpper(req.Currency), Status: provider.PaymentSucceeded,
		Metadata: req.Metadata(), Created: p.now().Truncate(time.Second)}
	switch fault {
	case faultDecline:
		pay.Status = provider.PaymentRequiresPaymentMethod
		pay.LastError = &provider.PaymentError{Type: provider.TypeCardError, Code: provider.CodeCardDeclined, DeclineCode: "generic_decline"}
	case faultAction:
		pay.Status, pay.ClientSecret = provider.PaymentRequiresAction, pay.ID+"_secret_"+rand.Text()[:8]
		pay.NextAction = []byte(`{"type":"use_stripe_sdk","use_stripe_sdk":{"type":"three_d_secure_redirect"}}`)
	case faultProcessing:
		pay.Status = provider.PaymentProcessing
	}
	p.payments = append(p.payments, pay)
	saved := &fakeAnswer{params: params, payment: *pay, err500: fault == faultErrorAfter}
	p.keys[key] = saved
	if fault == faultTimeoutAfter {
		return provider.Payment{}, fmt.Errorf("%w: connection reset", provider.ErrOutcomeUnknown)
	}
	return answer(saved, false)
}

// answer returns a saved answer, the first time or replayed.
func answer(saved *fakeAnswer, replayed bool) (provider.Payment, error) {
	if saved.err500 {
		return provider.Payment{}, apiError(provider.ErrOutcomeUnknown, provider.APIError{StatusCode: 500, Type: provider.TypeAPIError, Replayed: replayed})
	}
	pay := saved.payment
	pay.Replayed = replayed
	if pay.Declined() {
		return provider.Payment{}, apiError(provider.ErrDeclined, provider.APIError{StatusCode: 402, Type: provider.TypeCardError,
			Code: provider.CodeCardDeclined, DeclineCode: "generic_decline", Payment: &pay, Replayed: replayed})
	}
	return pay, nil
}

func (p *fakePayments) paymentLocked(id string) *provider.Payment {
	for _, c := range p.payments {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// addPayment records a payment made outside the service's sends (a stray
// payment of order orderID, attempt n), succeeded, and returns it.
func (p *fakePayments) addPayment(orderID string, n int, amount domain.Money) provider.Payment {
	p.mu.Lock()
	defer p.mu.Unlock()
	pay := &provider.Payment{ID: fakeID("pi_"), Amount: amount.Amount, Currency: amount.Currency, Status: provider.PaymentSucceeded,
		Metadata: map[string]string{provider.MetadataOrderID: orderID, provider.MetadataAttempt: strconv.Itoa(n)}, Created: p.now().Truncate(time.Second)}
	p.payments = append(p.payments, pay)
	return *pay
}

// setStatus moves payment id to status (the customer authenticated, or
// failed to): succeeded, or requires_payment_method with a decline.
func (p *fakePayments) setStatus(id string, status provider.PaymentStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pay := p.paymentLocked(id)
	pay.Status, pay.ClientSecret, pay.NextAction = status, "", nil
	if status == provider.PaymentRequiresPaymentMethod {
		pay.LastError = &provider.PaymentError{Type: provider.TypeCardError, Code: "payment_intent_authentication_failure"}
	}
}

// GetPayment implements Payments.
func (p *fakePayments) GetPayment(_ context.Context, id string) (provider.Payment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("get", id)
	pay := p.paymentLocked(id)
	if pay == nil {
		return provider.Payment{}, apiError(provider.ErrNotFound, provider.APIError{StatusCode: 404, Type: provider.TypeInvalidRequestError,
			Code: provider.CodeResourceMissing})
	}
	return *pay, nil
}

// ListPayments implements Payments: every payment created in [from, to].
func (p *fakePayments) ListPayments(_ context.Context, from, to time.Time) ([]provider.Payment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("list", from.Format(time.RFC3339)+"/"+to.Format(time.RFC3339))
	if p.listErr != nil {
		return nil, p.listErr
	}
	var out []provider.Payment
	for _, c := range p.payments {
		if !c.Created.Before(from.Truncate(time.Second)) && !c.Created.After(to) {
			out = append(out, *c)
		}
	}
	return out, nil
}

// SearchPayments implements Payments.
func (p *fakePayments) SearchPayments(_ context.Context, orderID string, attempt int) ([]provider.Payment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("search", orderID+"/"+strconv.Itoa(attempt))
	if p.searchBlind {
		return nil, nil
	}
	var out []provider.Payment
	for _, c := range p.payments {
		if c.OrderID() == orderID && (attempt == 0 || c.Attempt() == attempt) {
			out = append(out, *c)
		}
	}
	return out, nil
}

// CancelPayment implements Payments: a payment that succeeded or was
// canceled cannot be; the first answer of a key is replayed.
func (p *fakePayments) CancelPayment(_ context.Context, key, id string) (provider.Payment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("cancel", key)
	if saved, ok := p.keys[key]; ok {
		return answer(saved, true)
	}
	pay := p.paymentLocked(id)
	switch {
	case pay == nil:
		return provider.Payment{}, apiError(provider.ErrNotFound, provider.APIError{StatusCode: 404, Code: provider.CodeResourceMissing})
	case pay.Status == provider.PaymentSucceeded || pay.Status == provider.PaymentCanceled:
		return provider.Payment{}, apiError(provider.ErrInvalidRequest, provider.APIError{StatusCode: 400, Type: provider.TypeInvalidRequestError,
			Code: provider.CodePaymentIntentUnexpectedState})
	}
	pay.Status, pay.ClientSecret, pay.NextAction = provider.PaymentCanceled, "", nil
	saved := &fakeAnswer{payment: *pay}
	if p.cancelErrAfter > 0 {
		p.cancelErrAfter--
		saved.err500 = true
	}
	p.keys[key] = saved
	return answer(saved, false)
}

// Refund implements Payments: idempotent by key; a payment with nothing
// left to refund is refused with charge_already_refunded, and an amount
// above what is left with amount_too_large.
func (p *fakePayments) Refund(_ context.Context, key string, req provider.PaymentRefundRequest) (provider.PaymentRefund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("refund", key)
	if p.refund404 > 0 {
		p.refund404--
		return provider.PaymentRefund{}, apiError(provider.ErrNotFound, provider.APIError{StatusCode: 404, Code: provider.CodeResourceMissing})
	}
	if p.refund500[key] {
		return provider.PaymentRefund{}, apiError(provider.ErrOutcomeUnknown, provider.APIError{StatusCode: 500, Type: provider.TypeAPIError, Replayed: true})
	}
	if id, ok := p.refKeys[key]; ok {
		for _, r := range p.refunds {
			if r.ID == id {
				r.Replayed = true
				return r, nil
			}
		}
	}
	pay := p.paymentLocked(req.PaymentID)
	if pay == nil {
		return provider.PaymentRefund{}, apiError(provider.ErrNotFound, provider.APIError{StatusCode: 404, Code: provider.CodeResourceMissing,
			Message: "No such payment_intent."})
	}
	left, amount := pay.Amount-pay.AmountRefunded, req.Amount
	if amount == 0 {
		amount = left
	}
	if left == 0 {
		return provider.PaymentRefund{}, apiError(provider.ErrInvalidRequest, provider.APIError{StatusCode: 400, Code: provider.CodeChargeAlreadyRefunded})
	}
	if amount > left {
		return provider.PaymentRefund{}, apiError(provider.ErrInvalidRequest, provider.APIError{StatusCode: 400, Code: provider.CodeAmountTooLarge})
	}
	pay.AmountRefunded += amount
	r := provider.PaymentRefund{ID: fakeID("re_"), PaymentID: req.PaymentID, Amount: amount, Currency: pay.Currency, Status: "succeeded",
		Metadata: req.Metadata, Created: p.now()}
	p.refunds = append(p.refunds, r)
	p.refKeys[key] = r.ID
	if p.refundErrAfter > 0 {
		p.refundErrAfter--
		if p.refund500 == nil {
			p.refund500 = map[string]bool{}
		}
		p.refund500[key] = true
		return provider.PaymentRefund{}, apiError(provider.ErrOutcomeUnknown, provider.APIError{StatusCode: 500, Type: provider.TypeAPIError})
	}
	return r, nil
}

// ListRefunds implements Payments.
func (p *fakePayments) ListRefunds(_ context.Context, paymentID string) ([]provider.PaymentRefund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record("list_refunds", paymentID)
	var out []provider.PaymentRefund
	for _, r := range p.refunds {
		if r.PaymentID == paymentID {
			out = append(out, r)
		}
	}
	return out, nil
}

// fakeWebhookSecret signs the fake's webhooks.
const fakeWebhookSecret = "whsec_test"

// fakeSign signs body at t as the fake verifies it: "t=<unix>,v1=<hex
// HMAC-SHA256 of "<t>.<body>">", Stripe's scheme.
func fakeSign(body []byte, t time.Time, secret string) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// fakeEvent is the body of a fake webhook: provider.WebhookEvent's fields.
type fakeEvent struct {
	ID        string            `json:"id"`
	Type      string            `json:"type"`
	PaymentID string            `json:"payment_id"`
	Metadata  map[string]string `json:"metadata"`
}

// CheckWebhookHeader implements Payments: "t=<unix seconds>,v1=…" within
// five minutes of now.
func (p *fakePayments) CheckWebhookHeader(header string, now time.Time) error {
	ts, sig, ok := strings.Cut(strings.TrimPrefix(header, "t="), ",")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(header, "t=") || !strings.HasPrefix(sig, "v1=") {
		return provider.ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return provider.ErrStaleTimestamp
	}
	return nil
}

// ParseWebhook implements Payments: fakeSign's signature under
// fakeWebhookSecret within five minutes of now, over a fakeEvent body.
func (p *fakePayments) ParseWebhook(body []byte, header string, now time.Time) (provider.WebhookEvent, error) {
	ts, _, ok := strings.Cut(strings.TrimPrefix(header, "t="), ",")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || fakeSign(body, time.Unix(sec, 0), fakeWebhookSecret) != header {
		return provider.WebhookEvent{}, provider.ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return provider.WebhookEvent{}, provider.ErrStaleTimestamp
	}
	var ev fakeEvent
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" || ev.Type == "" {
		return provider.WebhookEvent{}, provider.ErrMalformedEvent
	}
	return provider.WebhookEvent{ID: ev.ID, Type: ev.Type, PaymentID: ev.PaymentID, Metadata: ev.Metadata, Created: now}, nil
}

// forgetKeys forgets every idempotency key, as the provider does once its
// window has passed; payments stay listed.
func (p *fakePayments) forgetKeys() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys, p.refKeys = map[string]*fakeAnswer{}, map[string]string{}
}

// forgetPayments forgets every payment and refund, as a provider that lost
// its state would.
func (p *fakePayments) forgetPayments() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.payments, p.refunds = nil, nil
	p.keys, p.refKeys = map[string]*fakeAnswer{}, map[string]string{}
}

// net returns the minor units charged (succeeded payments) net of
// refunds, and the number of succeeded payments.
func (p *fakePayments) net() (int64, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	var count int
	for _, c := range p.payments {
		if c.Status == provider.PaymentSucceeded {
			n += c.Amount - c.AmountRefunded
			count++
		}
	}
	return n, count
}

// created returns how many payments were created.
func (p *fakePayments) created() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.payments)
}

// requests returns the requests of the CreatePayment calls, in order.
func (p *fakePayments) requests() []provider.PaymentRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reqs)
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
	// clock, when set, stamps each row's creation (the database's now);
	// otherwise rows are made at the zero time.
	clock *fakeClock
	// onKey, when set, runs (without the lock) at the start of every Key
	// read; tests use it to stall the key table.
	onKey func()
}

type memKeyRow struct {
	dk      *envelope.DataKey
	intent  string
	held    []byte
	shredAt time.Time
	created time.Time
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

func (k *memKeys) ForgetErasures(_ context.Context, orderIDs []string) ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return nil, k.fail
	}
	var dropped []string
	for _, id := range orderIDs {
		if _, ok := k.erased[id]; ok {
			delete(k.erased, id)
			dropped = append(dropped, id)
		}
	}
	return dropped, nil
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

func (k *memKeys) Create(ctx context.Context, orderID, intent string, dk *envelope.DataKey, held []byte, shredAt time.Time) (*envelope.DataKey, error) {
	var created time.Time
	if k.clock != nil {
		created, _ = k.clock.Now(ctx)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return nil, k.fail
	}
	if r, ok := k.rows[orderID]; ok {
		return r.dk, nil
	}
	k.rows[orderID] = &memKeyRow{dk: dk, intent: intent, held: held, shredAt: shredAt, created: created}
	return dk, nil
}

func (k *memKeys) Unplaced(_ context.Context, before time.Time, limit int) (map[string]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return nil, k.fail
	}
	out := map[string]string{}
	for id, r := range k.rows {
		if r.held != nil && r.intent != "" && !r.created.After(before) && len(out) < limit {
			out[id] = r.intent
		}
	}
	return out, nil
}

func (k *memKeys) Key(_ context.Context, orderID string) (*envelope.DataKey, bool, error) {
	if hook := k.onKey; hook != nil {
		hook()
	}
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
	p.pay.clock = p.clock
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
