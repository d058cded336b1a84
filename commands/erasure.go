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
//     erasure is recorded while the key exists. The unit that ends an
//     order with key units (shredIn) also appends PaymentSecretsShredded
//     in that commit when it was decided on the whole order stream
//     (recordErasureIn);
//  2. the reconciler (runErasures: every interval, and at once when this
//     process deleted keys whose erasure it did not record) appends
//     PaymentSecretsShredded to each order's stream that does not hold it
//     yet, read and appended at its revision, with an id derived from the
//     order (secretsShreddedID) — so a repeat after a crash, or an erasure
//     its unit recorded, finds it there and appends nothing; one this
//     process appended (the written set) needs no read;
//  3. then drops the erasures it recorded (Keys.ForgetErasures) — a crash
//     before that only repeats step 2, which does nothing.
//
// The request path pays no commit of its own for a delete (the key goes in
// the unit that ends the order with key units, else in keyShredder's
// batches off the request), and the erasures are recorded in that unit or
// by the reconciler, erasureBatch per round trip of the key table. A key
// held for an order that never existed (a refused intent, a repeat's
// unused key) has no stream to record in: its erasure is dropped.

// erasureBatch bounds the erasures one round of recordErasures reads.
const erasureBatch = 500

// Erasure results (Metrics.Erasure).
const (
	ErasureRecorded = "recorded" // the order's stream holds PaymentSecretsShredded (appended by the reconciler or by the unit that deleted the key); counted when its row is dropped
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
// at a time, and returns how many it appended. Each erasure is counted
// (Metrics.Erasure) when its row is dropped, by the one pass that drops
// it, so a pass whose drop is lost counts nothing and the next one counts
// it once. A failure is logged; the next pass retries what is left.
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
		recorded := make(map[string]bool, len(due))
		for _, id := range slices.Sorted(maps.Keys(due)) {
			appended, inStream, err := h.recordErasure(ctx, id, due[id])
			if err != nil {
				h.log.WarnContext(ctx, "erasure not recorded yet; next pass retries", "order_id", id, "err", err)
				continue
			}
			recorded[id] = inStream
			if appended {
				n++
			}
		}
		dropped, err := h.keys.ForgetErasures(ctx, slices.Collect(maps.Keys(recorded)))
		if err != nil {
			h.log.WarnContext(ctx, "recorded erasures not dropped; next pass finds them recorded", "err", err)
			return n
		}
		for _, id := range dropped {
			if recorded[id] {
				h.metrics.Erasure(ErasureRecorded)
			} else {
				h.metrics.Erasure(ErasureNoOrder)
			}
		}
		if len(recorded) < len(due) || len(due) < erasureBatch {
			return n
		}
	}
	return n
}

// recordErasure appends PaymentSecretsShredded{orderID, shreddedAt} to the
// order's stream unless it is there already (recorded by the unit that
// deleted the key, or by a pass cut short after the append); one this
// process appended is known without a read. appended says whether this
// call appended it; recorded whether the stream holds it when the call
// returns, which it does unless the order has no stream (its key was held
// for an order never placed).
func (h *core) recordErasure(ctx context.Context, orderID string, shreddedAt time.Time) (appended, recorded bool, err error) {
	if h.streams.wrote(secretsShreddedID(orderID)) {
		return false, true, nil
	}
	c, err := h.update(ctx, domain.OrderStream(orderID), func(s *stream) (change, error) {
		recorded = s.exists
		if !s.exists || slices.ContainsFunc(s.events, isSecretsShredded) {
			return change{}, nil
		}
		o := fold[domain.Order](s.events)
		ev := domain.PaymentSecretsShredded{OrderID: orderID, ShreddedAt: shreddedAt.UTC()}
		return change{events: []pending{{secretsShreddedID(orderID), ev}},
			meta: eventstore.Metadata{Actor: o.Actor, Intent: o.Intent}}, nil
	})
	return len(c.events) > 0, recorded && err == nil, err
}

// recordErasureIn adds PaymentSecretsShredded to p, the order's part of a
// unit that deletes orderID's key (shredIn), when p was decided on the
// whole order stream and neither the stream nor p records the erasure:
// the key is then gone and its erasure recorded in one commit. A part
// decided on the stream known only by its revision, or encoded before (its
// metadata is in its bytes), is left as it is, and the reconciler records
// the erasure the delete leaves. It reports whether it added the event.
// The erasure's time is the part's decision (its OccurredAt), else the
// clock's now; the error is the clock's.
func (h *core) recordErasureIn(ctx context.Context, p *unitPart, orderID string) (bool, error) {
	s := p.s
	whole := s.exists && uint64(len(s.events)) == uint64(s.last)+1
	if !whole || p.data != nil || slices.ContainsFunc(s.events, isSecretsShredded) ||
		slices.ContainsFunc(p.evs, func(e pending) bool { return isSecretsShredded(e.e) }) {
		return false, nil
	}
	at := p.m.OccurredAt
	if at.IsZero() {
		var err error
		if at, err = h.streams.now(ctx); err != nil {
			return false, err
		}
	}
	e := pending{secretsShreddedID(orderID), domain.PaymentSecretsShredded{OrderID: orderID, ShreddedAt: at.UTC()}}
	p.evs = append(slices.Clip(p.evs), e)
	return true, nil
}

// secretsShreddedID is the id of an order's PaymentSecretsShredded,
// derived from the order: whoever records the erasure appends the same id.
func secretsShreddedID(orderID string) string { return DerivedID(orderID, "secrets-shredded") }

func isSecretsShredded(e domain.Event) bool {
	_, ok := e.(domain.PaymentSecretsShredded)
	return ok
}
