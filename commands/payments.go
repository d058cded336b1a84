package commands

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
)

// ProviderKey returns the provider idempotency key of attempt n (1-based) of
// an order: "{deployment}-order-{orderID}-{n}", without the prefix when the
// deployment is empty (dev).
func (h *Handler) ProviderKey(orderID string, n int) string {
	k := "order-" + orderID + "-" + strconv.Itoa(n)
	if h.cfg.Deployment != "" {
		k = h.cfg.Deployment + "-" + k
	}
	return k
}

// TicketIDs returns the deterministic ticket ids of an order of quantity seats.
func TicketIDs(orderID string, quantity int) []string {
	ids := make([]string, quantity)
	for i := range ids {
		ids[i] = DerivedID(orderID, "ticket-"+strconv.Itoa(i+1))
	}
	return ids
}

// DrivePayment pushes an order's payment as far as it can go now: it starts
// attempt 1 when there is none, sends while this process holds the attempt's
// lease (the fence), and reconciles an attempt whose lease expired or whose
// outcome is unknown by querying the provider before any new send. It is a
// no-op for an order that is not pending, or while another process holds
// the lease. Safe to call concurrently and repeatedly: one goroutine per
// order runs in this process, and leases fence other processes.
func (h *Handler) DrivePayment(ctx context.Context, orderID string) error {
	unlock := h.sends.TryLock(orderID)
	if unlock == nil {
		return nil
	}
	defer unlock()
	for range 6 {
		o, s, err := h.LoadOrder(ctx, orderID)
		if err != nil {
			return err
		}
		if !o.Exists() || o.Status != domain.OrderStatusPending {
			return nil
		}
		now, err := h.now(ctx)
		if err != nil {
			return err
		}
		last := o.LastAttempt()
		budget := h.cfg.ProviderTimeout + h.cfg.SendMargin
		switch {
		case last == nil:
			if err := h.startAttempt(ctx, o, s, 1, now); err != nil {
				if errors.Is(err, errRetry) {
					continue
				}
				return err
			}
			continue
		case o.CanSend(last.N, h.cfg.Executor, now, budget) && last.Outcome == domain.OutcomeNone:
			return h.send(ctx, o, *last)
		case last.Outcome == domain.OutcomeNone && now.Before(last.LeaseUntil):
			return nil // another executor holds the lease and will record the outcome
		default:
			// The lease expired with no outcome, or the outcome is unknown.
			if now.Before(last.LeaseUntil) && last.Outcome == domain.OutcomeUnknown && last.Owner != h.cfg.Executor {
				return nil
			}
			done, err := h.reconcile(ctx, o, *last, now)
			if err != nil || done {
				return err
			}
			if err := h.takeOverAttempt(ctx, o, s, *last, now); err != nil {
				if errors.Is(err, errRetry) {
					continue
				}
				return err
			}
		}
	}
	return nil
}

// startAttempt appends PaymentAttemptStarted for attempt n with this process
// as the lease owner. errRetry on a lost race.
func (h *Handler) startAttempt(ctx context.Context, o domain.Order, s *stream, n int, now time.Time) error {
	if o.PaymentToken == "" {
		return h.recordEnd(ctx, o.ID, domain.OrderFailed{OrderID: o.ID, Reason: domain.FailNoAttempt}, "no payment token")
	}
	req := provider.NewChargeRequest(o.Amount.Amount, o.Amount.Currency, o.PaymentToken, o.ID, n)
	req.Description = fmt.Sprintf("%d ticket(s), order %s", o.Quantity, o.ID)
	body := req.Body()
	evs, err := o.Start(domain.StartAttempt{N: n, ProviderKey: h.ProviderKey(o.ID, n), Owner: h.cfg.Executor,
		LeaseUntil: now.Add(h.cfg.PaymentLease), RequestSHA256: sha256Hex(body), RequestBody: string(body)}, now)
	if err != nil {
		return errRetry
	}
	m := eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, OccurredAt: now}
	_, err = h.appendEvents(ctx, s.name, s.expected(), m, pending{NewID(), evs[0]})
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return errRetry
	}
	return err
}

// takeOverAttempt takes over the lease of attempt a (same key, same bytes),
// fenced by the order stream's revision. errRetry on a lost race.
func (h *Handler) takeOverAttempt(ctx context.Context, o domain.Order, s *stream, a domain.Attempt, now time.Time) error {
	evs, err := o.Start(domain.StartAttempt{N: a.N, Owner: h.cfg.Executor, LeaseUntil: now.Add(h.cfg.PaymentLease)}, now)
	if err != nil {
		return errRetry
	}
	m := eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, OccurredAt: now}
	_, err = h.appendEvents(ctx, s.name, s.expected(), m, pending{NewID(), evs[0]})
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return errRetry
	}
	if err == nil {
		h.metrics.Reconciliation("lease_taken_over")
	}
	return err
}

// reconcile asks the provider what happened to attempt a, by its key. It
// records a found charge and reports done. It reports not done when the
// provider has no charge for the key, so the same attempt may be sent again
// with the same key (safe inside the provider's idempotency window).
func (h *Handler) reconcile(ctx context.Context, o domain.Order, a domain.Attempt, now time.Time) (bool, error) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.ProviderTimeout)
	defer cancel()
	ch, found, err := h.payments.ChargeByKey(qctx, a.ProviderKey)
	if err != nil {
		return false, unavailable(err)
	}
	if !found {
		// After the key's window a search by metadata is the only safe look-up.
		found2, err := h.payments.SearchCharges(qctx, o.ID, a.N)
		if err != nil {
			return false, unavailable(err)
		}
		if len(found2) > 0 {
			ch, found = found2[0], true
		}
	}
	if !found {
		h.metrics.Reconciliation("not_found")
		return false, nil
	}
	h.metrics.Reconciliation("found_" + string(ch.Status))
	return true, h.recordPayment(ctx, o.ID, resultOf(a.N, ch))
}

// send makes the provider call of attempt a on a context detached from the
// request, with its own timeout, then records the outcome as a fact.
func (h *Handler) send(ctx context.Context, o domain.Order, a domain.Attempt) error {
	var res domain.PaymentResult
	for try := 0; ; try++ {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.ProviderTimeout)
		ch, err := h.payments.CreateChargeRaw(sctx, a.ProviderKey, []byte(a.RequestBody))
		cancel()
		h.step("payment.sent")
		var apiErr *provider.APIError
		switch {
		case err == nil:
			res = resultOf(a.N, ch)
		case errors.Is(err, provider.ErrDeclined):
			res = domain.PaymentResult{Attempt: a.N, Outcome: domain.OutcomeFailed, Code: "card_declined", Reason: "the payment was declined"}
			if errors.As(err, &apiErr) && apiErr.Charge != nil {
				res.ChargeID = apiErr.Charge.ID
				if apiErr.DeclineCode != "" {
					res.Code = apiErr.DeclineCode
				}
			}
		case errors.Is(err, provider.ErrKeyInUse):
			// In progress at the provider: never a decline. Back off and repeat
			// the same request while the lease allows.
			now, nerr := h.now(ctx)
			if nerr != nil || try >= 5 || !now.Add(h.cfg.ProviderTimeout+h.cfg.SendMargin).Before(a.LeaseUntil) {
				return nil // the reconciler takes over after the lease
			}
			time.Sleep(time.Duration(100<<try) * time.Millisecond)
			continue
		case errors.Is(err, provider.ErrIdempotency):
			h.log.Error("provider refused the attempt's key with different parameters; needs attention", "order_id", o.ID, "attempt", a.N)
			h.metrics.Reconciliation("idempotency_error")
			return err
		case errors.Is(err, provider.ErrUnavailable), errors.Is(err, provider.ErrInvalidRequest):
			// Nothing was executed; the reconciler retries after the lease.
			return unavailable(err)
		default: // ErrOutcomeUnknown and anything unexpected: the charge may exist
			res = domain.PaymentResult{Attempt: a.N, Outcome: domain.OutcomeUnknown, Reason: "no definitive answer from the provider"}
		}
		break
	}
	return h.recordPayment(ctx, o.ID, res)
}

func resultOf(attempt int, ch provider.Charge) domain.PaymentResult {
	if n := ch.Attempt(); n > 0 {
		attempt = n
	}
	r := domain.PaymentResult{Attempt: attempt, ChargeID: ch.ID, Amount: domain.Money{Amount: ch.Amount, Currency: ch.Currency}}
	if ch.Status == provider.StatusSucceeded {
		r.Outcome = domain.OutcomeSucceeded
	} else {
		r.Outcome, r.Code, r.Reason = domain.OutcomeFailed, ch.FailureCode, ch.FailureMessage
		if r.Code == "" {
			r.Code = "card_declined"
		}
	}
	return r
}

// recordPayment folds a provider fact into the order (deduplicated by charge
// id; fencing does not apply to recording facts) and runs the follow-ups.
func (h *Handler) recordPayment(ctx context.Context, orderID string, res domain.PaymentResult) error {
	for range 10 {
		o, s, err := h.LoadOrder(ctx, orderID)
		if err != nil {
			return err
		}
		evs := o.Record(res, TicketIDs(orderID, o.Quantity))
		if len(evs) == 0 {
			return nil
		}
		cause := orderID + "/" + res.ChargeID
		if res.ChargeID == "" {
			cause = orderID + "/attempt-" + strconv.Itoa(res.Attempt) + "/" + res.Outcome
		}
		now, err := h.now(ctx)
		if err != nil {
			return err
		}
		m := eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, OccurredAt: now}
		pend := make([]pending, len(evs))
		for i, e := range evs {
			pend[i] = pending{DerivedID(cause, e.EventType()), e}
		}
		_, err = h.appendEvents(ctx, s.name, s.expected(), m, pend...)
		if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			continue
		}
		if err != nil {
			return err
		}
		h.step("payment.recorded")
		for _, e := range evs {
			if r, ok := e.(domain.RefundRequested); ok && r.Reason == "redundant_effect" {
				h.metrics.RedundantEffect()
			}
		}
		return h.afterOrderEvents(ctx, orderID, evs)
	}
	return domain.ErrContention
}

// recordEnd appends an order-ending event (failure) and runs its follow-ups.
func (h *Handler) recordEnd(ctx context.Context, orderID string, e domain.Event, why string) error {
	for range 10 {
		o, s, err := h.LoadOrder(ctx, orderID)
		if err != nil {
			return err
		}
		if o.Status != domain.OrderStatusPending {
			return nil
		}
		now, err := h.now(ctx)
		if err != nil {
			return err
		}
		m := eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, OccurredAt: now}
		_, err = h.appendEvents(ctx, s.name, s.expected(), m, pending{DerivedID(orderID, e.EventType()), e})
		if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			continue
		}
		if err != nil {
			return err
		}
		h.log.Info("order ended", "order_id", orderID, "why", why)
		return h.afterOrderEvents(ctx, orderID, []domain.Event{e})
	}
	return domain.ErrContention
}

// afterOrderEvents runs the follow-ups of events just appended to an order:
// seats released after a failure or cancel, refunds sent after they were
// requested.
func (h *Handler) afterOrderEvents(ctx context.Context, orderID string, evs []domain.Event) error {
	o, _, err := h.LoadOrder(ctx, orderID)
	if err != nil {
		return err
	}
	for _, e := range evs {
		switch e := e.(type) {
		case domain.OrderFailed:
			if err := h.finishOrderEnd(ctx, o, domain.ReleasePaymentFailed, DerivedID(orderID, "OrderFailed")); err != nil {
				return err
			}
		case domain.OrderCancelled:
			if err := h.finishOrderEnd(ctx, o, domain.ReleaseCancelled, DerivedID(orderID, "OrderCancelled")); err != nil {
				return err
			}
		case domain.RefundRequested:
			if err := h.sendRefund(ctx, orderID, e); err != nil {
				h.log.Warn("refund not sent yet; the reconciler retries", "order_id", orderID, "charge_id", e.ChargeID, "err", err)
			}
		}
	}
	return nil
}

// sendRefund calls the provider's refund with key refund-{chargeID} (the
// RefundRequested event was recorded before) and records the result.
func (h *Handler) sendRefund(ctx context.Context, orderID string, r domain.RefundRequested) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.ProviderTimeout)
	defer cancel()
	ref, err := h.payments.Refund(rctx, r.Key, r.ChargeID, r.Amount.Amount)
	if err != nil {
		return err
	}
	for range 10 {
		o, s, err := h.LoadOrder(ctx, orderID)
		if err != nil {
			return err
		}
		evs := o.RecordRefund(r.ChargeID, ref.ID, domain.Money{Amount: ref.Amount, Currency: r.Amount.Currency})
		if len(evs) == 0 {
			return nil
		}
		now, err := h.now(ctx)
		if err != nil {
			return err
		}
		m := eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, OccurredAt: now}
		_, err = h.appendEvents(ctx, s.name, s.expected(), m, pending{DerivedID(orderID+"/"+r.ChargeID, "RefundSucceeded"), evs[0]})
		if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			continue
		}
		return err
	}
	return domain.ErrContention
}
