package commands

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Erasure as a fact. Deleting an order's data key (crypto-shredding, see
// keys.go) makes its secrets unreadable; the order's stream records when
// (PaymentSecretsShredded), so projections, the explained timeline and
// subscribers see it. The order of the two survives a crash at any point:
//
//  1. the key is deleted and, in the same statement, its erasure is left
//     to record (Keys.Shred, ShredMany, ShredDue,
//     KeyUnits.AppendShreddingKey: one commit, both or neither) — so no
//     erasure is recorded while the key exists;
//  2. the reconciler (runErasures: every interval, and at once when this
//     process deleted keys) appends PaymentSecretsShredded
//     to each order's stream, read and appended at its revision, with an id
//     derived from the order — so a repeat after a crash finds it there and
//     appends nothing;
//  3. then drops the erasures it recorded (Keys.ForgetErasures) — a crash
//     before that only repeats step 2, which does nothing.
//
// The request path pays no commit of its own for a delete (the key goes in
// the unit that ends the order with key units, else in keyShredder's
// batches off the request), and the erasures are recorded by the
// reconciler, erasureBatch per round trip of the key table. A key held for an order that never existed (a refused intent, a
// repeat's unused key) has no stream to record in: its erasure is dropped.

// erasureBatch bounds the erasures one round of recordErasures reads.
const erasureBatch = 500

// Erasure results (Metrics.Erasure).
const (
	ErasureRecorded = "recorded" // PaymentSecretsShredded appended to the order's stream
	ErasureNoOrder  = "no_order" // the key was held for an order that never existed
)

// runErasures records the erasures left to record (recordErasures) every
// interval and whenever this process deleted keys (wakeErasures), until
// ctx ends. RunReconciler runs it, so one process across replicas does.
func (h *core) runErasures(ctx context.Context, interval time.Duration) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.erasureWake:
		}
		h.recordErasures(ctx)
		t.Reset(interval)
	}
}

// wakeErasures asks runErasures, if this process runs it, to record now:
// keys were just deleted. It never blocks.
func (h *core) wakeErasures() {
	select {
	case h.erasureWake <- struct{}{}:
	default:
	}
}

// recordErasures records every erasure left to record (see above), a batch
// at a time, and returns how many it recorded. A failure is logged; the
// next pass retries what is left.
func (h *core) recordErasures(ctx context.Context) int {
	n := 0
	for ctx.Err() == nil {
		due, err := h.keys.Erasures(ctx, erasureBatch)
		if err != nil {
			h.log.WarnContext(ctx, "erasures not read; next pass retries", "err", err)
			return n
		}
		if len(due) == 0 {
			return n
		}
		h.step(ctx, "erasure.recording")
		done := make([]string, 0, len(due))
		for _, id := range slices.Sorted(maps.Keys(due)) {
			appended, exists, err := h.recordErasure(ctx, id, due[id])
			if err != nil {
				h.log.WarnContext(ctx, "erasure not recorded yet; next pass retries", "order_id", id, "err", err)
				continue
			}
			done = append(done, id)
			switch {
			case appended:
				n++
				h.metrics.Erasure(ErasureRecorded)
			case !exists:
				h.metrics.Erasure(ErasureNoOrder)
			}
		}
		if err := h.keys.ForgetErasures(ctx, done); err != nil {
			h.log.WarnContext(ctx, "recorded erasures not dropped; next pass finds them recorded", "err", err)
			return n
		}
		if len(done) < len(due) || len(due) < erasureBatch {
			return n
		}
	}
	return n
}

// recordErasure appends PaymentSecretsShredded{orderID, shreddedAt} to the
// order's stream unless it is there already (a pass cut short after the
// append). appended says whether this call appended it; exists is false
// when the order has no stream (its key was held for an order never
// placed).
func (h *core) recordErasure(ctx context.Context, orderID string, shreddedAt time.Time) (appended, exists bool, err error) {
	c, err := h.update(ctx, domain.OrderStream(orderID), func(s *stream) (change, error) {
		exists = s.exists
		if !s.exists || slices.ContainsFunc(s.events, isSecretsShredded) {
			return change{}, nil
		}
		o := fold[domain.Order](s.events)
		ev := domain.PaymentSecretsShredded{OrderID: orderID, ShreddedAt: shreddedAt.UTC()}
		return change{events: []pending{{DerivedID(orderID, "secrets-shredded"), ev}},
			meta: eventstore.Metadata{Actor: o.Actor, Intent: o.Intent}}, nil
	})
	return len(c.events) > 0, exists, err
}

func isSecretsShredded(e domain.Event) bool {
	_, ok := e.(domain.PaymentSecretsShredded)
	return ok
}
