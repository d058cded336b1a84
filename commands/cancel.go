package commands

import (
	"context"
	"time"

	"github.com/retrysafe/booking/domain"
)

// CancelOrder cancels the caller's order. A confirmed order is
// refunded and cancelled at once, its tickets voided (OrderResult.Final
// true, 200). A pending order without an attempt is cancelled at once. With
// a payment in flight or unknown the order becomes cancelling (Final false,
// 202): no new send starts, and it ends cancelled once the payment resolves,
// a charge refunded, so an accepted cancel always ends cancelled with net
// charge 0 and tickets never valid — unless the provider refuses the refund
// because it does not know the charge: the order then goes to needs_review
// (Final true, 200 to the cancel and its repeats). Refusals (show started,
// order failed or in review) are *Rejection with 409, answered the same to
// every repeat; another actor's order is 404.
func (h *Commands) CancelOrder(ctx context.Context, req Request, orderID string) (OrderResult, error) {
	// Another actor's order, like an absent one, is refused before the
	// intent is recorded: a probe writes nothing and leaves the key unused.
	visible := func(time.Time) error {
		o, _, err := h.loadOrder(ctx, orderID)
		if err == nil && (!o.Exists() || o.Actor != req.Actor) {
			err = domain.ErrOrderNotFound
		}
		return err
	}
	run, err := h.beginIntent(ctx, req, map[string]any{"order_id": orderID}, nil, visible)
	if err != nil {
		return OrderResult{}, err
	}
	ctx = run.context(ctx)
	return h.cancelOrder(ctx, run, orderID)
}

// cancelOrder runs a cancel intent from wherever it stands (recovery calls it).
func (h *core) cancelOrder(ctx context.Context, run *intentRun, orderID string) (OrderResult, error) {
	req := run.req
	out := Outcome{Replayed: !run.created}
	var result OrderResult
	err := h.retryConflicts(ctx, func() error {
		o, s, err := h.loadOrder(ctx, orderID)
		if err != nil {
			return err
		}
		if !o.Exists() || o.Actor != req.Actor {
			return h.reject(ctx, run, domain.ErrOrderNotFound, "")
		}
		if o.CancelAccepted {
			h.resolveCancelling(ctx, o)
			result = OrderResult{Order: o, Final: o.Status != domain.OrderStatusCancelling, Outcome: out}
			return nil
		}
		show, err := h.getShow(ctx, o.ShowID)
		if err != nil {
			return err
		}
		now, err := h.now(ctx)
		if err != nil {
			return err
		}
		evs, derr := o.Cancel(req.Actor, now, show.StartsAt)
		if derr != nil {
			return h.reject(ctx, run, asDomain(derr), orderID)
		}
		if len(evs) == 0 {
			return errRetry
		}
		// At the revision the decision saw: a payment outcome recorded
		// meanwhile makes the cancel decide again on the new state.
		if _, err := h.commit(ctx, s, run.meta(now, ""), derived(run.cause(), evs)...); err != nil {
			return err
		}
		h.step(ctx, "cancel.recorded")
		if err := h.afterOrderEvents(ctx, orderID, evs); err != nil {
			return err
		}
		if o, _, err = h.loadOrder(ctx, orderID); err != nil {
			return err
		}
		h.resolveCancelling(ctx, o)
		result = OrderResult{Order: o, Final: o.Status != domain.OrderStatusCancelling, Outcome: out}
		return nil
	})
	if err != nil {
		return OrderResult{}, err
	}
	return result, nil
}

// resolveCancelling drives the payment of a cancelling order in the
// background (detached from the request), so it ends cancelled as soon as
// the payment resolves; the process manager and the reconciler do the same
// if this process dies.
func (h *core) resolveCancelling(ctx context.Context, o domain.Order) {
	if o.Status != domain.OrderStatusCancelling {
		return
	}
	go func() {
		if _, err := h.drivePayment(h.detach(ctx), o.ID, nil); err != nil {
			h.log.WarnContext(ctx, "cancelling order not resolved yet; the reconciler retries", "order_id", o.ID, "err", err)
		}
	}()
}
