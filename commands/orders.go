package commands

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// PlaceOrderCommand is the normalized body of POST /v1/orders. PaymentToken
// is a secret: it is fingerprinted as its SHA-256 and otherwise kept only
// sealed under the order's data key (see keys.go), never in an intent.
type PlaceOrderCommand struct {
	ReservationID string
	PaymentToken  string
}

// Canonical returns the normalized command fingerprinted for the intent. The
// token enters as its SHA-256, so the intent's stored command holds no secret
// while a different token still changes the fingerprint.
func (c PlaceOrderCommand) Canonical() map[string]any {
	return map[string]any{"reservation_id": c.ReservationID,
		"payment": map[string]any{"token_sha256": sha256Hex([]byte(c.PaymentToken))}}
}

// OrderResult is the answer to POST /v1/orders or a cancel: the order's
// current state and whether its outcome is final.
type OrderResult struct {
	Order domain.Order
	// Final is true once the order's first payment outcome is known; until
	// then the API answers 202.
	Final bool
	Outcome
}

// PlaceOrder claims the reservation for a new order (the commit point is the
// no-stream append of OrderClaimed to reservation-order-{id}), places the
// order, and pays, waiting up to req.Wait for the payment's outcome. Returns
// *Rejection for definitive refusals (reservation not found 404, already
// ordered 409 with the caller's own order id, expired 410), answered the
// same to every repeat; domain.ErrKeyReused, *InUseError, and
// domain.ErrUnavailable-wrapped errors as for every intent.
//
// The token is sealed under the new order's data key before the intent is
// recorded: in the unit that records the intent and places the order, with
// the key row, under key units; held in the key table first otherwise. A
// new intent is recorded in that unit (beginDeferred, placeDeferred). (A
// repeat that reaches a process which has not seen its intent may hold its
// token under an id that never becomes an order, deleted again within
// shredDelay: see resolveTaken.)
func (h *Commands) PlaceOrder(ctx context.Context, req Request, cmd PlaceOrderCommand) (OrderResult, error) {
	// A repeat of an intent this process keeps is answered from its order,
	// read once, when the order exists (keptTarget).
	command := cmd.Canonical()
	if id, ok, err := h.keptTarget(ctx, req, command); err != nil {
		return OrderResult{}, err
	} else if ok {
		o, s, err := h.loadOrder(ctx, id)
		if err != nil {
			return OrderResult{}, err
		}
		if o.Exists() {
			h.metrics.Replay(req.Operation)
			h.metrics.Intent(req.Operation, IntentReplayed, "")
			return h.payAndWait(ctx, o.ID, req.Wait, Outcome{Replayed: true}, &orderState{o: o, s: s})
		}
	}
	var secrets *heldSecrets
	intent := IntentStream(req.Actor, req.Operation, req.Key)
	prep := &intentPrep{
		prepare: func(ctx context.Context, orderID string, now time.Time) error {
			var err error
			if secrets, err = h.holdToken(ctx, orderID, intent, cmd.PaymentToken, now); err == nil {
				h.step(ctx, "order.token-held")
			}
			return err
		},
		// The order of an unused key never exists: the key is deleted
		// within shredDelay, or by the reconciler after the intent
		// retention should this process stop first.
		discard: func(_ context.Context, orderID string) { h.shredSoon(orderID) },
		// With key units the key is written in the intent's unit.
		unit: func(orderID string, now time.Time) keyWrite {
			secrets = sealToken(orderID, cmd.PaymentToken)
			h.step(ctx, "order.token-held")
			return h.heldKey(orderID, intent, secrets, now)
		},
	}
	// Another actor's reservation, like an absent one, is refused before
	// the intent is recorded: a probe writes nothing and leaves the key
	// unused. Existence and owner are fixed by ReservationHeld, so the
	// reservation as this process last saw it decides. So is an order for
	// a show that has begun (at the database clock's now), which no later
	// repeat could place either.
	admissible := func(now time.Time) error {
		r, _, err := h.streams.knownReservation(ctx, cmd.ReservationID)
		if err != nil {
			return err
		}
		if !r.Exists() || r.Actor != req.Actor {
			return domain.ErrReservationNotFound
		}
		show, err := h.scheduledShow(ctx, r.ShowID)
		if err != nil {
			return err
		}
		return show.AcceptsOrders(now)
	}
	run, err := h.beginDeferred(ctx, req, command, prep, admissible)
	if err != nil {
		return OrderResult{}, err
	}
	if p := run.pending; p != nil {
		defer h.inflight.release(run.stream, p.flight) // whatever became of the unit
	}
	ctx = run.context(ctx)
	if !run.leaseFrom.IsZero() {
		run.secrets = secrets // recorded by this request, under the id prep ran for
	}
	return h.placeOrder(ctx, run, cmd.ReservationID)
}

// placeOrder runs an order intent from wherever it stands: the claim, its
// follow-ups, then payment. Recovery calls it for intents whose executor died.
//
// A repeat reads the order first: once it exists, the claim and the order's
// follow-ups are done (or the process manager finishes them), and the
// repeat is answered from that one read (paying on, if the payment is not
// final). The request that has just recorded the intent, alone on it (see
// intentRun.alone), places the order in one unit of work (placeAlone);
// everything else, and that request when its unit cannot be decided alone
// or lost a race, claims on reads (claimOrder) and then places the order.
func (h *core) placeOrder(ctx context.Context, run *intentRun, reservationID string) (OrderResult, error) {
	req := run.req
	out := Outcome{Replayed: !run.created}
	if run.pending != nil {
		placed, rn, err := h.placeDeferred(ctx, run, reservationID)
		if err != nil {
			return OrderResult{}, err
		}
		if rn != run { // recorded by another request first: a repeat
			return h.placeOrder(rn.context(ctx), rn, reservationID)
		}
		if placed != nil {
			h.step(ctx, "order.placed")
			return h.payAndWait(ctx, run.targetID(), req.Wait, out, placed)
		}
	}
	if !run.created {
		o, s, err := h.loadOrder(ctx, run.targetID())
		if err != nil {
			return OrderResult{}, err
		}
		if o.Exists() {
			return h.payAndWait(ctx, o.ID, req.Wait, out, &orderState{o: o, s: s})
		}
	}
	var placed *orderState
	sec := run.secrets
	if sec != nil && run.alone(h.cfg.IntentLease) {
		var err error
		if placed, err = h.placeAlone(ctx, run, reservationID, sec); err != nil {
			return OrderResult{}, err
		}
	}
	if placed == nil {
		claim, claimID, claimedAt, err := h.claimOrder(ctx, run, reservationID)
		if err != nil {
			return OrderResult{}, err
		}
		if sec != nil && run.alone(h.cfg.IntentLease) {
			placed, err = h.placeClaimed(ctx, claim.Order, claimID, claimedAt, sec)
		} else {
			_, err = h.finishClaim(ctx, claim.Order, claimID, claimedAt)
		}
		if err != nil {
			return OrderResult{}, err
		}
	}
	h.step(ctx, "order.placed")
	return h.payAndWait(ctx, run.targetID(), req.Wait, out, placed)
}

// placeDeferred places the order of a run whose intent is not recorded yet
// (intentRun.pending) in placeAlone's unit, which records the intent as
// well: it returns the order as the unit left it and the run, recorded.
// When another request recorded the intent first it returns the run that
// request's repeat gets instead (resolveTaken); when the unit did not
// commit otherwise (it cannot be decided alone, or a part other than the
// intent lost a race) the intent is recorded alone, and a nil order with
// the run, recorded, leaves placeOrder to go on as for any recorded intent.
func (h *core) placeDeferred(ctx context.Context, run *intentRun, reservationID string) (*orderState, *intentRun, error) {
	if run.secrets != nil {
		placed, err := h.placeAlone(ctx, run, reservationID, run.secrets)
		if errors.Is(err, errIntentTaken) {
			rn, err := h.resolveTaken(ctx, run)
			return nil, rn, err
		}
		if err != nil || placed != nil {
			return placed, run, err
		}
	}
	rn, err := h.recordPending(ctx, run)
	return nil, rn, err
}

// placeAlone places the order of the request that recorded its intent and
// is still alone on it, holding its secrets (sec), in one unit of work: the
// claim (the commit point), OrderPlaced with the held token, the
// reservation marked ordered and the start of payment attempt 1 under this
// process's lease, all decided on the reservation as this process last
// wrote or read it (what the claim decides on is fixed by ReservationHeld;
// the unit's expected revisions fence the rest). The key table's part is
// tokenToPlace's: in the unit with key units, else a round trip before it.
// For a run whose intent is pending, the unit records it too, first
// (commitWithIntent), and with key units creates the order's key already
// placed instead of dropping its held token. It returns the order as the
// unit left it, with the attempt ready to send; or nil and no error when
// the unit cannot be decided alone (a refusal is decided on reads, the key
// holds no token) or lost a race on another part, for placeOrder to claim
// on reads; errIntentTaken when a pending intent was recorded by another
// request first; or the unit's error when its outcome stayed unknown (503).
func (h *core) placeAlone(ctx context.Context, run *intentRun, reservationID string, sec *heldSecrets) (*orderState, error) {
	r, rs, err := h.streams.knownReservation(ctx, reservationID)
	if err != nil {
		return nil, err
	}
	now, err := h.streams.now(ctx)
	if err != nil {
		return nil, err
	}
	evs, derr := domain.DecideClaim(domain.Claim{}, r, domain.ClaimOrder{ReservationID: reservationID,
		OrderID: run.targetID(), Actor: run.req.Actor, Intent: run.stream}, now)
	ordered := r.MarkOrdered(run.targetID())
	if derr != nil || len(evs) == 0 || len(ordered) == 0 {
		return nil, nil
	}
	c := evs[0].(domain.OrderClaimed)
	h.step(ctx, "order.claiming")
	held, kw, err := h.tokenToPlace(ctx, c.OrderID, now.Add(h.cfg.PaymentDeadline), sec)
	if err != nil || held == nil {
		return nil, err
	}
	if run.pending != nil && kw.place != nil {
		// The key is created with the intent, placed: the order carries the token.
		kw = keyWrite{create: &keyCreate{orderID: c.OrderID, intent: run.stream, dk: sec.dk, shredAt: kw.place.deadline}}
	}
	u, err := h.placingUnit(ctx, run, c, rs, ordered[0], held, sec, now)
	if err != nil || u == nil {
		return nil, err
	}
	res, err := h.commitWithIntent(ctx, run, kw, u.parts...)
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return nil, nil // decide again on reads
	}
	if errors.Is(err, errKeyGone) {
		return nil, nil // placed on reads, without a token
	}
	if err != nil {
		return nil, err
	}
	h.step(ctx, "order.claimed")
	u.order.s.last = res[1].NextRevision
	u.order.held = kw.place == nil && kw.create == nil
	return u.order, nil
}

// tokenToPlace returns the sealed token placeAlone places the order with,
// and the key-table write of its unit. With key units and the token this
// request sealed, the unit drops the held token and makes the key due at
// deadline itself; otherwise the key is made due at deadline first, in a
// round trip that reads the held token (Keys.Placing), so a process
// stopped right after the unit still has the key deleted at the deadline.
// A nil token (no key, or the token placed already) leaves the order to be
// placed on reads.
func (h *core) tokenToPlace(ctx context.Context, orderID string, deadline time.Time, sec *heldSecrets) ([]byte, keyWrite, error) {
	if h.units != nil && sec.sealed != nil {
		return sec.sealed, keyWrite{place: &keyPlace{orderID: orderID, deadline: deadline}}, nil
	}
	held, exists, err := h.keys.Placing(ctx, orderID, deadline)
	if err != nil {
		return nil, keyWrite{}, unavailable(err)
	}
	if !exists {
		return nil, keyWrite{}, nil
	}
	return held, keyWrite{}, nil
}

// placingUnit is placeAlone's unit of work, decided.
type placingUnit struct {
	parts []unitPart
	order *orderState // as the unit leaves it (but its revision)
}

// placingUnit decides placeAlone's unit for claim c at now: the claim at no
// stream, OrderPlaced (with held, the sealed token, due at the claim's
// payment deadline) and the start of attempt 1 at no stream, and ordered at
// the reservation's revision rs. nil when the attempt cannot start.
func (h *core) placingUnit(ctx context.Context, run *intentRun, c domain.OrderClaimed, rs *stream, ordered domain.Event,
	held []byte, sec *heldSecrets, now time.Time) (*placingUnit, error) {
	claimID := DerivedID(run.cause(), "order-claimed")
	placed := domain.PlacedFrom(c, now.Add(h.cfg.PaymentDeadline), held)
	var o domain.Order
	o.Apply(placed)
	start, err := h.attemptStart(ctx, o, 1, now, sec.dk)
	if errors.Is(err, errRetry) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	o.Apply(start)
	m := eventstore.Metadata{Actor: c.Actor, Intent: c.Intent, CausationID: claimID, OccurredAt: now}
	orderEvents, err := encodeEvents(ctx, m, pending{DerivedID(claimID, "order-placed"), placed})
	if err == nil {
		var lease []eventstore.EventData
		lease, err = encodeEvents(ctx, eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, OccurredAt: now}, pending{NewID(), start})
		orderEvents = append(orderEvents, lease...)
	}
	if err != nil {
		return nil, err
	}
	name := domain.OrderStream(c.OrderID)
	return &placingUnit{
		parts: []unitPart{
			{s: newStream(domain.ClaimStream(c.ReservationID)), m: run.meta(now, ""), evs: []pending{{claimID, c}}},
			{s: newStream(name), data: orderEvents},
			{s: rs, m: m, evs: []pending{{DerivedID(claimID, "reservation-ordered"), ordered}}},
		},
		order: &orderState{o: o, s: &stream{name: name, exists: true, events: []domain.Event{placed, start}}, dk: sec.dk, held: true, unsent: 1},
	}, nil
}

// claimOrder claims the reservation for the run's order on reads, under the
// retry policy: a claim of this intent is found (a repeat, a takeover); a
// claim of another, or a refusal, rejects the intent; before the commit
// point a repeat waits for the executor (awaitExecutor); otherwise the
// claim is decided on the reservation just read and appended at no stream,
// then read back. An expired hold gets its expiry claim written (with the
// id the expiry job would use) and the intent refused. It returns the
// claim, its event id and its time.
func (h *core) claimOrder(ctx context.Context, run *intentRun, reservationID string) (domain.Claim, string, time.Time, error) {
	var claim domain.Claim
	var claimID string
	var claimedAt time.Time
	err := h.retryConflicts(ctx, func() error {
		c, cs, err := h.loadClaim(ctx, reservationID)
		if err != nil {
			return err
		}
		if c.Kind == domain.ClaimKindOrder && c.OrderID == run.targetID() {
			claim, claimID, claimedAt = c, cs.records[0].ID, openedAt(cs.records[0])
			return nil
		}
		res, err := h.claimable(ctx, run, reservationID, c)
		if err != nil {
			return err
		}
		if err := h.appendClaim(ctx, run, res); err != nil {
			return err
		}
		if c, cs, err = h.loadClaim(ctx, reservationID); err != nil {
			return err
		}
		if c.Kind != domain.ClaimKindOrder || c.OrderID != run.targetID() {
			return errRetry // the claim is read again on the next try
		}
		claim, claimID, claimedAt = c, cs.records[0].ID, openedAt(cs.records[0])
		return nil
	})
	return claim, claimID, claimedAt, err
}

// claimable returns the reservation to decide an order claim on, read now,
// when the claim stream (c) is free: a claim of something else rejects
// the intent, and before the commit point a repeat waits for the executor.
func (h *core) claimable(ctx context.Context, run *intentRun, reservationID string, c domain.Claim) (domain.Reservation, error) {
	if c.Kind != domain.ClaimNone {
		// Another actor must not learn that the reservation exists.
		res, err := h.loadReservation(ctx, reservationID)
		if err != nil {
			return domain.Reservation{}, err
		}
		if !res.Exists() || res.Actor != run.req.Actor {
			return domain.Reservation{}, h.rejectOrder(ctx, run, domain.ErrReservationNotFound, "")
		}
		return domain.Reservation{}, h.rejectClaimed(ctx, run, c)
	}
	if err := h.awaitExecutor(ctx, run, func() (bool, error) {
		c, _, err := h.loadClaim(ctx, reservationID)
		return c.Kind != domain.ClaimNone, err
	}); err != nil {
		return domain.Reservation{}, err
	}
	return h.loadReservation(ctx, reservationID)
}

// appendClaim decides the run's claim on res and appends it at no stream:
// the commit point. If its answer is lost, appendResolving repeats the
// claim (same id, no stream): success means the claim is this intent's; a
// conflict means it did not commit and someone else claimed (decided again
// on the next read); still unknown is a 503, and a committed claim is then
// finished by the process manager and replayed to a repeat. A refusal is
// recorded on the intent; an expired hold gets its expiry claim first.
func (h *core) appendClaim(ctx context.Context, run *intentRun, res domain.Reservation) error {
	now, err := h.streams.now(ctx)
	if err != nil {
		return err
	}
	evs, derr := domain.DecideClaim(domain.Claim{}, res, domain.ClaimOrder{ReservationID: res.ID,
		OrderID: run.targetID(), Actor: run.req.Actor, Intent: run.stream}, now)
	if len(evs) == 0 && derr != nil {
		return h.rejectOrder(ctx, run, asDomain(derr), "")
	}
	id := DerivedID(run.cause(), "order-claimed")
	if exp, ok := evs[0].(domain.ExpiryClaimed); ok {
		id = ExpiryClaimID(exp.ReservationID)
	}
	if derr == nil {
		h.step(ctx, "order.claiming")
	}
	if _, err := h.commit(ctx, newStream(domain.ClaimStream(res.ID)), run.meta(now, ""), pending{id, evs[0]}); err != nil {
		return err // a conflict: someone claimed first, decide again from the claim
	}
	if derr != nil { // we wrote the expiry claim ourselves
		if err := h.finishExpiry(ctx, evs[0].(domain.ExpiryClaimed), id, run.meta(now, id)); err != nil {
			return err
		}
		return h.rejectOrder(ctx, run, asDomain(derr), "")
	}
	h.step(ctx, "order.claimed")
	return nil
}

// ExpiryClaimID is the deterministic id of a reservation's expiry claim: the
// same whether the expiry job or a late order request writes it.
func ExpiryClaimID(reservationID string) string { return DerivedID(reservationID, "expiry-claimed") }

// rejectOrder records the refusal of an order intent (see reject): its
// order never exists, so the key held for it is deleted.
func (h *core) rejectOrder(ctx context.Context, run *intentRun, derr *domain.Error, resourceID string) error {
	err := h.reject(ctx, run, derr, resourceID)
	var rej *Rejection
	if errors.As(err, &rej) {
		if serr := h.shred(ctx, run.targetID()); serr != nil {
			h.log.WarnContext(ctx, "key of a refused order not deleted yet; the process manager retries", "order_id", run.targetID(), "err", serr)
		}
	}
	return err
}

// rejectClaimed records the refusal of an order whose reservation was
// claimed by something else.
func (h *core) rejectClaimed(ctx context.Context, run *intentRun, c domain.Claim) error {
	if c.Kind == domain.ClaimKindExpiry {
		return h.rejectOrder(ctx, run, domain.ErrReservationExpired, "")
	}
	if c.Actor == run.req.Actor {
		return h.rejectOrder(ctx, run, domain.ErrReservationAlreadyOrdered.With("the reservation already has order "+c.OrderID), c.OrderID)
	}
	return h.rejectOrder(ctx, run, domain.ErrReservationAlreadyOrdered, "")
}

func (h *core) loadClaim(ctx context.Context, reservationID string) (domain.Claim, *stream, error) {
	return loadState[domain.Claim](ctx, h, domain.ClaimStream(reservationID))
}

// finishClaim does the follow-ups of an order claim: OrderPlaced on the
// order stream and the reservation marked ordered, each with a deterministic
// id; placed reports whether the OrderPlaced append succeeded (true also for
// an idempotent repeat of it). OrderPlaced carries the sealed token held in
// the key table, which is then dropped from there; without a token (the
// intent expired, or its key is gone) the payment fails. claimedAt is the
// claim's time (its metadata's occurred_at): the payment deadline counts
// from it, so every path that places the order writes the same OrderPlaced.
func (h *core) finishClaim(ctx context.Context, c domain.OrderClaimed, claimID string, claimedAt time.Time) (placed bool, err error) {
	before, _, err := h.loadOrder(ctx, c.OrderID)
	if err != nil {
		return false, err
	}
	var sealed []byte
	if !before.Exists() {
		if sealed, err = h.sealedTokenOf(ctx, c); err != nil {
			return false, err
		}
	}
	now, err := h.streams.now(ctx)
	if err != nil {
		return false, err
	}
	m := eventstore.Metadata{Actor: c.Actor, Intent: c.Intent, CausationID: claimID, OccurredAt: now}
	ev := domain.PlacedFrom(c, claimedAt.Add(h.cfg.PaymentDeadline), sealed)
	_, err = h.commit(ctx, newStream(domain.OrderStream(c.OrderID)), m, pending{DerivedID(claimID, "order-placed"), ev})
	if err != nil && !errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return false, err
	}
	placed = err == nil
	if placed && !before.Exists() {
		if err := h.keys.Placed(ctx, c.OrderID, ev.PaymentDeadline); err != nil {
			h.log.WarnContext(ctx, "held token not dropped yet; the process manager retries", "order_id", c.OrderID, "err", err)
		} else {
			h.streams.noteDone(keyPlaced(c.OrderID)) // the process manager need not repeat it
		}
	}
	return placed, h.markOrdered(ctx, c, claimID, m)
}

// orderState is an order as this process knows it exactly: the fold of the
// stream's events up to s.last, read or appended by this process since
// nothing else could have appended (or a conflict would have said so).
type orderState struct {
	o domain.Order
	s *stream
	// dk is the order's data key when the request that recorded the order's
	// intent still holds it (heldSecrets); nil otherwise.
	dk *envelope.DataKey
	// tail is true when others may have appended after s.last since (a
	// cancel after a payment lease was taken): the stream's tail is read
	// before anything is sent on this state.
	tail bool
	// held is true when the key table still holds the order's token,
	// which the order stream carries now (placeClaimed): Keys.Placed drops
	// it unless the order ends first.
	held bool
	// unsent is the attempt whose lease the state's own append started and
	// under which nothing was sent yet (placeAlone), or 0.
	unsent int
}

// placeClaimed is finishClaim for the request that recorded the order's
// intent and is still alone on it, holding the order's data key: it reads
// the held token while making the key due at the payment deadline
// (Keys.Placing, one round trip; a key gone since means no token, as in
// finishClaim), appends OrderPlaced and marks the reservation ordered
// concurrently, each its own append, and returns the order as placed without
// reading it back (OrderPlaced is derived from the claim and the held token,
// so whoever wrote it first wrote the same). The reservation is marked at
// the revision this process knows; a conflict there falls back to reading
// it. Dropping the held token from the key table (Keys.Placed) is left to
// payAndWait: once the order has ended its key is deleted instead.
//
// Keys.Placing makes the key due at the payment deadline before
// OrderPlaced commits, so that a process stopped right after it (nothing
// left to drop the token or end the order) still has the key deleted at
// the deadline; Keys.Create makes it due only at the intent's retention,
// since an order placed late (recovery after a crash, a repeat after the
// lease) keeps its key until its own deadline (ARCHITECTURE.md,
// "Performance", "The key table on the request path").
func (h *core) placeClaimed(ctx context.Context, c domain.OrderClaimed, claimID string, claimedAt time.Time, sec *heldSecrets) (*orderState, error) {
	deadline := claimedAt.Add(h.cfg.PaymentDeadline)
	held, exists, err := h.keys.Placing(ctx, c.OrderID, deadline)
	if err != nil {
		return nil, unavailable(err)
	}
	if exists && held == nil {
		// Placed already (the token went to the order stream): read it.
		_, err := h.finishClaim(ctx, c, claimID, claimedAt)
		return nil, err
	}
	dk := sec.dk
	if !exists {
		dk = nil // the key is gone: the order is placed without a token
	}
	now, err := h.streams.now(ctx)
	if err != nil {
		return nil, err
	}
	m := eventstore.Metadata{Actor: c.Actor, Intent: c.Intent, CausationID: claimID, OccurredAt: now}
	ev := domain.PlacedFrom(c, deadline, held)
	name := domain.OrderStream(c.OrderID)
	var (
		wg      sync.WaitGroup
		res     eventstore.AppendResult
		errRes  error
		errMark error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errMark = h.markOrdered(ctx, c, claimID, m)
	}()
	res, errRes = h.commit(ctx, newStream(name), m, pending{DerivedID(claimID, "order-placed"), ev})
	wg.Wait()
	if errors.Is(errRes, eventstore.ErrWrongExpectedRevision) {
		return nil, errMark // not this event at revision 0: pay from a read of the stream
	}
	if errRes != nil {
		return nil, errRes
	}
	if errMark != nil {
		return nil, errMark
	}
	var o domain.Order
	o.Apply(ev)
	return &orderState{o: o, s: &stream{name: name, exists: true, last: res.NextRevision, events: []domain.Event{ev}}, dk: dk, held: exists}, nil
}

// markOrdered is the reservation's follow-up of an order claim: decided
// on the reservation as this process knows it (streams.knownReservation)
// and appended at that revision; a conflict, or a reservation that needs
// nothing, decides again on a read.
func (h *core) markOrdered(ctx context.Context, c domain.OrderClaimed, claimID string, m eventstore.Metadata) error {
	id := DerivedID(claimID, "reservation-ordered")
	r, rs, err := h.streams.knownReservation(ctx, c.ReservationID)
	if err != nil {
		return err
	}
	if evs := r.MarkOrdered(c.OrderID); len(evs) > 0 {
		_, err := h.commit(ctx, rs, m, pending{id, evs[0]})
		if !errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			return err
		}
	}
	return h.appendFollowUp(ctx, rs.name, m, func(s *stream) []pending {
		r := fold[domain.Reservation](s.events)
		evs := r.MarkOrdered(c.OrderID)
		if len(evs) == 0 {
			return nil
		}
		return []pending{{id, evs[0]}}
	})
}

// finishExpiry does the follow-ups of an expiry claim: the seats go back to
// the show and the reservation is marked expired.
func (h *core) finishExpiry(ctx context.Context, e domain.ExpiryClaimed, claimID string, m eventstore.Metadata) error {
	m.CausationID = claimID
	if err := h.releaseSeats(ctx, e.ShowID, e.ReservationID, domain.ReleaseExpired, claimID, m); err != nil {
		return err
	}
	return h.appendFollowUp(ctx, domain.ReservationStream(e.ReservationID), m, func(s *stream) []pending {
		r := fold[domain.Reservation](s.events)
		evs := r.MarkExpired()
		if len(evs) == 0 {
			return nil
		}
		return []pending{{DerivedID(claimID, "reservation-expired"), evs[0]}}
	})
}

// releaseSeats returns a reservation's seats to its show (a no-op when
// already released).
func (h *core) releaseSeats(ctx context.Context, showID, reservationID, reason, cause string, m eventstore.Metadata) error {
	unlock := h.shows.Lock(showID)
	defer unlock()
	err := h.retryConflicts(ctx, func() error {
		e, err := h.streams.refreshShow(ctx, showID)
		if err != nil {
			return err
		}
		evs := e.show.Release(reservationID, reason)
		if len(evs) == 0 {
			return nil
		}
		now, err := h.streams.now(ctx)
		if err != nil {
			return err
		}
		m.OccurredAt = now
		res, err := h.commit(ctx, e.at(showID), m, pending{DerivedID(cause, "seats-released"), evs[0]})
		if err == nil {
			// The snapshot (held under the show's lock) follows the
			// append, so the next hold batch need not read it back
			// (streams.trusted).
			e.show.Apply(evs[0])
			e.exists, e.last = true, res.NextRevision
		}
		return err
	})
	if errors.Is(err, domain.ErrContention) {
		return fmt.Errorf("release seats of %s: %w", reservationID, err)
	}
	return err
}

// finishOrderEnd does the follow-ups of a failed or cancelled order: seats
// released and the reservation marked released. causeID is the id of the
// event that ended the order when the caller has it (the process manager);
// "" names what ctx carries as the cause (the request, or the event a job
// acts on).
func (h *core) finishOrderEnd(ctx context.Context, o domain.Order, reason, causeID string) error {
	now, err := h.streams.now(ctx)
	if err != nil {
		return err
	}
	m := eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, CausationID: causeID, OccurredAt: now}
	if err := h.releaseSeats(ctx, o.ShowID, o.ReservationID, reason, o.ID, m); err != nil {
		return err
	}
	return h.appendFollowUp(ctx, domain.ReservationStream(o.ReservationID), m, func(s *stream) []pending {
		r := fold[domain.Reservation](s.events)
		evs := r.MarkReleased(o.ID, reason)
		if len(evs) == 0 {
			return nil
		}
		return []pending{{DerivedID(o.ID, "reservation-released"), evs[0]}}
	})
}

// LoadOrder returns the order with id and its loaded stream, as the event
// store holds it now (streams.load: a load of an order this process loaded
// before reads only the events appended since). Errors wrap
// domain.ErrUnavailable when the store cannot be read.
func (h *Queries) LoadOrder(ctx context.Context, id string) (domain.Order, *stream, error) {
	return h.loadOrder(ctx, id)
}

// loadOrder is LoadOrder.
func (h *core) loadOrder(ctx context.Context, id string) (domain.Order, *stream, error) {
	s, err := h.streams.load(ctx, domain.OrderStream(id))
	if err != nil {
		return domain.Order{}, nil, err
	}
	return fold[domain.Order](s.events), s, nil
}

// GetOrder returns the caller's order, strongly consistent (from the event
// store). Returns domain.ErrOrderNotFound also for another actor's.
func (h *Queries) GetOrder(ctx context.Context, actor, id string) (domain.Order, error) {
	o, _, err := h.loadOrder(ctx, id)
	if err != nil {
		return domain.Order{}, err
	}
	if !o.Exists() || o.Actor != actor {
		return domain.Order{}, domain.ErrOrderNotFound
	}
	return o, nil
}

// awaitReleased polls the reservation until it is no longer ordered or the
// deadline passes; errors end the wait (the answer does not depend on it).
func (h *core) awaitReleased(ctx context.Context, reservationID string, deadline time.Time) {
	for {
		r, err := h.loadReservation(ctx, reservationID)
		if err != nil || r.Status != domain.ReservationStatusOrdered || !time.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(20*time.Millisecond, time.Until(deadline))):
		}
	}
}

// payInBackground is payAndWait's drive of the payment, detached from the
// request: it stores the state the drive ended on in *last, closes done,
// and then drops the held token (drop) unless the order ended.
func (h *core) payInBackground(ctx context.Context, orderID string, known *orderState, last **orderState, done chan<- struct{}, drop func(context.Context)) {
	dctx := h.detach(ctx)
	st, err := h.drivePayment(dctx, orderID, known)
	if err != nil {
		h.log.WarnContext(ctx, "payment step failed; the reconciler will finish it", "order_id", orderID, "err", err)
	}
	*last = st
	close(done)
	if st == nil || st.o.Status == domain.OrderStatusPending || st.o.Status == domain.OrderStatusCancelling {
		drop(dctx)
	}
}

// payAndWait drives the order's payment in the background (detached from the
// request) and waits up to wait for a final outcome; an order in review
// (final without an outcome, until an operator acts) is answered at once,
// not final. known, when not nil, is the order as this request knows it
// exactly (placed or read just now): the payment starts from it instead of a
// read, and when the drive ends with the outcome known the answer is the
// state it left, without reading the order again; a known order that ended
// with its outcome known is answered as it is, with no drive. When the key
// table still holds the token known's order carries (orderState.held), it is
// dropped (Keys.Placed) before an answer that is not final and after a drive
// that left the order unended; an order that ended had its key deleted
// instead.
func (h *core) payAndWait(ctx context.Context, orderID string, wait time.Duration, out Outcome, known *orderState) (OrderResult, error) {
	if known != nil && known.o.FirstOutcome != "" && known.o.Final() {
		// Nothing to drive or wait for (a replay of an order that ended
		// with its outcome known): answer from it.
		return h.answered(ctx, known.o, out, time.Now().Add(wait)), nil
	}
	var dropOnce sync.Once
	drop := func(ctx context.Context) {
		if known == nil || !known.held {
			return
		}
		dropOnce.Do(func() {
			if err := h.keys.Placed(ctx, orderID, known.o.PaymentDeadline); err != nil {
				h.log.WarnContext(ctx, "held token not dropped yet; the process manager retries", "order_id", orderID, "err", err)
			}
		})
	}
	done := make(chan struct{})
	var last *orderState
	if known != nil && known.o.Status != domain.OrderStatusPending && known.o.Status != domain.OrderStatusCancelling {
		// Nothing to drive (a replay of an order that ended): answer from it.
		last = known
		close(done)
	} else {
		go h.payInBackground(ctx, orderID, known, &last, done, drop)
	}
	deadline := time.Now().Add(wait) // a wait budget, not a decision: host clock is fine
	timer := time.NewTimer(wait)
	defer timer.Stop()
	finished := false
	select {
	case <-done:
		finished = true
	default:
		select {
		case <-done:
			finished = true
		case <-timer.C:
		case <-ctx.Done():
			return OrderResult{}, ctx.Err()
		}
	}
	var o domain.Order
	var err error
	if finished && last != nil && last.o.FirstOutcome != "" {
		o = last.o
	} else {
		o, _, err = h.loadOrder(ctx, orderID)
	}
	for err == nil && o.FirstOutcome == "" && !awaitingAction(o) && !o.Final() && time.Now().Before(deadline) {
		// Another executor (a repeat, or another replica) is paying: poll.
		// (An order in review is final without an outcome: only an
		// operator changes it, so it is answered at once.)
		select {
		case <-ctx.Done():
			return OrderResult{}, ctx.Err()
		case <-time.After(min(50*time.Millisecond, time.Until(deadline))):
		}
		o, _, err = h.loadOrder(ctx, orderID)
	}
	if err != nil {
		return OrderResult{}, err
	}
	if !o.Exists() {
		return OrderResult{}, fmt.Errorf("order %s vanished: %w", orderID, domain.ErrUnavailable)
	}
	if o.FirstOutcome == "" {
		drop(h.detach(ctx))
	}
	return h.answered(ctx, o, out, deadline), nil
}

// answered is payAndWait's answer with order o as it stands. For a failed
// order it first waits, until deadline at most, for the failure's
// follow-ups (its seats, then its reservation, released), which whichever
// path recorded the failure appends right after it (this request's payment
// step, the process manager's, a webhook), so a client that reads its
// reservation after the 402 sees it released.
func (h *core) answered(ctx context.Context, o domain.Order, out Outcome, deadline time.Time) OrderResult {
	if o.Status == domain.OrderStatusFailed {
		h.awaitReleased(ctx, o.ReservationID, deadline)
	}
	return OrderResult{Order: o, Final: o.FirstOutcome != "", Outcome: out}
}

// awaitingAction reports whether o's payment waits for the customer's
// action: nothing changes before the customer acts, so an answer need not
// wait for it.
func awaitingAction(o domain.Order) bool {
	a := o.LastAttempt()
	return o.Status == domain.OrderStatusPending && a != nil && a.Outcome == domain.OutcomeRequiresAction
}
