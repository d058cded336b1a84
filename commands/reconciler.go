package commands

import (
	"context"
	"sync"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// ReconcilerName is the name of the payment reconciler worker (its
// exclusive lock across replicas).
const ReconcilerName = "payment-reconciler"

// Reconciler limits.
const (
	reconcileBatch   = 200 // order ids per PendingOrders page
	reconcileWorkers = 8   // orders reconciled concurrently
)

// PendingOrders finds the orders that may need payment work, straight from
// the event log (never from a read model): orders placed and not ended
// (pending or cancelling: unknown outcomes, expired leases, deadlines),
// orders with a refund requested and not recorded as succeeded, and orders
// with a payment that required the customer's action whose final state is
// not recorded (PaymentActionRequired without a PaymentSucceeded or
// PaymentFailed of the same payment id: it is to be cancelled).
type PendingOrders interface {
	// PendingOrders returns up to limit such order ids greater than after
	// (in byte order), ascending; "" starts at the beginning. It may return
	// orders that turn out to need nothing.
	PendingOrders(ctx context.Context, after string, limit int) ([]string, error)
}

// OrderRule is the rule by which the event store finds the orders the
// reconciler visits (eventstore.PendingRule, answered by
// logindex.Index.Pending on either backend): the domain's
// order streams without an event of domain.OrderEndTypes, or with one of
// domain.OrderObligations open.
func OrderRule() eventstore.PendingRule {
	owed := make([]eventstore.Obligation, len(domain.OrderObligations))
	for i, o := range domain.OrderObligations {
		owed[i] = eventstore.Obligation(o)
	}
	return eventstore.PendingRule{Category: domain.CategoryOrder, Ends: domain.OrderEndTypes, Owed: owed}
}

// RunReconciler is the payment reconciler (see ARCHITECTURE.md, Background
// jobs): every interval it
// pages through pending.PendingOrders and reconciles each order
// (ReconcileOrder), a few at a time; beside it, it records the erasures of
// deleted order keys (runErasures). It blocks until ctx is done and returns
// ctx's error; failures of a pass or an order are logged and retried on the
// next pass. The caller makes it the only instance across replicas (leases
// would keep several safe, only busier).
func (h *Workers) RunReconciler(ctx context.Context, pending PendingOrders, interval time.Duration) error {
	var erasures sync.WaitGroup
	erasures.Go(func() { h.runErasures(ctx, interval) })
	defer erasures.Wait()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if n, err := h.ReconcilePass(ctx, pending); err != nil && ctx.Err() == nil {
			h.log.WarnContext(ctx, "payment reconciliation pass failed; retrying", "orders", n, "err", err)
		}
		t.Reset(interval)
	}
}

// ReconcilePass reconciles every order pending.PendingOrders lists, once. It
// returns how many orders it looked at, and the listing's error (an order's
// failure is logged, not returned). It blocks until the pass is done.
//
// The pass first deletes the order keys that are due (ShredDue): keys of
// orders whose payment deadline passed, and keys held for orders never
// placed within the intent retention; then the keys held for orders that
// can never be placed, within a minute (shredUnplaced); their erasures are
// recorded by runErasures. It also forgets the webhook events processed
// more than ProcessedEventsRetention ago. A failure there is logged.
func (h *Workers) ReconcilePass(ctx context.Context, pending PendingOrders) (int, error) {
	h.shredDue(ctx)
	h.shredUnplaced(ctx)
	h.pruneProcessed(ctx)
	sem := make(chan struct{}, reconcileWorkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	n, after := 0, ""
	for {
		ids, err := pending.PendingOrders(ctx, after, reconcileBatch)
		if err != nil {
			return n, unavailable(err)
		}
		for _, id := range ids {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return n, ctx.Err()
			}
			n++
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := h.ReconcileOrder(ctx, id); err != nil && ctx.Err() == nil {
					h.log.WarnContext(ctx, "order not reconciled yet; next pass retries", "order_id", id, "err", err)
				}
			}()
		}
		if len(ids) < reconcileBatch {
			return n, nil
		}
		after = ids[len(ids)-1]
	}
}

// ReconcileOrder finishes what an order's payment still needs: it sends the
// refunds requested and not yet recorded (same key refund-{chargeID} every
// time), cancels the payments waiting for the customer's action of an
// order that can no longer use them (same key cancel-{paymentID}), then
// drives the payment (DrivePayment: reconcile unknown outcomes and expired
// leases with the provider, retry the same attempt inside the window,
// start a new attempt only outside it, settle a payment waiting for the
// customer's action, fail past the deadline, finish a cancel). It returns
// the first error; safe to call concurrently and repeatedly.
func (h *Workers) ReconcileOrder(ctx context.Context, orderID string) error {
	o, s, err := h.loadOrder(ctx, orderID)
	if err != nil || !o.Exists() {
		return err
	}
	ctx = withStreamCorrelation(ctx, s)
	var firstErr error
	for _, r := range o.PendingRefunds() {
		req := domain.RefundRequested{OrderID: o.ID, ChargeID: r.ChargeID, Amount: r.Amount, Key: r.Key, Reason: r.Reason}
		if err := h.sendRefund(ctx, o.ID, req); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if err := h.cancelPayments(ctx, o); err != nil && firstErr == nil {
		firstErr = err
	}
	if err := h.DrivePayment(ctx, orderID); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// shredDue deletes the order keys due by the database clock; a failure is
// logged and the next pass retries.
func (h *core) shredDue(ctx context.Context) {
	now, err := h.streams.now(ctx)
	if err == nil {
		var n int64
		if n, err = h.keys.ShredDue(ctx, now); err == nil && n > 0 {
			h.wakeErasures()
			h.log.InfoContext(ctx, "order keys deleted: payment deadline or intent retention passed", "keys", n)
		}
	}
	if err != nil && ctx.Err() == nil {
		h.log.WarnContext(ctx, "due order keys not deleted yet; next pass retries", "err", err)
	}
}

// pruneProcessed forgets the webhook events processed more than
// ProcessedEventsRetention ago (database clock); a failure is logged and
// the next pass retries.
func (h *core) pruneProcessed(ctx context.Context) {
	now, err := h.streams.now(ctx)
	if err == nil {
		_, err = h.processed.PruneProcessed(ctx, now.Add(-ProcessedEventsRetention))
	}
	if err != nil && ctx.Err() == nil {
		h.log.WarnContext(ctx, "processed webhook events not pruned yet; next pass retries", "err", err)
	}
}
