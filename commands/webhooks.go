package commands

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/provider"
)

// Webhook refusals (400): nothing is recorded.
var (
	ErrWebhookSignature = &domain.Error{Kind: domain.Invalid, Code: "invalid-signature",
		Msg: "the Stripe-Signature header is missing or does not match the body"}
	ErrWebhookStale = &domain.Error{Kind: domain.Invalid, Code: "stale-signature",
		Msg: "the webhook's signature timestamp is outside the tolerance"}
	ErrWebhookMalformed = &domain.Error{Kind: domain.Invalid, Code: "malformed-event",
		Msg: "the webhook body is not a provider event"}
)

// ProcessedEventsRetention is how long a processed webhook event's id is
// remembered: longer than Stripe retries a delivery (up to three days,
// https://docs.stripe.com/webhooks#automatic-retries).
const ProcessedEventsRetention = 7 * 24 * time.Hour

// ProcessedEvents remembers the provider's webhook events this service
// processed, by event id (PostgreSQL table provider_events, implemented by
// package commands/webhookstore). It only saves work: facts are
// deduplicated by payment id in the order streams whatever it says.
// Implementations are safe for concurrent use.
type ProcessedEvents interface {
	// Processed reports whether event id was processed.
	Processed(ctx context.Context, id string) (bool, error)
	// MarkProcessed records that event id was processed at at; idempotent.
	MarkProcessed(ctx context.Context, id string, at time.Time) error
	// PruneProcessed forgets the events processed before before and
	// returns how many.
	PruneProcessed(ctx context.Context, before time.Time) (int64, error)
}

// WithProcessedEvents installs the table of processed webhook events. A
// Handler without one processes every delivery (harmlessly: facts are
// deduplicated by payment id).
func WithProcessedEvents(p ProcessedEvents) Option { return func(h *core) { h.processed = p } }

// noProcessedEvents remembers nothing.
type noProcessedEvents struct{}

func (noProcessedEvents) Processed(context.Context, string) (bool, error)          { return false, nil }
func (noProcessedEvents) MarkProcessed(context.Context, string, time.Time) error   { return nil }
func (noProcessedEvents) PruneProcessed(context.Context, time.Time) (int64, error) { return 0, nil }

// ReceiveWebhook handles one provider notification (provider outcomes are
// facts recorded by whoever sees them, see ARCHITECTURE.md, The rules of
// the idempotency contract): the adapter verifies the signature header on
// the raw body bytes (Stripe-Signature, with a tolerance around the
// database clock's now, https://docs.stripe.com/webhooks#verify-events)
// and decodes the event, which HandleProviderEvent folds into its order.
//
// Returns ErrWebhookSignature or ErrWebhookStale (nothing recorded),
// ErrWebhookMalformed, domain.ErrOrderNotFound when the event's payment
// names an order of this deployment that the event store does not know
// (answer non-2xx so the provider redelivers), or an error wrapping
// domain.ErrUnavailable. Safe for concurrent use; repeats and concurrent
// duplicates record nothing twice.
func (h *Commands) ReceiveWebhook(ctx context.Context, signature string, body []byte) error {
	now, err := h.streams.now(ctx)
	if err != nil {
		return err
	}
	ev, err := h.payments.ParseWebhook(body, signature, now)
	switch {
	case err == nil:
	case errors.Is(err, provider.ErrStaleTimestamp):
		return ErrWebhookStale
	case errors.Is(err, provider.ErrMalformedEvent):
		return ErrWebhookMalformed
	default:
		return ErrWebhookSignature
	}
	return h.HandleProviderEvent(ctx, ev)
}

// CheckWebhookHeader checks a provider notification's signature header
// before its body is read (Payments.CheckWebhookHeader, against the same
// clock as ReceiveWebhook): a missing or malformed header is
// ErrWebhookSignature, one signed outside the tolerance ErrWebhookStale,
// nothing recorded either way; or an error wrapping domain.ErrUnavailable
// when the clock cannot be read. A nil answer promises nothing about the
// signature, which needs the body: ReceiveWebhook verifies it. Safe for
// concurrent use.
func (h *Commands) CheckWebhookHeader(ctx context.Context, signature string) error {
	now, err := h.streams.now(ctx)
	if err != nil {
		return err
	}
	switch err := h.payments.CheckWebhookHeader(signature, now); {
	case err == nil:
		return nil
	case errors.Is(err, provider.ErrStaleTimestamp):
		return ErrWebhookStale
	default:
		return ErrWebhookSignature
	}
}

// HandleProviderEvent folds a verified provider event into its order. A
// Stripe endpoint receives every event of the account, so events that are
// not ours are acknowledged and ignored: another kind of object, a payment
// whose metadata names no order, or names another deployment. The event's
// own payload is not trusted for state (it may be stale, duplicated or
// reordered): the payment is fetched and its state recorded as a fact
// (Order.Record), the order found by the payment's metadata in the event
// store; a payment that requires the customer's action is recorded with
// its client secret sealed; a refunded payment also records the refund
// (charge.refunded; Order.RecordRefund). Facts are deduplicated by payment
// id in any case, and a payment the order does not need becomes a
// redundant effect, refunded.
//
// The checks come in this order, each cheaper than the next: a
// payment_intent.succeeded of ours whose order this process knows from
// memory to record that payment as succeeded, at once or once its own
// drive of the order's payment ended (succeededAfterDrive), is
// acknowledged with no statement to the database; then an event processed
// before (by id, ProcessedEvents) is acknowledged without a fetch, counted
// as webhook_duplicate; then a payment_intent.succeeded whose order, read,
// records the payment as succeeded (heldAlready) is acknowledged without a
// fetch. Every event acknowledged but a duplicate by id is marked processed
// (a batched write), so a redelivery that memory does not answer is still
// recognised by id.
//
// Returns domain.ErrOrderNotFound for a payment of this deployment whose
// order the event store does not know (yet), or an error wrapping
// domain.ErrUnavailable.
func (h *Commands) HandleProviderEvent(ctx context.Context, ev provider.WebhookEvent) error {
	if h.succeededNotice(ev) && h.succeededAfterDrive(ctx, ev.OrderID(), ev.PaymentID) {
		h.markProcessed(ctx, ev.ID)
		return nil
	}
	if seen, err := h.processed.Processed(ctx, ev.ID); err != nil {
		return unavailable(err)
	} else if seen {
		h.metrics.Reconciliation("webhook_duplicate")
		return nil
	}
	if err := h.handleEvent(ctx, ev); err != nil {
		return err
	}
	h.markProcessed(ctx, ev.ID)
	return nil
}

// markProcessed remembers event id as processed (ProcessedEvents) at the
// service clock; a failure is logged, since it only makes a redelivery
// processed again.
func (h *core) markProcessed(ctx context.Context, id string) {
	now, err := h.streams.now(ctx)
	if err == nil {
		err = h.processed.MarkProcessed(ctx, id, now)
	}
	if err != nil {
		h.log.WarnContext(ctx, "a processed webhook event was not remembered; a redelivery is processed again", "event_id", id, "err", err)
	}
}

// handleEvent is HandleProviderEvent without the deduplication by event id.
func (h *core) handleEvent(ctx context.Context, ev provider.WebhookEvent) error {
	// A payment_intent.* event carries the payment's metadata: one that is
	// not ours needs no fetch. A charge.* event carries none.
	if !ev.IsPaymentEvent() || (strings.HasPrefix(ev.Type, "payment_intent.") && !h.ours(ev.Metadata)) {
		ignoreWebhook(ctx)
		h.log.DebugContext(ctx, "provider event ignored: not about a payment of this deployment", "event_id", ev.ID, "type", ev.Type)
		return nil
	}
	known, held, err := h.heldAlready(ctx, ev)
	if err != nil || held {
		return err
	}
	qctx, cancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
	defer cancel()
	p, err := h.payments.GetPayment(qctx, ev.PaymentID)
	if errors.Is(err, provider.ErrNotFound) {
		ignoreWebhook(ctx)
		h.log.WarnContext(ctx, "provider event ignored: the provider knows no such payment", "event_id", ev.ID, "payment_id", ev.PaymentID)
		return nil
	}
	if err != nil {
		return unavailable(err)
	}
	if !h.ours(p.Metadata) {
		ignoreWebhook(ctx)
		h.log.DebugContext(ctx, "provider event ignored: the payment is not of this deployment", "event_id", ev.ID, "payment_id", p.ID)
		return nil
	}
	orderID := p.OrderID()
	o, s := known.o, known.s
	if s == nil || o.ID != orderID {
		if o, s, err = h.loadOrder(ctx, orderID); err != nil {
			return err
		}
	}
	if !o.Exists() {
		return domain.ErrOrderNotFound.With("payment " + p.ID + " names an order this service does not know")
	}
	// The facts the notice records, and what follows from them, keep the
	// correlation of the intent that last acted on the order.
	ctx = withStreamCorrelation(ctx, s)
	res := resultOf(p.Attempt(), p)
	if p.Attempt() == 0 && res.Outcome != domain.OutcomeSucceeded {
		// Every payment of an attempt names it; this one is no attempt's
		// outcome (money that moved would still be recorded, and refunded).
		ignoreWebhook(ctx)
		h.log.WarnContext(ctx, "provider event ignored: a payment of the order that names no attempt", "event_id", ev.ID,
			"order_id", orderID, "payment_id", p.ID)
		return nil
	}
	if res.Outcome == domain.OutcomeRequiresAction {
		res.SealedAction = h.sealAction(ctx, o, res.Attempt, p, nil)
	}
	// Decided on the stream just read (LoadOrder read its tail): the
	// append at its revision fences the decision, a conflict reads it
	// again, and a fact the order holds already costs no second read.
	if err := h.recordPaymentFrom(ctx, orderID, s, res, ObservedByWebhook, nil); err != nil {
		return err
	}
	if p.AmountRefunded > 0 {
		refunds, err := h.payments.ListRefunds(qctx, p.ID)
		if err != nil {
			return unavailable(err)
		}
		if ref := refundTotal(refunds, domain.RefundKey(p.ID)); ref.ID != "" {
			return h.recordRefund(ctx, orderID, p.ID, ref.ID, domain.Money{Amount: ref.Amount, Currency: o.Amount.Currency})
		}
	}
	return nil
}

// heldAlready reports whether the order a payment_intent.succeeded event
// names in its metadata (which the signature vouches for) records that
// payment as succeeded already: the notice then tells the order nothing
// new and is acknowledged without fetching the payment (a succeeded
// payment stays succeeded; a refund of it comes as its own charge.refunded
// event, which is fetched). It answers from memory when it can
// (succeededHere: no read), else reads the order and returns it, for the
// fetch's path to decide on; the zero orderState for other events and for
// an answer from memory.
func (h *core) heldAlready(ctx context.Context, ev provider.WebhookEvent) (orderState, bool, error) {
	if ev.Type != provider.EventPaymentIntentSucceeded {
		return orderState{}, false, nil
	}
	if h.succeededHere(ev.OrderID(), ev.PaymentID) {
		return orderState{}, true, nil
	}
	o, s, err := h.loadOrder(ctx, ev.OrderID())
	if err != nil {
		return orderState{}, false, err
	}
	c, ok := o.Charges[ev.PaymentID]
	return orderState{o: o, s: s}, ok && c.Outcome == domain.OutcomeSucceeded, nil
}

// succeededNotice reports whether ev is a payment_intent.succeeded about a
// payment of this deployment (by the metadata the signature vouches for).
func (h *core) succeededNotice(ev provider.WebhookEvent) bool {
	return ev.Type == provider.EventPaymentIntentSucceeded && ev.PaymentID != "" && h.ours(ev.Metadata)
}

// succeededHere reports, from this process's memory alone (no statement),
// whether order orderID records payment paymentID (not empty) as
// succeeded: this process appended that payment's PaymentSucceeded and the
// store acknowledged it (streams.wrote of succeededID), or the order
// stream it keeps (streams.keptOrder) folds to that charge succeeded. A
// true answer is exact whatever was appended since: orders are only
// appended to, their only OrderPlaced is their first event (appended at no
// stream; it alone resets the fold), and in the fold no other event
// removes a charge from Order.Charges or changes a succeeded one. A false
// answer proves nothing (the caller reads).
func (h *core) succeededHere(orderID, paymentID string) bool {
	if h.streams.wrote(succeededID(orderID, paymentID)) {
		return true
	}
	k := h.streams.keptOrder(domain.OrderStream(orderID))
	if k == nil {
		return false
	}
	c, ok := fold[domain.Order](k.events).Charges[paymentID]
	return ok && c.Outcome == domain.OutcomeSucceeded
}

// noticeDriveWait bounds how long a notice waits for this process's drive
// of its order's payment (succeededAfterDrive): about one provider call and
// one append, the time a drive takes to record the result the notice
// tells.
const noticeDriveWait = time.Second

// succeededAfterDrive is succeededHere, asked again once the drive of the
// order's payment that this process runs, if any, has ended (waiting at
// most noticeDriveWait): a provider sends its notice as it answers the
// call, so the notice tends to arrive while the drive is recording that
// very result, and is then answered from what the drive appended instead
// of racing it with a read, a fetch and an append. A drive still running
// after the wait leaves the answer to the caller's reads.
func (h *core) succeededAfterDrive(ctx context.Context, orderID, paymentID string) bool {
	if h.succeededHere(orderID, paymentID) {
		return true
	}
	return h.sends.awaitFree(ctx, orderID, noticeDriveWait) && h.succeededHere(orderID, paymentID)
}

// ours reports whether payment metadata names an order (a UUID, as this
// service writes it) of this deployment: metadata[deployment] is this
// deployment's, or absent for a deployment without a name (dev).
func (h *core) ours(meta map[string]string) bool {
	orderID := meta[provider.MetadataOrderID]
	if u, err := uuid.Parse(orderID); err != nil || u.String() != orderID {
		return false
	}
	return meta[provider.MetadataDeployment] == h.cfg.Deployment
}
