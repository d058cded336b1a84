// Package commands holds the use cases of the booking service, as the
// methods of a Handler's Commands, Queries and Workers (app.go). Each
// command loads a stream, decides with the pure deciders of package
// domain, and appends the decision with an expected revision to one stream,
// its commit point; follow-ups on other streams carry deterministic event ids
// and are done both inline and by the process manager (RunFollowUps), so a
// crash anywhere leaves nothing unfinished. The intent module (intent.go)
// makes every state-changing request idempotent per
// draft-ietf-httpapi-idempotency-key-header.
//
// commands talks to the outside only through the small interfaces declared
// here; cmd/booking wires the PostgreSQL event store, the database clock and
// the payment provider's adapter (package provider/stripe) into them.
package commands

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/eventcodec"
	"github.com/retrysafe/booking/internal/tick"
	"github.com/retrysafe/booking/provider"
)

// EventStore is the part of eventstore.Store that handlers use.
type EventStore interface {
	Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error)
	AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error)
	ReadStream(ctx context.Context, stream string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error)
	Truncate(ctx context.Context, stream string, before eventstore.Revision) error
}

// Clock reads the database clock (PostgreSQL now()); every decision uses it,
// never the host clock, so replicas agree on leases and expiry.
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// Payments is the payment provider as the use cases see it: the port an
// adapter implements (package provider/stripe for Stripe's PaymentIntents,
// https://docs.stripe.com/api/payment_intents). Errors wrap the sentinels
// of package provider (errors.Is), with a *provider.APIError in the chain
// for an error answer; no error or value is ever formatted with a secret
// (payment method, client secret, API key). Implementations are safe for
// concurrent use and never retry on their own: the fenced, recorded
// retries of this package are the only ones.
type Payments interface {
	// CreatePayment creates and confirms attempt req.Attempt's payment
	// under the idempotency key key, with req's parameters (amount,
	// currency, payment method, description, metadata order_id, attempt
	// and deployment; no redirects). It returns the payment (status
	// succeeded, processing or requires_action) or: provider.ErrDeclined
	// (the APIError's Payment is the declined payment), ErrOutcomeUnknown
	// (sent and may have executed: a timeout, a dropped connection, a 5xx —
	// also a 500 the provider replays for the key), ErrKeyInUse (409),
	// ErrIdempotency (the key was used with other parameters),
	// ErrUnavailable (nothing sent, or 429), ErrInvalidRequest (refused,
	// nothing executed), ErrUnauthorized.
	CreatePayment(ctx context.Context, key string, req provider.PaymentRequest) (provider.Payment, error)
	// GetPayment returns the payment id. ErrNotFound, ErrUnavailable.
	GetPayment(ctx context.Context, id string) (provider.Payment, error)
	// ListPayments returns every payment created in [from, to] by the
	// provider's clock, paged to the end. Lists are consistent: a payment
	// appears as soon as it is created (https://docs.stripe.com/search,
	// "Data freshness"). ErrUnavailable.
	ListPayments(ctx context.Context, from, to time.Time) ([]provider.Payment, error)
	// SearchPayments returns payments whose metadata names orderID and
	// attempt (0: any attempt). Eventually consistent: a hit is a fact, a
	// miss proves nothing. ErrUnavailable.
	SearchPayments(ctx context.Context, orderID string, attempt int) ([]provider.Payment, error)
	// CancelPayment cancels payment id under key (reason abandoned). It
	// fails with ErrInvalidRequest, code
	// provider.CodePaymentIntentUnexpectedState, when the payment's status
	// forbids it (it succeeded, say).
	CancelPayment(ctx context.Context, key, id string) (provider.Payment, error)
	// Refund refunds req.PaymentID under key (Amount 0: what remains).
	// Errors as CreatePayment, plus ErrNotFound; ErrInvalidRequest with
	// code charge_already_refunded or amount_too_large.
	Refund(ctx context.Context, key string, req provider.PaymentRefundRequest) (provider.PaymentRefund, error)
	// ListRefunds returns every refund of payment paymentID.
	ListRefunds(ctx context.Context, paymentID string) ([]provider.PaymentRefund, error)
	// ParseWebhook verifies a webhook's signature header over the raw body
	// (the provider's scheme, with a tolerance around now and several
	// secrets during rotation) and decodes the event. ErrBadSignature,
	// ErrStaleTimestamp, ErrMalformedEvent.
	ParseWebhook(body []byte, signatureHeader string, now time.Time) (provider.WebhookEvent, error)
	// CheckWebhookHeader checks a webhook's signature header alone, before
	// the body is read: present and well formed (the provider's scheme),
	// and signed within the tolerance of now. A header it refuses would
	// fail ParseWebhook whatever the body. ErrBadSignature,
	// ErrStaleTimestamp.
	CheckWebhookHeader(signatureHeader string, now time.Time) error
}

// Config holds the windows and limits of the handlers. Durations are wall
// time on the database clock.
type Config struct {
	// Executor identifies this process as the holder of intent and payment
	// leases (a UUID per process start).
	Executor string
	// Deployment prefixes provider idempotency keys ("{deployment}-order-…")
	// and is sent as metadata[deployment] on every payment; empty in dev.
	// Webhooks about payments of another deployment are ignored.
	Deployment string
	// IntentRetention is how long intents are kept (BOOKING_INTENT_RETENTION, default 24h).
	IntentRetention time.Duration
	// IntentLease bounds how long an executor owns an intent before its commit point.
	IntentLease time.Duration
	// HoldFor is how long a reservation holds its seats.
	HoldFor time.Duration
	// PaymentLease is the lease of a payment attempt's sender.
	PaymentLease time.Duration
	// ProviderTimeout bounds one provider call.
	ProviderTimeout time.Duration
	// SendMargin is the safety margin of the send fence: a send needs
	// now + ProviderTimeout + SendMargin before the lease's end.
	SendMargin time.Duration
	// PaymentDeadline is how long after its claim (the commit point of
	// placing it) an order may still be paid.
	PaymentDeadline time.Duration
	// ProviderWindow is the provider's idempotency-key retention
	// (BOOKING_PROVIDER_RETENTION), measured from an attempt's StartedAt:
	// inside it the only retry of an attempt is the same key and bytes.
	// Zero means unknown: every retry then waits for a new attempt.
	ProviderWindow time.Duration
	// SettleMargin is how long after an attempt's lease ended its last send
	// may still be executing at the provider; a new attempt, and giving up
	// on an uncharged one, wait for it.
	SettleMargin time.Duration
	// ClockSkew bounds the difference between the database clock and the
	// provider's (BOOKING_PROVIDER_CLOCK_SKEW): the time range in which an
	// attempt's payment was created is padded by it on both sides.
	ClockSkew time.Duration
	// InUseWait bounds how long a repeat waits for an in-flight first request.
	InUseWait time.Duration
	// ConflictAttempts bounds the tries of every load-decide-append that
	// loses a race (a revision conflict) before 503 contention; see the
	// retry policy in update.go. Zero means the default (20).
	ConflictAttempts int
}

// DefaultConfig returns the defaults documented in docs/configuration.md.
func DefaultConfig() Config {
	return Config{
		IntentRetention:  24 * time.Hour,
		IntentLease:      5 * time.Second,
		HoldFor:          10 * time.Minute,
		PaymentLease:     30 * time.Second,
		ProviderTimeout:  10 * time.Second,
		SendMargin:       2 * time.Second,
		PaymentDeadline:  15 * time.Minute,
		ProviderWindow:   24 * time.Hour,
		SettleMargin:     5 * time.Second,
		ClockSkew:        2 * time.Minute,
		InUseWait:        2 * time.Second,
		ConflictAttempts: 20,
	}
}

// core is what the use cases share: the ports, the configuration and the
// speed mechanisms beneath the use cases. Safe for concurrent use.
type core struct {
	cfg      Config
	store    EventStore
	clock    Clock
	payments Payments
	keys     Keys
	units    KeyUnits // nil: the key table's writes are statements of their own
	// processed remembers the webhook events processed; see webhooks.go.
	processed ProcessedEvents
	registry  *eventstore.Registry
	log       *slog.Logger
	hooks     Hooks
	metrics   Metrics
	shows     *keyedMutex
	sends     *keyedMutex
	// holds batches concurrent seat holds per show; see holdbatch.go.
	holds holdBatcher
	// streams is the event store and the clock as the use cases load and
	// read them, with the kept streams, the clock reading and the written
	// set beneath; see streams.go.
	streams *streams
	// shredder batches the deletes of order keys; see keys.go.
	shredder keyShredder
	// inflight registers the intents whose record waits for their use
	// case's unit; see inflight.go.
	inflight inFlight
	// skew samples the event store's clock against the service's; see
	// skew.go.
	skew skewSampler
	// erasureWake asks runErasures to record erasures now (erasure.go).
	erasureWake chan struct{}
	// abandoned ends the work detached from its callers (see detach) when
	// the process gives it up (Abandon).
	abandoned context.Context
	abandon   context.CancelFunc

	// tracer records the spans of the store and provider decorators
	// (tracing.go); nil records none.
	tracer trace.Tracer
}

// Hooks are test-only fault points: each, when set, is called at a step
// boundary and may kill the process or park the calling goroutine until a
// test releases it. Production wiring never sets them (see cmd/booking's
// faultinject build tag).
type Hooks struct {
	// Step is called with one of Steps, synchronously on the goroutine that
	// reached it (a request's or a background job's). It may block.
	Step func(step string)
}

// Steps lists every fault point's name, in the order a booking reaches
// them. A name in the past tense ("order.claimed") is called right after
// that step's append returned; one ending in "-ing" ("order.claiming") right
// before the append, so a process stopped or parked there has not reached
// it.
//
//   - order.token-held: an order's payment token was sealed (and, without
//     key units, held in the key table: Keys.Create), before its
//     IntentRecorded is appended.
//   - intent.recorded: a new IntentRecorded was appended. An order's and
//     a reservation's are appended in the unit of their commit point (see
//     inflight.go), so there it comes after that unit, right before
//     order.claimed or reservation.held; for the other operations (and an
//     intent recorded alone) the commit point is still ahead.
//   - intent.waiting: a repeat found the intent's executor inside its lease
//     before the commit point, or its intent in flight in this process
//     (not recorded yet), and is about to wait for it (up to InUseWait); a
//     repeat parked here has not started its wait yet.
//   - reservation.holding: before SeatsHeld, with a new reservation's
//     IntentRecorded, joins the show's next append (the reservation's
//     commit point): a request parked here has recorded nothing yet.
//   - reservation.held: after SeatsHeld was appended.
//   - order.claiming: before the no-stream append of OrderClaimed to
//     reservation-order-{id} (the order's commit point), in a new order's
//     unit with its IntentRecorded: a request parked here has recorded
//     nothing yet (a repeat reaching its process waits for it).
//   - order.claimed: after that append.
//   - order.placed: after OrderPlaced and the reservation's follow-up.
//   - payment.fenced: after PaymentAttemptStarted (the lease) and the send's
//     fence were taken, before the provider call.
//   - payment.sent: after the provider call returned, before its outcome is
//     recorded.
//   - payment.recorded: after a payment outcome was appended.
//   - cancel.recorded: after a cancel was appended to the order stream.
//   - expiry.claiming: before the expiry job's no-stream append of
//     ExpiryClaimed (the commit point of a hold's expiry).
//   - expiry.claimed: after the expiry job appended an ExpiryClaimed (the
//     process manager may release the seats from then on).
//   - erasure.recording: the reconciler read deleted keys whose erasure is
//     to be recorded, before it appends PaymentSecretsShredded (the keys
//     are gone, the events not yet written).
var Steps = []string{
	"order.token-held",
	"intent.recorded", "intent.waiting",
	"reservation.holding", "reservation.held",
	"order.claiming", "order.claimed", "order.placed",
	"payment.fenced", "payment.sent", "payment.recorded",
	"cancel.recorded",
	"expiry.claiming", "expiry.claimed",
	"erasure.recording",
}

// step calls the fault hook at step name. Where the clock is one tests
// move (movableClock), the process's clock reading is dropped there: a test
// may move its clock while the request is parked. The database's own clock
// (booking serve, also when built with fault points) moves only forward
// with the host's, so its reading stays valid across a park and the fault
// points cost no clock reads.
func (h *core) step(ctx context.Context, name string) {
	if h.hooks.Step != nil {
		h.hooks.Step(name)
		h.streams.parked()
	}
}

// New returns a Handler whose Commands, Queries and Workers share one core.
// registry must know every domain event type.
func New(cfg Config, store EventStore, clock Clock, payments Payments, registry *eventstore.Registry, log *slog.Logger, opts ...Option) *Handler {
	c := newCore(cfg, store, clock, payments, registry, log, opts...)
	return &Handler{core: c, Commands: &Commands{c}, Queries: &Queries{c}, Workers: &Workers{c}}
}

// newCore returns the core New shares among the Handler's parts.
func newCore(cfg Config, store EventStore, clock Clock, payments Payments, registry *eventstore.Registry, log *slog.Logger, opts ...Option) *core {
	if log == nil {
		log = slog.Default()
	}
	h := &core{cfg: cfg, store: store, clock: clock, payments: payments, registry: registry, log: log,
		shows: newKeyedMutex(), sends: newKeyedMutex(), metrics: nopMetrics{}, keys: noKeys{}, processed: noProcessedEvents{},
		erasureWake: make(chan struct{}, 1)}
	h.abandoned, h.abandon = context.WithCancel(context.Background())
	for _, o := range opts {
		o(h)
	}
	if payments != nil {
		var p Payments = payments
		if h.tracer != nil {
			p = tracedPayments{next: p, tracer: h.tracer}
		}
		h.payments = observedPayments{next: p, metrics: h.metrics}
	}
	if h.tracer != nil {
		h.store = tracedStore{next: store, tracer: h.tracer}
	}
	h.streams = newStreams(h.store, registry, clock, cfg.IntentRetention/2)
	return h
}

// Abandon ends the work this Handler runs detached from its callers
// (payment steps, provider calls, their records, hold batches): it sees its
// context cancelled. booking serve calls it at shutdown once the grace
// period has passed, so the process can stop; what was cut short is left
// as a crash leaves it, for recovery and reconciliation to finish (a send
// cut short is an unknown outcome, reconciled by its key). Safe to call
// more than once and concurrently.
func (h *Workers) Abandon() { h.abandon() }

// detach returns a context with ctx's values that ctx's cancellation and
// deadline do not reach (context.WithoutCancel), ended by Abandon instead.
func (h *core) detach(ctx context.Context) context.Context {
	return detached{Context: context.WithoutCancel(ctx), abandoned: h.abandoned}
}

// detached is context.WithoutCancel's context made to end with the
// Handler's abandoned context.
type detached struct {
	context.Context
	abandoned context.Context
}

// Done is closed when the Handler abandons its detached work.
func (d detached) Done() <-chan struct{} { return d.abandoned.Done() }

// Err is context.Canceled once the Handler abandoned its detached work.
func (d detached) Err() error { return d.abandoned.Err() }

// AfterFunc lets context.WithTimeout, WithDeadline, WithCancel and
// AfterFunc on a detached context register with the abandoned context
// instead of starting a goroutine that watches Done (see
// context.AfterFunc): detached contexts are on the request path.
func (d detached) AfterFunc(f func()) func() bool { return context.AfterFunc(d.abandoned, f) }

// Option configures a Handler.
type Option func(*core)

// WithHooks installs test-only fault hooks.
func WithHooks(hk Hooks) Option { return func(h *core) { h.hooks = hk } }

// WithMetrics installs the metrics sink.
func WithMetrics(m Metrics) Option { return func(h *core) { h.metrics = m } }

// Config returns the handler's configuration.
func (h *Handler) Config() Config { return h.cfg }

// unavailable wraps a dependency failure so it maps to 503 and is never
// stored as an outcome.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var de *domain.Error
	if errors.As(err, &de) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, eventstore.ErrAppendTooLarge) {
		return err // not transient: a repeat would fail the same way
	}
	return fmt.Errorf("%w: %w", domain.ErrUnavailable, err)
}

// stream is a loaded stream: its decoded events and last revision.
type stream struct {
	name    string
	events  []domain.Event
	records []eventstore.RecordedEvent
	exists  bool
	last    eventstore.Revision
	// opened is openedAt of the first record, set on the intent streams
	// kept by streams.loadAt (so a replay does not decode its metadata
	// again); zero elsewhere.
	opened time.Time
}

// expected returns the expected revision for appending after what was loaded.
func (s *stream) expected() eventstore.ExpectedRevision {
	if !s.exists {
		return eventstore.NoStream()
	}
	return eventstore.Exact(s.last)
}

// openedAt is when the fact of an event was decided by the service's clock
// (PostgreSQL's now(), whatever the event store), in UTC: its metadata's
// occurred_at, which every event the service appends carries; the store's
// RecordedAt only for an event stored without one. Intent expiry and the
// explained timelines use it, so a KurrentDB leader whose clock is off
// moves neither.
func openedAt(r eventstore.RecordedEvent) time.Time {
	if m, err := eventstore.DecodeMetadata(r.Metadata); err == nil && !m.OccurredAt.IsZero() {
		return m.OccurredAt.UTC()
	}
	return r.RecordedAt
}

// pending is an event to append with its id.
type pending struct {
	id string
	e  domain.Event
}

// unitPart is one stream's share of a unit of work: events decided on s (the
// stream as the caller knows it, or known only by its revision) to append at
// s's revision with metadata m. data, when set, is the part's events already
// encoded (each with metadata of its own): m is unused, and evs, when given,
// are the same events decoded, for the state streams keeps of the stream.
type unitPart struct {
	s    *stream
	m    eventstore.Metadata
	evs  []pending
	data []eventstore.EventData
}

// appendEvents encodes the parts, each event with its own schema version,
// and appends them as one unit (see appendResolving). The lineage a part's
// m leaves empty (correlation, cause, request) is stamped from ctx (stamp,
// correlation.go): a follow-up carries the ids of the request or of the
// event that caused it. kw joins the unit (KeyUnits), and so does the
// delete of the key of an order whose sends the parts end, with the record
// of its erasure added to the order's part in parts (shredIn: the caller's
// slice shows it). It returns one result per part, in order, and tells
// streams the unit's outcome (committed).
func (h *core) appendEvents(ctx context.Context, kw keyWrite, parts ...unitPart) ([]eventstore.AppendResult, error) {
	kw, err := h.shredIn(ctx, kw, parts)
	if err != nil {
		return nil, err
	}
	appends := make([]eventstore.StreamAppend, len(parts))
	for i, p := range parts {
		appends[i] = eventstore.StreamAppend{Stream: p.s.name, Expected: p.s.expected(), Events: p.data}
		if p.data != nil {
			continue
		}
		data, err := encodeEvents(ctx, p.m, p.evs...)
		if err != nil {
			return nil, err
		}
		appends[i].Events = data
	}
	res, err := h.appendResolving(ctx, kw, appends...)
	h.streams.committed(parts, res, err)
	return res, err
}

// encodeEvents encodes evs with metadata m, each with its own schema
// version; the lineage m leaves empty is stamped from ctx (stamp).
func encodeEvents(ctx context.Context, m eventstore.Metadata, evs ...pending) ([]eventstore.EventData, error) {
	m = stamp(ctx, m)
	data := make([]eventstore.EventData, len(evs))
	for i, e := range evs {
		m.SchemaVersion = domain.SchemaVersionOf(e.e)
		d, err := eventstore.Encode(e.id, e.e, m)
		if err != nil {
			return nil, err
		}
		data[i] = d
	}
	return data, nil
}

// outcomeRepeatDelays are the pauses before each repeat of an append whose
// outcome is unknown: the first at once (a lost connection is replaced by a
// fresh one from the pool), then two short backoffs. Their number bounds the
// repeats.
var outcomeRepeatDelays = []time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond}

// appendResolving appends parts as one unit: one part with the store's
// Append, several with its AppendMulti (one transaction on PostgreSQL: all
// or nothing). Every commit point (the intent record, the order claim, a
// payment attempt's lease, a seat hold) and every follow-up goes through
// it. With kw, the unit writes the key table too (KeyUnits); a placement
// whose key is gone is errKeyGone, with nothing written. A repeat sends kw
// again: its write is idempotent (a key created once, a key deleted once
// with one erasure to record). It returns one result per part, in order.
//
// A unit is one statement in its own transaction, so when its answer is
// lost (the connection dropped after the server received it) it may have
// committed or not. The store's appends are idempotent: the same event ids
// at the same expected revisions succeed without writing when they are
// already there, and are written otherwise. So a unit that failed with
// anything but a revision conflict is repeated, byte for byte, up to
// len(outcomeRepeatDelays) times: a success means the events are in the
// streams where the decision put them (committed by the first try or by the
// repeat, never twice) and the caller goes on as if the first answer had
// arrived; a conflict means the first try did not commit and a stream
// moved on, which the caller handles as any lost race (an
// *eventstore.AppendPartError names the part for a unit of several). Not
// repeated: an append that ran into its time bound
// (context.DeadlineExceeded: the database is slow or a stream's lock held;
// repeating would only wait again) and an append whose caller is gone. If
// the outcome is still unknown it returns the error wrapped as
// domain.ErrUnavailable: the request answers 503, which is never stored as
// an outcome, and a repeat of the request, or recovery after the
// executor's lease, resolves what committed.
func (h *core) appendResolving(ctx context.Context, kw keyWrite, parts ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	res, err := h.appendUnit(ctx, kw, parts)
	if err == nil || errors.Is(err, eventstore.ErrWrongExpectedRevision) || errors.Is(err, errKeyGone) {
		return res, err
	}
	if !outcomeUnknown(ctx, err) {
		return res, unavailable(err)
	}
	first := err
	h.log.WarnContext(ctx, "append outcome unknown; repeating it to learn what committed", "stream", parts[0].Stream, "streams", len(parts), "err", err)
	for _, d := range outcomeRepeatDelays {
		if tick.Sleep(ctx, d) != nil {
			break
		}
		res, err = h.appendUnit(ctx, kw, parts)
		switch {
		case err == nil:
			h.metrics.UnknownAppend("resolved")
			h.log.InfoContext(ctx, "append outcome learned: the events are in the stream", "stream", parts[0].Stream, "streams", len(parts))
			return res, nil
		case errors.Is(err, eventstore.ErrWrongExpectedRevision):
			h.metrics.UnknownAppend("not_committed")
			return res, err
		}
		if !outcomeUnknown(ctx, err) {
			break
		}
	}
	h.metrics.UnknownAppend("unresolved")
	if err != first {
		err = fmt.Errorf("%w (first try: %w)", err, first)
	}
	return res, unavailable(err)
}

// appendUnit sends parts to the store once and, when they are stored,
// records what the service learns from an acknowledged append: the event
// ids written (writtenSet), the clock sample, the skew sample and the
// request's count of events.
func (h *core) appendUnit(ctx context.Context, kw keyWrite, parts []eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	tk, sent := h.streams.ticket(), time.Now()
	res, err := h.sendUnit(ctx, kw, parts)
	if err != nil {
		return nil, err
	}
	h.streams.appended(tk, sent, parts, res)
	n := 0
	for i, p := range parts {
		h.sampleSkew(p.Stream, p.Events, res[i])
		n += len(p.Events)
	}
	noteAppended(ctx, n)
	if kw.place != nil {
		h.streams.noteDone(keyPlaced(kw.place.orderID)) // the process manager need not repeat it
	} else if kw.create != nil && kw.create.held == nil && kw.create.intent != "" {
		h.streams.noteDone(keyPlaced(kw.create.orderID)) // created placed, with its order
	} else if kw.shred != "" {
		h.streams.noteDone(keyShredded(kw.shred)) // neither the order's end nor the process manager deletes it again
		if !kw.recorded {
			h.wakeErasures() // recorded here, its row waits for the reconciler's next pass, in a larger batch
		}
	}
	return res, nil
}

// sendUnit sends parts to the store once: with kw's key-table write
// through the key units, else one part with Append and more with
// AppendMulti.
func (h *core) sendUnit(ctx context.Context, kw keyWrite, parts []eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	switch {
	case kw.create != nil:
		c := kw.create
		ctx, span := h.unitSpan(ctx, parts)
		defer span.End()
		res, err := h.units.AppendCreatingKey(ctx, c.orderID, c.intent, c.dk, c.held, c.shredAt, parts...)
		endSpan(span, err)
		return res, err
	case kw.place != nil:
		ctx, span := h.unitSpan(ctx, parts)
		defer span.End()
		res, keyed, err := h.units.AppendPlacingKey(ctx, kw.place.orderID, kw.place.deadline, parts...)
		endSpan(span, err)
		if err == nil && !keyed {
			return nil, fmt.Errorf("order %s: %w", kw.place.orderID, errKeyGone)
		}
		return res, err
	case kw.shred != "":
		ctx, span := h.unitSpan(ctx, parts)
		defer span.End()
		res, err := h.units.AppendShreddingKey(ctx, kw.shred, parts...)
		endSpan(span, err)
		return res, err
	case len(parts) == 1:
		r, err := h.store.Append(ctx, parts[0].Stream, parts[0].Expected, parts[0].Events...)
		if err != nil {
			return nil, err
		}
		return []eventstore.AppendResult{r}, nil
	default:
		return h.store.AppendMulti(ctx, parts...)
	}
}

// outcomeUnknown reports whether a failed append (not a revision conflict)
// is worth repeating to learn its outcome: not after its time bound, not
// when the caller is gone, and not when the store refused it for its size
// (nothing was written).
func outcomeUnknown(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, eventstore.ErrAppendTooLarge)
}

// applier is a domain state that evolves one event at a time (the aggregates'
// Apply methods).
type applier[S any] interface {
	*S
	Apply(domain.Event)
}

// loadState loads stream name and returns the state S its events evolve to
// with the loaded stream (whose revision is the expected revision of the next
// append). A stream that does not exist is the zero S; errors are load's.
func loadState[S any, P applier[S]](ctx context.Context, h *core, name string) (S, *stream, error) {
	s, err := h.streams.load(ctx, name)
	if err != nil {
		var zero S
		return zero, nil, err
	}
	return fold[S, P](s.events), s, nil
}

// fold returns the state S that events evolve from the zero S.
func fold[S any, P applier[S]](events []domain.Event) S {
	var s S
	for _, e := range events {
		P(&s).Apply(e)
	}
	return s
}

// NewRegistry returns the eventstore registry of every domain event type
// (eventcodec.Registry): the codec that encodes what the use cases append
// and decodes every stream they load, as the projections do.
func NewRegistry() *eventstore.Registry { return eventcodec.Registry() }
