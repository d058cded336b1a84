package commands

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
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

// The process manager's pace (fanout.LingerConfig): it handles an event
// once followUpAge has passed since the event reached this process, in
// rounds at most followUpRound apart, and saves its checkpoint once per
// round. The request that wrote a commit point appends its follow-ups
// inline within that time as a rule, so the process manager then finds them
// done (core.written, and the order's later events in the rounds' look
// ahead) instead of repeating reads and no-op appends; it is a safety net
// for requests that stopped, and its added delay is at most followUpRound
// (ARCHITECTURE.md, "Performance").
const (
	followUpAge   = time.Second
	followUpRound = 2 * time.Second
)

// RunFollowUps is the process manager: it follows the log from its
// checkpoint and finishes every follow-up step with the same deterministic
// ids and expected revisions as the inline path, so a crash between steps
// leaves nothing unfinished (see ARCHITECTURE.md, The promise: derived
// identities). Payments of placed orders are
// driven asynchronously (they wait on leases and the provider). It blocks
// until ctx is done; the caller holds the lock that makes it the only
// instance across replicas. Events are handled in rounds (followUpAge,
// followUpRound) and the checkpoint advances after each round is handled,
// so a crash replays at most one round, harmlessly. A follow-up whose
// events this process already appended (the request or a payment step
// wrote them: core.written) is recognised without reading or appending,
// and so is one that a later event of the same order, already received,
// makes moot (followUpAhead).
func (h *Workers) RunFollowUps(ctx context.Context, log Log, cps Checkpoints) error {
	from, err := cps.Load(ctx, FollowUpsName)
	if err != nil {
		return fmt.Errorf("process manager: load checkpoint: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	cfg := fanout.LingerConfig{Delay: followUpRound, Age: followUpAge}
	return fanout.Linger(ctx, log, from, cfg, func(ctx context.Context, ready, ahead []eventstore.RecordedEvent) error {
		later := newFollowUpAhead(ready, ahead)
		for i, r := range ready {
			if err := h.followUp(ctx, r, later.at(i, r.Stream), &wg); err != nil {
				return fmt.Errorf("process manager: %s@%d (%s): %w", r.Stream, r.Revision, r.Type, err)
			}
		}
		return cps.Save(ctx, FollowUpsName, ready[len(ready)-1].Position)
	})
}

// FollowedUp reports whether the process manager acts on events of type
// (an event type name of domain.EventTypes): every case of followUp's
// switch. An event of any other type needs no follow-up, so a log whose
// only events after the process manager's checkpoint are of such types has
// every follow-up done — what a test waiting for the background work to
// settle checks while a pending payment keeps renewing its lease
// (PaymentAttemptStarted) faster than the process manager's rounds.
func FollowedUp(eventType string) bool { return followedUpTypes[eventType] }

// followedUpTypes are the event types of followUp's cases; keep the two
// together (TestFollowedUpTypesAreTheSwitchCases).
var followedUpTypes = map[string]bool{
	domain.TypeSeatsHeld: true, domain.TypeOrderClaimed: true, domain.TypeExpiryClaimed: true,
	domain.TypeOrderPlaced: true, domain.TypePaymentOutcomeUnknown: true, domain.TypeOrderCancelRequested: true,
	domain.TypeOrderFailed: true, domain.TypeOrderCancelled: true, domain.TypeOrderConfirmed: true, domain.TypeOrderNeedsReview: true,
	domain.TypeIntentRejected: true, domain.TypeRefundRequested: true,
}

// driveEvents are the order events that make the process manager drive the
// order's payment (event types). An event of domain.OrderEndTypes leaves
// nothing to drive until a later driveEvents event (an OrderCancelRequested
// after a confirmation).
var driveEvents = map[string]bool{domain.TypeOrderPlaced: true, domain.TypePaymentOutcomeUnknown: true, domain.TypeOrderCancelRequested: true}

// followUpAhead is what a round of the process manager knows of the log
// after each of its events: for each order stream, the index (in ready,
// then ahead) of its last event that drives or ends the order, and of its
// last event after which the order can send no more (endsSending). Every
// such event is committed, so what follows from it holds whatever else
// happens: a drive of the order before a later drive or end is moot (the
// later event drives it, or the order has ended, which DrivePayment would
// read and stop at), and dropping the order's held token (Keys.Placed)
// before its key is deleted is moot (the later event deletes the key, and it
// is handled before the checkpoint passes it).
type followUpAhead struct {
	lastDrive, lastEnd map[string]int
}

// laterOf is what followUpAhead says of one event.
type laterOf struct {
	// drive: a later event drives or ends the same order.
	drive bool
	// ends: after a later event the order can send no more.
	ends bool
}

func newFollowUpAhead(ready, ahead []eventstore.RecordedEvent) followUpAhead {
	a := followUpAhead{lastDrive: map[string]int{}, lastEnd: map[string]int{}}
	note := func(i int, r *eventstore.RecordedEvent) {
		if driveEvents[r.Type] || domain.EndsOrder(r.Type) {
			a.lastDrive[r.Stream] = i
		}
		if domain.EndsSending(r.Type) {
			a.lastEnd[r.Stream] = i
		}
	}
	for i := range ready {
		note(i, &ready[i])
	}
	for i := range ahead {
		note(len(ready)+i, &ahead[i])
	}
	return a
}

// at returns what is known after the i-th ready event, of stream.
func (a followUpAhead) at(i int, stream string) laterOf {
	d, okD := a.lastDrive[stream]
	e, okE := a.lastEnd[stream]
	return laterOf{drive: okD && d > i, ends: okE && e > i}
}

// followedTypes are the event types followUp acts on; the others are not
// decoded.
var followedTypes = map[string]bool{
	domain.TypeSeatsHeld: true, domain.TypeOrderClaimed: true, domain.TypeExpiryClaimed: true,
	domain.TypeOrderPlaced: true, domain.TypePaymentOutcomeUnknown: true, domain.TypeOrderCancelRequested: true,
	domain.TypeOrderFailed: true, domain.TypeOrderCancelled: true, domain.TypeOrderConfirmed: true,
	domain.TypeOrderNeedsReview: true, domain.TypeIntentRejected: true, domain.TypeRefundRequested: true,
}

// doneHere reports whether a request of this process did the follow-ups of
// commit point r itself (core.written): the opening of a held
// reservation, the placing of a claimed order, an expiry's release. It
// needs r's id only, so such an event is not decoded.
func (h *core) doneHere(r eventstore.RecordedEvent) bool {
	switch r.Type {
	case domain.TypeSeatsHeld:
		return h.written.has(DerivedID(r.ID, "reservation-held"))
	case domain.TypeOrderClaimed:
		return h.written.has(DerivedID(r.ID, "order-placed"), DerivedID(r.ID, "reservation-ordered"))
	case domain.TypeExpiryClaimed:
		return h.written.has(DerivedID(r.ID, "seats-released"), DerivedID(r.ID, "reservation-expired"))
	}
	return false
}

func (h *core) followUp(ctx context.Context, r eventstore.RecordedEvent, later laterOf, wg *sync.WaitGroup) error {
	if !followedTypes[r.Type] || !h.registry.Known(r.Type) || h.doneHere(r) {
		return nil
	}
	ev, err := h.registry.Decode(r.Type, r.Data)
	if err != nil {
		return err
	}
	m, _ := eventstore.DecodeMetadata(r.Metadata)
	m.CausationID = r.ID
	// What follows from the event carries its lineage: the intent's
	// correlation id and the request behind it (in logs through the
	// logger's context, too), and the event as its cause.
	ctx = withCause(ctx, m, r.ID)
	switch e := ev.(type) {
	case domain.SeatsHeld:
		return h.ensureReservationHeld(ctx, heldRecord{id: r.ID, e: e, meta: m})
	case domain.OrderClaimed:
		return h.followClaim(ctx, r, e)
	case domain.ExpiryClaimed:
		return h.finishExpiry(ctx, e, r.ID, m)
	case domain.OrderPlaced, domain.PaymentOutcomeUnknown, domain.OrderCancelRequested:
		return h.followPayment(ctx, ev, later, wg)
	case domain.OrderFailed:
		if err := h.shred(ctx, e.OrderID); err != nil {
			return err
		}
		return h.finishEnded(ctx, e.OrderID, domain.ReleasePaymentFailed, r.ID)
	case domain.OrderCancelled:
		if err := h.shred(ctx, e.OrderID); err != nil {
			return err
		}
		return h.finishEnded(ctx, e.OrderID, domain.ReleaseCancelled, r.ID)
	case domain.OrderConfirmed:
		return h.shred(ctx, e.OrderID)
	case domain.OrderNeedsReview:
		return h.shred(ctx, e.OrderID)
	case domain.IntentRejected:
		return h.shredRefusedOrder(ctx, r.Stream)
	case domain.RefundRequested:
		if err := h.sendRefund(ctx, e.OrderID, e); err != nil {
			h.log.WarnContext(ctx, "refund not sent yet; the reconciler retries", "order_id", e.OrderID, "err", err)
		}
	}
	return nil
}

// followClaim is the follow-up of OrderClaimed r (e): the order placed and
// the reservation marked ordered (unless this process's request did both:
// doneHere).
func (h *core) followClaim(ctx context.Context, r eventstore.RecordedEvent, e domain.OrderClaimed) error {
	before, _, err := h.loadOrder(ctx, e.OrderID)
	if err != nil {
		return err
	}
	if _, err := h.finishClaim(ctx, e, r.ID, openedAt(r)); err != nil {
		return err
	}
	if !before.Exists() {
		// The request that claimed stopped before placing the order.
		h.metrics.Recovered("order_claim")
	}
	return nil
}

// followPayment is the follow-up of an order event after which the payment
// moves (OrderPlaced, PaymentOutcomeUnknown, OrderCancelRequested): the
// token dropped from the key table once the order carries it, the key
// deleted on a cancel, and the payment driven in the background unless a
// later event of the order does it (later).
func (h *core) followPayment(ctx context.Context, ev domain.Event, later laterOf, wg *sync.WaitGroup) error {
	orderID := orderIDOf(ev)
	switch e := ev.(type) {
	case domain.OrderPlaced:
		// The order carries the token now: drop it from the key table
		// (unless this process's request did, or the key is gone, or a
		// later event already received deletes it).
		if !later.ends && !h.written.has(keyPlaced(orderID)) && !h.written.has(keyShredded(orderID)) {
			if err := h.keys.Placed(ctx, orderID, e.PaymentDeadline); err != nil {
				return unavailable(err)
			}
			h.written.note(keyPlaced(orderID))
		}
	case domain.OrderCancelRequested:
		if err := h.shred(ctx, orderID); err != nil {
			return err
		}
	}
	if later.drive {
		return nil // a later event of the order drives it, or it has ended
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := h.drivePayment(h.detach(ctx), orderID, nil); err != nil {
			h.log.WarnContext(ctx, "payment step failed; the reconciler retries", "order_id", orderID, "err", err)
		}
	}()
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

// finishEnded does the follow-ups of the event causeID that ended order
// orderID, unless this process did them.
func (h *core) finishEnded(ctx context.Context, orderID, reason, causeID string) error {
	if h.written.has(DerivedID(orderID, "seats-released"), DerivedID(orderID, "reservation-released")) {
		return nil // the payment step that ended the order released its seats and reservation
	}
	o, _, err := h.loadOrder(ctx, orderID)
	if err != nil || !o.Exists() {
		return err
	}
	return h.finishOrderEnd(ctx, o, reason, causeID)
}

// shredRefusedOrder deletes the key held for the order of a refused order
// intent: that order never exists.
func (h *core) shredRefusedOrder(ctx context.Context, intentStream string) error {
	s, err := h.load(ctx, intentStream)
	if err != nil {
		return err
	}
	in := fold[domain.Intent](s.events)
	if !in.Exists() || in.Rejection == nil || in.Recorded.Operation != OpPlaceOrder {
		return nil
	}
	return h.shred(ctx, in.Recorded.TargetID)
}
