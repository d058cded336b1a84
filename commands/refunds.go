package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
)

// Refunds. A refund is recorded (RefundRequested, provider key
// refund-{paymentID}) before it is sent, and sent again with the same key
// and parameters until the provider's refund is recorded or definitively
// refused.

// Metadata of every refund the service sends: the order and the refund's
// idempotency key, so a refund whose answer was lost is recognized in the
// payment's list of refunds (Stripe lists no idempotency keys).
const (
	refundMetaOrderID = "order_id"
	refundMetaKey     = "refund_key"
)

// sendRefund calls the provider's refund of r's payment (r.ChargeID, a
// PaymentIntent id) with key r.Key (the RefundRequested event was recorded
// before) and records RefundSucceeded. A refund the provider already made
// (its answer lost — also a saved 500 the key replays — or its key
// forgotten) is found by listing the payment's refunds. A saved 500 whose
// request made no refund is replayed until the provider forgets the key
// (24 hours at Stripe): the refund stays pending, and its alert fires,
// until then. A provider that does not know the payment (404
// resource_missing, confirmed by reading the payment) ends the refund:
// RefundRefused and the order in review (Order.RefuseRefund), never
// retried. Returns the provider's or the store's error; the reconciler
// retries until RefundSucceeded or RefundRefused is recorded. Within a
// process, sends of one payment's refund (the request inline, the process
// manager, the reconciler) take turns, and one whose refund was recorded
// meanwhile calls nothing.
func (h *core) sendRefund(ctx context.Context, orderID string, r domain.RefundRequested) error {
	unlock := h.sends.Lock("refund/" + r.ChargeID)
	defer unlock()
	if o, _, err := h.loadOrder(ctx, orderID); err == nil {
		if done, ok := o.Refunds[r.ChargeID]; ok && (done.Succeeded || done.Refused) {
			return nil
		}
	}
	rctx, cancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
	defer cancel()
	ref, err := h.payments.Refund(rctx, r.Key, provider.PaymentRefundRequest{PaymentID: r.ChargeID, Amount: r.Amount.Amount,
		Metadata: map[string]string{refundMetaOrderID: orderID, refundMetaKey: r.Key}})
	var apiErr *provider.APIError
	if errors.Is(err, provider.ErrInvalidRequest) && errors.As(err, &apiErr) &&
		(apiErr.Code == provider.CodeChargeAlreadyRefunded || apiErr.Code == provider.CodeAmountTooLarge) {
		ref, err = h.findRefund(rctx, r)
	}
	if errors.Is(err, provider.ErrOutcomeUnknown) {
		// The refund may have been made: the provider saves the 500 of a
		// request that began executing and replays it for the key, so a
		// repeat never tells; the payment's list of refunds does.
		// On its own timeout: the refund's may be spent (a timeout).
		lctx, lcancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
		found, ok := h.findKeyedRefund(lctx, r)
		lcancel()
		if ok {
			ref, err = found, nil
		}
	}
	if refusal, ok := unknownPayment(err); ok {
		// A 404 to the refund alone could come from a wrong route or a proxy:
		// only a read of the payment that says the same makes it definitive.
		if _, gerr := h.payments.GetPayment(rctx, r.ChargeID); isUnknownPayment(gerr) {
			return h.refuseRefund(ctx, orderID, r.ChargeID, refusal)
		} else if gerr == nil {
			err = fmt.Errorf("%w (yet the provider shows payment %s)", err, r.ChargeID)
		}
	}
	if err != nil {
		h.metrics.Reconciliation("refund_pending")
		return err
	}
	if err := h.recordRefund(ctx, orderID, r.ChargeID, ref.ID, domain.Money{Amount: ref.Amount, Currency: r.Amount.Currency}); err != nil {
		return err
	}
	h.metrics.Reconciliation("refund_recorded")
	return nil
}

// findRefund returns the refunds the provider made of r's payment: the one
// sent with r's key (by its metadata) if there is one, and the total
// refunded.
func (h *core) findRefund(ctx context.Context, r domain.RefundRequested) (provider.PaymentRefund, error) {
	list, err := h.payments.ListRefunds(ctx, r.ChargeID)
	if err != nil {
		return provider.PaymentRefund{}, err
	}
	out := refundTotal(list, r.Key)
	if out.ID == "" {
		return provider.PaymentRefund{}, fmt.Errorf("payment %s: the provider refuses a refund but lists none", r.ChargeID)
	}
	return out, nil
}

// findKeyedRefund returns, like findRefund, the refunds the provider made
// of r's payment, but only when one of them was sent under r's key (by its
// metadata); false when none was, or the list failed.
func (h *core) findKeyedRefund(ctx context.Context, r domain.RefundRequested) (provider.PaymentRefund, bool) {
	list, err := h.payments.ListRefunds(ctx, r.ChargeID)
	if err != nil {
		return provider.PaymentRefund{}, false
	}
	for _, re := range list {
		if re.Metadata[refundMetaKey] == r.Key && re.Status != "failed" && re.Status != "canceled" {
			return refundTotal(list, r.Key), true
		}
	}
	return provider.PaymentRefund{}, false
}

// refundTotal sums the refunds in list that did not fail, with the id of
// the one sent under key (else the first).
func refundTotal(list []provider.PaymentRefund, key string) provider.PaymentRefund {
	var out provider.PaymentRefund
	for _, re := range list {
		if re.Status == "failed" || re.Status == "canceled" {
			continue
		}
		out.Amount += re.Amount
		if out.ID == "" || re.Metadata[refundMetaKey] == key {
			out.ID = re.ID
		}
	}
	return out
}

// unknownPayment reports whether err is the provider's "no such payment"
// (404 resource_missing), and returns its details.
func unknownPayment(err error) (*provider.APIError, bool) {
	var apiErr *provider.APIError
	if errors.Is(err, provider.ErrNotFound) && errors.As(err, &apiErr) && apiErr.Code == provider.CodeResourceMissing {
		return apiErr, true
	}
	return nil, false
}

func isUnknownPayment(err error) bool {
	_, ok := unknownPayment(err)
	return ok
}

// refuseRefund folds the provider's refusal of the refund of chargeID into
// the order (RefundRefused, OrderNeedsReview), once.
func (h *core) refuseRefund(ctx context.Context, orderID, chargeID string, refusal *provider.APIError) error {
	reason := refusal.Message
	if reason == "" {
		reason = "the provider knows no such payment"
	}
	c, err := h.update(ctx, domain.OrderStream(orderID), func(s *stream) (change, error) {
		o := fold[domain.Order](s.events)
		return change{events: derived(orderID+"/"+chargeID, o.RefuseRefund(chargeID, refusal.Code, reason)),
			meta: eventstore.Metadata{Actor: o.Actor, Intent: o.Intent}}, nil
	})
	if err != nil || len(c.events) == 0 {
		return err
	}
	h.metrics.Reconciliation("refund_refused")
	h.log.ErrorContext(ctx, "the provider does not know a payment whose refund was requested; the refund is not retried", "order_id", orderID,
		"charge_id", chargeID, "code", refusal.Code)
	h.observe(ctx, orderID, c.domainEvents())
	return nil
}

// recordRefund folds a refund the provider made (amount: the total it
// refunded of chargeID) into the order: Order.RecordRefund's events, which
// put the order in review when the provider refunded less than was
// requested; observe counts and logs the review.
func (h *core) recordRefund(ctx context.Context, orderID, chargeID, refundID string, amount domain.Money) error {
	c, err := h.update(ctx, domain.OrderStream(orderID), func(s *stream) (change, error) {
		o := fold[domain.Order](s.events)
		amt := amount
		if amt.Currency == "" {
			amt.Currency = o.Amount.Currency
		}
		evs := o.RecordRefund(chargeID, refundID, amt)
		return change{events: derived(orderID+"/"+chargeID, evs), meta: eventstore.Metadata{Actor: o.Actor, Intent: o.Intent}}, nil
	})
	if err == nil && len(c.events) > 0 {
		h.observe(ctx, orderID, c.domainEvents())
	}
	return err
}
