package commands

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/provider"
)

// WebhookTolerance is the largest accepted difference between a webhook's
// signature timestamp and the database clock.
const WebhookTolerance = 5 * time.Minute

// Webhook refusals (400): nothing is recorded.
var (
	ErrWebhookSignature = &domain.Error{Kind: domain.Invalid, Code: "invalid-signature",
		Msg: "the Provider-Signature header is missing or does not match the body"}
	ErrWebhookStale = &domain.Error{Kind: domain.Invalid, Code: "stale-signature",
		Msg: "the webhook's signature timestamp is outside the tolerance"}
	ErrWebhookMalformed = &domain.Error{Kind: domain.Invalid, Code: "malformed-event",
		Msg: "the webhook body is not a provider event"}
)

// ReceiveWebhook handles one provider notification (provider outcomes are
// facts recorded by whoever sees them, see ARCHITECTURE.md, The rules of the
// idempotency contract): it verifies the Provider-Signature header on the
// raw body bytes under secret, with a WebhookTolerance window on the database
// clock, parses the event and folds it into its order (HandleProviderEvent).
//
// Returns ErrWebhookSignature or ErrWebhookStale (nothing recorded),
// ErrWebhookMalformed, domain.ErrOrderNotFound when no order of the event
// store owns the charge (answer non-2xx so the provider redelivers), or an
// error wrapping domain.ErrUnavailable. Safe for concurrent use; repeats and
// concurrent duplicates record nothing twice.
func (h *Handler) ReceiveWebhook(ctx context.Context, secret []byte, signature string, body []byte) error {
	now, err := h.now(ctx)
	if err != nil {
		return err
	}
	if err := provider.VerifySignature(signature, body, secret, now, WebhookTolerance); err != nil {
		if errors.Is(err, provider.ErrStaleTimestamp) {
			return ErrWebhookStale
		}
		return ErrWebhookSignature
	}
	ev, err := provider.ParseEvent(body)
	if err != nil {
		return ErrWebhookMalformed.With(err.Error())
	}
	return h.HandleProviderEvent(ctx, ev)
}

// HandleProviderEvent folds a verified provider event into its order. The
// event's own payload is not trusted for state (it may be stale, duplicated
// or reordered): the charge is fetched from the provider and its
// authoritative state recorded as a fact (Order.Record), found through the
// charge's metadata order_id in the event store. A refunded charge also
// records the refund (Order.RecordRefund). Deduplication is by charge id
// (the facts' deterministic event ids), which covers every delivery of the
// same provider event id; a charge the order does not need (another charge
// id than the one that paid it, or one after a failure or cancel) becomes a
// redundant effect, refunded. Events of other types are ignored.
//
// Returns domain.ErrOrderNotFound for a charge without a known order, or an
// error wrapping domain.ErrUnavailable.
func (h *Handler) HandleProviderEvent(ctx context.Context, ev provider.Event) error {
	switch ev.Type {
	case provider.EventChargeSucceeded, provider.EventChargeFailed, provider.EventChargeRefunded:
	default:
		ignoreWebhook(ctx)
		h.log.DebugContext(ctx, "provider event ignored", "event_id", ev.ID, "type", ev.Type)
		return nil
	}
	qctx, cancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
	defer cancel()
	ch, err := h.payments.GetCharge(qctx, ev.Data.Object.ID)
	if errors.Is(err, provider.ErrNotFound) {
		return domain.ErrOrderNotFound.With("the provider knows no charge " + ev.Data.Object.ID)
	}
	if err != nil {
		return unavailable(err)
	}
	orderID := ch.Metadata[provider.MetadataOrderID]
	if u, err := uuid.Parse(orderID); err != nil || u.String() != orderID {
		return domain.ErrOrderNotFound.With("charge " + ch.ID + " names no order")
	}
	o, _, err := h.LoadOrder(ctx, orderID)
	if err != nil {
		return err
	}
	if !o.Exists() {
		return domain.ErrOrderNotFound.With("charge " + ch.ID + " names an order this service does not know")
	}
	if ch.Status != provider.StatusSucceeded && !h.declineOfAttempt(o, ch) {
		h.log.WarnContext(ctx, "decline of a request that is not one of the order's attempts; ignored",
			"order_id", orderID, "charge_id", ch.ID)
	} else if err := h.recordPayment(ctx, orderID, resultOf(ch.Attempt(), ch), ObservedByWebhook); err != nil {
		return err
	}
	if ch.RefundedAmount > 0 {
		refunds, err := h.payments.ListRefunds(qctx, ch.ID)
		if err != nil {
			return unavailable(err)
		}
		refundID := ""
		for _, re := range refunds {
			if refundID == "" || re.IdempotencyKey == domain.RefundKey(ch.ID) {
				refundID = re.ID
			}
		}
		if refundID != "" {
			return h.recordRefund(ctx, orderID, ch.ID, refundID, domain.Money{Amount: ch.RefundedAmount, Currency: ch.Currency})
		}
	}
	return nil
}
