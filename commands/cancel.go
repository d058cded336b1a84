package commands

import (
	"context"
	"errors"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// CancelOrder cancels the caller's order (DESIGN §5). A confirmed order is
// refunded and cancelled at once (OrderResult.Final true, 200); a payment in
// flight or unknown makes it cancelling (202) and it ends cancelled once the
// payment resolves, with any charge refunded. Refusals (show started, order
// failed) are *Rejection with 409, answered the same to every repeat;
// another actor's order is 404.
func (h *Handler) CancelOrder(ctx context.Context, req Request, orderID string) (OrderResult, error) {
	run, err := h.beginIntent(ctx, req, map[string]any{"order_id": orderID}, nil, nil)
	if err != nil {
		return OrderResult{}, err
	}
	return h.cancelOrder(ctx, run, orderID)
}

// cancelOrder runs a cancel intent from wherever it stands (recovery calls it).
func (h *Handler) cancelOrder(ctx context.Context, run *intentRun, orderID string) (OrderResult, error) {
	req := run.req
	out := Outcome{Replayed: !run.created}
	for range 10 {
		o, s, err := h.LoadOrder(ctx, orderID)
		if err != nil {
			return OrderResult{}, err
		}
		if !o.Exists() || o.Actor != req.Actor {
			return OrderResult{}, h.reject(ctx, run, domain.ErrOrderNotFound, "")
		}
		if o.Status == domain.OrderStatusCancelled || o.Status == domain.OrderStatusCancelling {
			return OrderResult{Order: o, Final: o.Status == domain.OrderStatusCancelled, Outcome: out}, nil
		}
		show, err := h.GetShow(ctx, o.ShowID)
		if err != nil {
			return OrderResult{}, err
		}
		now, err := h.now(ctx)
		if err != nil {
			return OrderResult{}, err
		}
		evs, derr := o.Cancel(req.Actor, now, show.StartsAt)
		if derr != nil {
			return OrderResult{}, h.reject(ctx, run, asDomain(derr), orderID)
		}
		pend := make([]pending, len(evs))
		for i, e := range evs {
			pend[i] = pending{DerivedID(run.stream, e.EventType()), e}
		}
		_, err = h.appendEvents(ctx, s.name, s.expected(), run.meta(now, ""), pend...)
		if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			continue
		}
		if err != nil {
			return OrderResult{}, err
		}
		h.step("cancel.recorded")
		if err := h.afterOrderEvents(ctx, orderID, evs); err != nil {
			return OrderResult{}, err
		}
	}
	return OrderResult{}, domain.ErrContention
}
