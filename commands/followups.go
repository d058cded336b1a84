package commands

import (
	"context"
	"fmt"
	"sync"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Log is the global event log as the process manager reads it.
type Log interface {
	SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error
}

// Checkpoints stores a named consumer's last processed log position
// (PostgreSQL table checkpoints).
type Checkpoints interface {
	Load(ctx context.Context, name string) (eventstore.Position, error)
	Save(ctx context.Context, name string, pos eventstore.Position) error
}

// FollowUpsName is the checkpoint name of the process manager.
const FollowUpsName = "process-manager"

// RunFollowUps is the process manager: it follows the log from its
// checkpoint and finishes every follow-up step with the same deterministic
// ids and expected revisions as the inline path, so a crash between steps
// leaves nothing unfinished (DESIGN §3). Payments of placed orders are
// driven asynchronously (they wait on leases and the provider). It blocks
// until ctx is done; the caller holds the lock that makes it the only
// instance across replicas. The checkpoint advances after each batch is
// handled, so a crash replays at most one batch, harmlessly.
func (h *Handler) RunFollowUps(ctx context.Context, log Log, cps Checkpoints) error {
	from, err := cps.Load(ctx, FollowUpsName)
	if err != nil {
		return fmt.Errorf("process manager: load checkpoint: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	return log.SubscribeAll(ctx, from, func(ctx context.Context, batch []eventstore.RecordedEvent) error {
		for _, r := range batch {
			if err := h.followUp(ctx, r, &wg); err != nil {
				return fmt.Errorf("process manager: %s@%d (%s): %w", r.Stream, r.Revision, r.Type, err)
			}
		}
		return cps.Save(ctx, FollowUpsName, batch[len(batch)-1].Position)
	})
}

func (h *Handler) followUp(ctx context.Context, r eventstore.RecordedEvent, wg *sync.WaitGroup) error {
	if !h.registry.Known(r.Type) {
		return nil
	}
	ev, err := h.registry.Decode(r.Type, r.Data)
	if err != nil {
		return err
	}
	m, _ := eventstore.DecodeMetadata(r.Metadata)
	m.CausationID = r.ID
	switch e := ev.(type) {
	case domain.SeatsHeld:
		return h.ensureReservationHeld(ctx, heldRecord{id: r.ID, e: e, meta: m})
	case domain.OrderClaimed:
		token, err := h.tokenOf(ctx, e.Intent)
		if err != nil {
			return err
		}
		before, _, err := h.LoadOrder(ctx, e.OrderID)
		if err != nil {
			return err
		}
		if _, err := h.finishClaim(ctx, e, r.ID, token); err != nil {
			return err
		}
		if !before.Exists() {
			// The request that claimed stopped before placing the order.
			h.metrics.Recovered("order_claim")
		}
	case domain.ExpiryClaimed:
		return h.finishExpiry(ctx, e, r.ID, m)
	case domain.OrderPlaced, domain.PaymentOutcomeUnknown, domain.OrderCancelRequested:
		orderID := orderIDOf(ev)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.DrivePayment(context.WithoutCancel(ctx), orderID); err != nil {
				h.log.Warn("payment step failed; the reconciler retries", "order_id", orderID, "err", err)
			}
		}()
	case domain.OrderFailed:
		return h.finishEnded(ctx, e.OrderID, domain.ReleasePaymentFailed)
	case domain.OrderCancelled:
		return h.finishEnded(ctx, e.OrderID, domain.ReleaseCancelled)
	case domain.RefundRequested:
		if err := h.sendRefund(ctx, e.OrderID, e); err != nil {
			h.log.Warn("refund not sent yet; the reconciler retries", "order_id", e.OrderID, "err", err)
		}
	}
	return nil
}

func orderIDOf(e domain.Event) string {
	switch e := e.(type) {
	case domain.OrderPlaced:
		return e.OrderID
	case domain.PaymentOutcomeUnknown:
		return e.OrderID
	case domain.OrderCancelRequested:
		return e.OrderID
	}
	return ""
}

func (h *Handler) finishEnded(ctx context.Context, orderID, reason string) error {
	o, _, err := h.LoadOrder(ctx, orderID)
	if err != nil || !o.Exists() {
		return err
	}
	return h.finishOrderEnd(ctx, o, reason, DerivedID(orderID, "ended"))
}

// tokenOf reads the payment token from the intent that claimed an order; ""
// when the intent is gone (retention passed), in which case payment fails.
func (h *Handler) tokenOf(ctx context.Context, intentStream string) (string, error) {
	s, err := h.load(ctx, intentStream)
	if err != nil {
		return "", err
	}
	in := fold[domain.Intent](s.events)
	t, _ := in.Recorded.Private["payment_token"].(string)
	return t, nil
}
