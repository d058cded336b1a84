package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/tick"
	"github.com/retrysafe/booking/provider"
)

// Payments. An order's payment is a sequence of attempts; attempt n creates
// at most one payment (a Stripe PaymentIntent), sent under the provider
// idempotency key ProviderKey(order, n) with parameters rebuilt from the
// inputs stored in its PaymentAttemptStarted. Only the holder of the
// attempt's lease sends, and only while database time + ProviderTimeout +
// SendMargin is before the lease's end (Order.CanSend). Starting, renewing or
// taking over a lease is an append at the expected revision the order was
// loaded at: the revision is the fencing token, so of two executors that
// decided on the same state only one appends. Provider outcomes are facts,
// recorded by whoever observes them (sender, reconciler, webhook) with
// deterministic event ids derived from the payment id, never fenced.
//
// One payment per attempt is safe only because attempt n+1 starts when
// attempt n is proven to have made none (lookupPayments: a consistent list
// of the payments created in the attempt's time range). Do not "simplify"
// it into a new attempt on an unknown outcome, nor into a search: Stripe's
// search lags and may only find, never prove absence
// (ARCHITECTURE.md, "Reconciliation with Stripe").

// maxDriveSteps bounds the steps one DrivePayment call takes (load, decide,
// act); the reconciler calls it again on its next pass.
const maxDriveSteps = 12

// recordTimeout bounds recording a send's outcome, detached from the caller.
const recordTimeout = 15 * time.Second

// providerKey returns the provider idempotency key of attempt n (1-based) of
// an order: "{deployment}-order-{orderID}-{n}", without the prefix when the
// deployment is empty (dev).
func (h *core) providerKey(orderID string, n int) string {
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

// step is what DrivePayment does after one decision.
type step int

const (
	stepDone  step = iota // nothing more to do now
	stepAgain             // reload and decide again at once
	stepLater             // reload and decide again after a backoff
)

// DrivePayment pushes an order's payment as far as it can go now: it starts
// attempt 1 when there is none; sends while this process holds the
// attempt's lease (the fence); reconciles an attempt whose outcome is
// unknown or whose lease this process may take over by listing the
// payments created in the attempt's time range (lookupPayments) before any
// send; retries inside the provider's window only with the same attempt,
// key and inputs; starts attempt n+1 only outside the window, once attempt
// n settled and the list proved it made no payment (an attempt that cannot
// be proved so puts the order in review); fetches a payment waiting for
// the customer's action and cancels it when the order is cancelled or its
// deadline passed; fails the order past its payment deadline and finishes
// a cancelling order once its payment resolved, in both cases only when
// the payment settled uncharged. It is a no-op for a final order, and
// while another executor holds a live lease. It returns nil when it made
// what progress it could (the reconciler calls it again), or an error
// wrapping domain.ErrUnavailable for a dependency failure. Safe for concurrent use and repeatable: one call
// per order runs at a time in this process (others return at once), and
// leases fence other processes.
func (h *Workers) DrivePayment(ctx context.Context, orderID string) error {
	_, err := h.drivePayment(ctx, orderID, nil)
	return err
}

// drivePayment is DrivePayment starting from known (the order as the caller
// knows it exactly; nil reads it). Each step that appends to the order goes
// on from what it appended instead of reading the order again (a conflict
// makes the next step read it). It returns the order's state when it
// stopped because the order is no longer pending or cancelling, as far as
// this call knows it exactly; nil otherwise.
func (h *core) drivePayment(ctx context.Context, orderID string, known *orderState) (*orderState, error) {
	unlock := h.sends.TryLock(orderID)
	if unlock == nil {
		return nil, nil
	}
	defer unlock()
	bo := newBackoff(100*time.Millisecond, 2*time.Second)
	st := driveState{known: known}
	if known != nil {
		st.dk, st.unsent = known.dk, known.unsent
		st.placing = known.dk != nil && len(known.o.Attempts) == 0
	}
	for range maxDriveSteps {
		var o domain.Order
		var s *stream
		if k := st.known; k != nil {
			st.known = nil
			o, s = k.o, k.s
			if k.tail && (o.Status == domain.OrderStatusPending || o.Status == domain.OrderStatusCancelling) {
				// What this process appended is known; what others appended
				// since (a cancel) is read before the next decision.
				var err error
				if o, s, err = h.readOrderTail(ctx, o, s); err != nil {
					return nil, err
				}
			}
		} else {
			var err error
			if o, s, err = h.loadOrder(ctx, orderID); err != nil {
				return nil, err
			}
		}
		ctx = withStreamCorrelation(ctx, s)
		if o.Status != domain.OrderStatusPending && o.Status != domain.OrderStatusCancelling {
			return &orderState{o: o, s: s}, nil
		}
		now, err := h.streams.now(ctx)
		if err != nil {
			return nil, err
		}
		next, err := h.paymentStep(ctx, o, s, now, &st)
		if errors.Is(err, errRetry) {
			st.known, st.placing = nil, false
			continue
		}
		if err != nil {
			return nil, err
		}
		switch next {
		case stepDone:
			return nil, nil
		case stepLater:
			if err := tick.Sleep(ctx, bo.next()); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

// driveState is what one DrivePayment call knows beyond the order stream.
type driveState struct {
	// unsent is the attempt whose lease this call started (a new attempt,
	// not a takeover) and under which no send has begun, or 0.
	unsent int
	// known is the order as the last step left it, when that step knows it
	// exactly (it appended at the revision it decided on); the next step
	// starts from it instead of reading the order.
	known *orderState
	// dk is the order's data key as the request that placed the order
	// holds it; nil reads it from the key table.
	dk *envelope.DataKey
	// placing is true while the drive is the placing request's, starting
	// from the order it just placed alone (placeClaimed, holding dk),
	// until its first lease append (see advance).
	placing bool
}

// advance records in st that events evs were appended to s at its revision,
// ending at revision last: the next step starts from o with them applied.
// It reads the stream's tail first (orderState.tail: a cancel may have come
// since), except right after the first lease of the order's placing
// request (driveState.placing), which goes on to the send at once.
//
// Why that one may skip the read: the lease append at the expected
// revision made o the order's exact state at its commit, one round trip
// ago; a cancel committed after it could as well commit right after a tail
// read, so the read would move the instant the send decides on by one round
// trip without closing the race. A send racing a cancel is what the cancel
// protocol settles (the order ends cancelled once the send settled, a
// charge refunded: net 0). Every other drive (the process manager, the
// reconciler, a repeat, a lease taken over) reads the tail, so a cancel
// recorded before their send is still seen (ARCHITECTURE.md, "Performance").
func (st *driveState) advance(o domain.Order, s *stream, last eventstore.Revision, evs ...domain.Event) {
	for _, e := range evs {
		o.Apply(e)
	}
	events := append(append([]domain.Event(nil), s.events...), evs...)
	tail := !st.placing
	st.placing = false
	st.known = &orderState{o: o, s: &stream{name: s.name, records: s.records, exists: true, last: last, events: events}, tail: tail}
}

// readOrderTail brings o, folded from s, up to the order stream's head by
// reading only the events after s.last.
func (h *core) readOrderTail(ctx context.Context, o domain.Order, s *stream) (domain.Order, *stream, error) {
	next, evs, err := h.streams.tail(ctx, s)
	if err != nil {
		return o, s, err
	}
	for _, e := range evs {
		o.Apply(e)
	}
	return o, next, nil
}

// paymentStep decides and does one step of an order's payment.
func (h *core) paymentStep(ctx context.Context, o domain.Order, s *stream, now time.Time, st *driveState) (step, error) {
	me := h.cfg.Executor
	budget := h.cfg.ProviderTimeout + h.cfg.SendMargin
	last := o.LastAttempt()
	switch {
	case last == nil:
		if o.Status != domain.OrderStatusPending {
			return stepDone, nil
		}
		if !now.Before(o.PaymentDeadline) {
			return stepDone, h.endOrder(ctx, o, s, o.FailPastDeadline(now, h.cfg.SettleMargin, true), "payment deadline passed before any attempt")
		}
		return stepAgain, h.startAttempt(ctx, o, s, 1, now, st)
	case last.Outcome == domain.OutcomeSucceeded || last.Outcome == domain.OutcomeFailed:
		return stepDone, nil // the order's status follows from the recorded fact
	case last.Outcome == domain.OutcomeRequiresAction:
		return h.awaitAction(ctx, o, s, *last, now)
	case last.Outcome == domain.OutcomeNone && o.CanSend(last.N, me, now, budget):
		return h.send(ctx, o, s, *last, st)
	case now.Before(last.LeaseUntil) && last.Owner != me:
		return stepDone, nil // another executor holds the lease: it sends and records, or we take over later
	}

	// The outcome is unknown, or the lease expired (or is ours but too short
	// to send) without an outcome: ask the provider before anything else.
	found, unproven := h.lookupPayments(ctx, o, *last)
	if len(found) > 0 {
		return h.recordFound(ctx, o, *last, found)
	}
	if unproven == nil {
		h.metrics.Reconciliation("not_found")
	}
	// The look-up took time: decide (and fence any send) on a fresh reading
	// of the database clock. The order's state is as loaded: a lease append
	// below is fenced by its revision, and a direct send needs our own lease
	// with ProviderTimeout + SendMargin left, which no one can take over.
	now, err := h.streams.now(ctx)
	if err != nil {
		return stepDone, err
	}
	settled := o.Settled(now, h.cfg.SettleMargin)
	unsent := st.unsent == last.N && last.Owner == me
	switch {
	case o.Status == domain.OrderStatusCancelling:
		// No new sends while cancelling: wait until the last send settled,
		// unless this call started the lease and never sent under it.
		if unproven != nil && !unsent {
			return stepDone, h.unproven(ctx, o, s, *last, unproven)
		}
		return stepDone, h.endOrder(ctx, o, s, o.FinishCancel(now, h.cfg.SettleMargin, true, unsent), "cancelled; the payment settled uncharged")
	case !now.Before(o.PaymentDeadline):
		if unproven != nil {
			return stepDone, h.unproven(ctx, o, s, *last, unproven)
		}
		if settled {
			h.metrics.Reconciliation("deadline_failed")
		}
		return stepDone, h.endOrder(ctx, o, s, o.FailPastDeadline(now, h.cfg.SettleMargin, true), "payment deadline passed; the payment settled uncharged")
	case h.insideWindow(*last, now):
		// Inside the provider's window the only retry is the same attempt:
		// the same key with the same parameters, which the provider answers
		// from the first request's result if it executed.
		if o.CanSend(last.N, me, now, budget) {
			return h.send(ctx, o, s, *last, st)
		}
		return stepAgain, h.takeOverAttempt(ctx, o, s, *last, now, st)
	case !settled:
		return stepDone, nil // outside the window a new attempt waits for the last send to settle
	case unproven != nil:
		return stepDone, h.unproven(ctx, o, s, *last, unproven)
	case !o.HasPaymentToken():
		return stepDone, h.endOrder(ctx, o, s, []domain.Event{domain.OrderFailed{OrderID: o.ID, Reason: domain.FailNoAttempt}},
			"a new attempt is impossible: the payment token is gone")
	default:
		h.metrics.Reconciliation("new_attempt")
		return stepAgain, h.startAttempt(ctx, o, s, last.N+1, now, st)
	}
}

// insideWindow reports whether a send of attempt a started now would reach
// the provider while it still remembers the attempt's key: the window is
// measured from the attempt's first start (database clock), which is no
// later than any commit under the key.
func (h *core) insideWindow(a domain.Attempt, now time.Time) bool {
	if h.cfg.ProviderWindow <= 0 {
		return false
	}
	return now.Add(h.cfg.ProviderTimeout + h.cfg.SendMargin).Before(a.StartedAt.Add(h.cfg.ProviderWindow))
}

// startAttempt appends PaymentAttemptStarted for attempt n with this process
// as the lease owner, at the revision o was loaded at. errRetry on a lost
// race or a refusal (the caller reloads and decides again).
//
// The attempt's inputs are stored, and the digest of its request (the
// token opened under the order's data key) with them; with the key gone
// (or no token) the order fails, as no attempt can start.
func (h *core) startAttempt(ctx context.Context, o domain.Order, s *stream, n int, now time.Time, st *driveState) error {
	noToken := func(why string) error {
		return h.endOrder(ctx, o, s, []domain.Event{domain.OrderFailed{OrderID: o.ID, Reason: domain.FailNoAttempt}}, why)
	}
	if !o.HasPaymentToken() {
		return noToken("no payment token")
	}
	dk, err := st.dk, error(nil)
	if dk == nil {
		dk, err = h.orderKey(ctx, o, true)
	}
	if errors.Is(err, errKeyGone) {
		return noToken("the payment token is gone: the order's data key was deleted")
	}
	if err != nil {
		return err
	}
	ev, err := h.attemptStart(ctx, o, n, now, dk)
	if err != nil {
		return err
	}
	if err := h.appendLease(ctx, o, s, ev, now, st); err != nil {
		return err
	}
	st.unsent = n
	return nil
}

// attemptStart decides the start of attempt n of o at now with this process
// as the lease owner: its inputs and the digest of its request, the token
// opened under the order's data key dk. It returns the
// PaymentAttemptStarted; errRetry when o refuses the start (the caller
// reloads and decides again), or the error of opening the token.
func (h *core) attemptStart(ctx context.Context, o domain.Order, n int, now time.Time, dk *envelope.DataKey) (domain.Event, error) {
	token, err := h.paymentMethod(ctx, o, dk)
	if err != nil {
		return nil, err
	}
	req := provider.PaymentRequest{Amount: o.Amount.Amount, Currency: o.Amount.Currency, PaymentMethod: token, OrderID: o.ID, Attempt: n,
		Deployment: h.cfg.Deployment, Description: fmt.Sprintf("%d ticket(s), order %s", o.Quantity, o.ID)}
	evs, err := o.Start(domain.StartAttempt{N: n, ProviderKey: h.providerKey(o.ID, n), Owner: h.cfg.Executor,
		LeaseUntil: now.Add(h.cfg.PaymentLease), RequestSHA256: attemptDigest(req), Description: req.Description, Deployment: req.Deployment,
		Settle: h.cfg.SettleMargin}, now)
	if err != nil {
		h.log.DebugContext(ctx, "payment attempt not started", "order_id", o.ID, "attempt", n, "why", err)
		return nil, errRetry
	}
	return evs[0], nil
}

// takeOverAttempt renews or takes over the lease of attempt a (same key, same
// inputs), fenced by the revision o was loaded at. errRetry on a lost race.
func (h *core) takeOverAttempt(ctx context.Context, o domain.Order, s *stream, a domain.Attempt, now time.Time, st *driveState) error {
	evs, err := o.Start(domain.StartAttempt{N: a.N, Owner: h.cfg.Executor, LeaseUntil: now.Add(h.cfg.PaymentLease)}, now)
	if err != nil {
		return errRetry
	}
	if err := h.appendLease(ctx, o, s, evs[0], now, st); err != nil {
		return err
	}
	if a.Owner == h.cfg.Executor {
		h.metrics.Reconciliation("lease_renewed")
	} else {
		h.metrics.Reconciliation("lease_taken_over")
		h.log.InfoContext(ctx, "payment lease taken over", "order_id", o.ID, "attempt", a.N, "previous_owner", a.Owner)
	}
	return nil
}

// appendLease appends a lease start at the loaded revision: a conflict means
// another executor decided first, and this one must not send (errRetry). If
// the answer is lost, appendEvents repeats the same append (same id, same
// revision): success means this process holds the lease and may send; still
// unknown returns the error and nothing is sent (the request answers 202,
// and the reconciler finds the lease, or its end, on a later pass). On
// success the next step starts from the order with the lease applied (st).
func (h *core) appendLease(ctx context.Context, o domain.Order, s *stream, e domain.Event, now time.Time, st *driveState) error {
	m := eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, OccurredAt: now}
	res, err := h.commit(ctx, s, m, pending{NewID(), e})
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		h.metrics.Reconciliation("lease_fenced")
		return errRetry
	}
	if err == nil {
		st.advance(o, s, res.NextRevision, e)
	}
	return err
}

// send makes the provider call of attempt a on a context detached from the
// request, bounded by the provider timeout and by the fence (the lease's end
// minus the send margin, held on the local monotonic clock from the database
// time read right before the call, after the attempt's inputs were read, so
// a process paused past its lease cannot start the call; with too little
// lease left by then it sends nothing and the caller decides again), then
// records the outcome as a fact.
func (h *core) send(ctx context.Context, o domain.Order, s *stream, a domain.Attempt, st *driveState) (step, error) {
	req, err := h.attemptRequest(ctx, o, a, st.dk)
	if errors.Is(err, errKeyGone) {
		// A key is deleted once the order can send no more (a cancel came
		// first, or the deadline passed): nothing is sent, and this call
		// still knows whether it ever sent under its lease (st.unsent), so
		// a cancel can finish at once. Decide again on a fresh reading.
		h.log.InfoContext(ctx, "payment attempt not sent: the order's data key is gone", "order_id", o.ID, "attempt", a.N)
		return stepLater, nil
	}
	if err != nil {
		h.log.WarnContext(ctx, "payment attempt not sent: its inputs cannot be read", "order_id", o.ID, "attempt", a.N, "err", err)
		return stepDone, err
	}
	// Reading the inputs may have taken any time (the key table): the
	// fence is checked again, and held, from a reading of the database
	// clock taken right before the call.
	now, err := h.streams.now(ctx)
	if err != nil {
		return stepDone, err
	}
	if !o.CanSend(a.N, h.cfg.Executor, now, h.cfg.ProviderTimeout+h.cfg.SendMargin) {
		return stepAgain, nil
	}
	st.unsent = 0
	start := time.Now()
	deadline := start.Add(h.cfg.ProviderTimeout)
	if fence := start.Add(a.LeaseUntil.Sub(now) - h.cfg.SendMargin); fence.Before(deadline) {
		deadline = fence
	}
	sctx, cancel := context.WithDeadline(h.detach(ctx), deadline)
	h.step(ctx, "payment.fenced")
	p, err := h.payments.CreatePayment(sctx, a.ProviderKey, req)
	cancel()
	h.step(ctx, "payment.sent")
	res, next, err := h.sendOutcome(ctx, o, a, p, err)
	if res == nil {
		return next, err
	}
	// What the provider did is recorded even if the caller is going away:
	// otherwise only a later reconciliation would learn it. Only a
	// shutdown past its grace period (Workers.Abandon) cuts the record
	// short, and then the reconciler learns the outcome from the list.
	rctx, rcancel := context.WithTimeout(h.detach(ctx), recordTimeout)
	defer rcancel()
	if res.Outcome == domain.OutcomeRequiresAction {
		res.SealedAction = h.sealAction(rctx, o, a.N, p, st.dk)
	}
	if err := h.recordPaymentFrom(rctx, o.ID, s, *res, ObservedBySend, st); err != nil {
		return stepDone, err
	}
	switch res.Outcome {
	case domain.OutcomeUnknown:
		return stepLater, nil
	case domain.OutcomeRequiresAction:
		return stepDone, nil // the customer acts; the webhook or a fetch settles it
	}
	return stepAgain, nil
}

// sendOutcome classifies the answer to attempt a's CreatePayment: the fact
// to record, or (nil) what the drive does next and its error. A 409 is
// "in progress" and an idempotency error an alert: neither is a decline.
func (h *core) sendOutcome(ctx context.Context, o domain.Order, a domain.Attempt, p provider.Payment, err error) (*domain.PaymentResult, step, error) {
	var apiErr *provider.APIError
	var res domain.PaymentResult
	switch {
	case err == nil:
		if p.OrderID() != o.ID {
			h.metrics.Reconciliation("foreign_payment")
			return nil, stepDone, fmt.Errorf("order %s attempt %d: the provider answered with payment %s of order %q", o.ID, a.N, p.ID, p.OrderID())
		}
		res = resultOf(a.N, p)
	case errors.Is(err, provider.ErrDeclined):
		res = domain.PaymentResult{Attempt: a.N, Outcome: domain.OutcomeFailed, Code: provider.CodeCardDeclined, Reason: "the payment was declined"}
		if errors.As(err, &apiErr) && apiErr.Payment != nil {
			res = resultOf(a.N, *apiErr.Payment)
		}
	case errors.Is(err, provider.ErrKeyInUse):
		// In progress at the provider: never a decline. Repeat the same
		// request after a backoff while the fence allows, then reconcile.
		h.metrics.Reconciliation("provider_in_use")
		return nil, stepLater, nil
	case errors.Is(err, provider.ErrIdempotency):
		// The key was used with other parameters: a bug or a key collision to
		// alert on, never a decline. Reconciliation by the list goes on.
		h.metrics.Reconciliation("idempotency_error")
		h.log.ErrorContext(ctx, "provider refused the attempt's key as reused with other parameters; needs attention",
			"order_id", o.ID, "attempt", a.N, "err", err)
		return nil, stepDone, nil
	case errors.Is(err, provider.ErrUnauthorized):
		// The provider refused our API key before executing anything: a
		// configuration fault to alert on, never a decline. The reconciler
		// retries once it is fixed.
		h.metrics.Reconciliation("provider_unauthorized")
		h.log.ErrorContext(ctx, "the provider refused the API key; nothing was charged", "order_id", o.ID, "attempt", a.N, "err", err)
		return nil, stepDone, unavailable(err)
	case errors.Is(err, provider.ErrInvalidRequest):
		// A definitive refusal that executed nothing (for example an unusable
		// payment method): this attempt cannot succeed, and neither can a new one.
		h.metrics.Reconciliation("provider_refused")
		h.log.WarnContext(ctx, "provider refused the payment request", "order_id", o.ID, "attempt", a.N, "err", err)
		res = domain.PaymentResult{Attempt: a.N, Outcome: domain.OutcomeFailed, Code: "invalid_request", Reason: domain.ReasonProviderRefused,
			FailReason: domain.FailPaymentDeclined}
		if errors.As(err, &apiErr) && apiErr.Code != "" {
			res.Code = apiErr.Code
		}
		if a.N > 1 {
			res.FailReason = domain.FailNoAttempt
		}
	case errors.Is(err, provider.ErrUnavailable):
		// Nothing was sent (also when the fence ran out before the call):
		// the reconciler retries.
		return nil, stepDone, unavailable(err)
	default:
		// ErrOutcomeUnknown — a timeout, a dropped connection, a 5xx, and a
		// 500 the provider replays for the key as well — and anything
		// unexpected: the payment may exist. Never a failure.
		res = domain.PaymentResult{Attempt: a.N, Outcome: domain.OutcomeUnknown, Reason: "no definitive answer from the provider"}
		if errors.As(err, &apiErr) && apiErr.Replayed {
			res.Reason = "the provider replays a server error for the attempt's key"
		}
	}
	return &res, stepAgain, nil
}

// Who observed a provider fact (eventstore.Metadata.ObservedBy).
const (
	ObservedBySend           = "send"           // the answer to the service's own provider call
	ObservedByReconciliation = "reconciliation" // a look-up of the attempt at the provider
	ObservedByWebhook        = "webhook"        // a provider notification (the payment fetched)
)

// recordPayment folds a provider fact into the order (deduplicated by payment
// id through Order.Record and deterministic event ids; never fenced) and
// runs the follow-ups of what it appended. via (ObservedBy…) is kept in the
// events' metadata, so the order's timeline says how the fact was learned.
func (h *core) recordPayment(ctx context.Context, orderID string, res domain.PaymentResult, via string) error {
	return h.recordPaymentFrom(ctx, orderID, nil, res, via, nil)
}

// recordPaymentFrom is recordPayment deciding first on from, the order
// stream as the caller knows it (nil reads it; a conflict reads it again).
// When st is not nil and the fact was appended, the next payment step
// starts from the order as the append left it.
func (h *core) recordPaymentFrom(ctx context.Context, orderID string, from *stream, res domain.PaymentResult, via string, st *driveState) error {
	c, after, err := h.updateFrom(ctx, domain.OrderStream(orderID), from, func(s *stream) (change, error) {
		o := fold[domain.Order](s.events)
		return change{events: derived(paymentCause(orderID, res), o.Record(res, TicketIDs(orderID, o.Quantity))),
			meta: eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, ObservedBy: via}}, nil
	})
	if err != nil || len(c.events) == 0 {
		return err
	}
	evs := c.domainEvents()
	o := fold[domain.Order](after.events)
	if st != nil && !slices.ContainsFunc(evs, isRefundRequested) {
		// The follow-ups below append nothing more to the order (a refund
		// would record its outcome there): the next step starts from it.
		st.known = &orderState{o: o, s: after, tail: true}
	}
	h.step(ctx, "payment.recorded")
	h.observe(ctx, orderID, evs)
	return h.afterOrderEventsOf(ctx, &o, orderID, evs)
}

// paymentCause is the cause the events recording result res of order
// orderID derive their ids from (derived): the order and the charge, so
// that whoever observes a charge's outcome appends the same ids; for a
// result without a charge, the attempt and the outcome.
func paymentCause(orderID string, res domain.PaymentResult) string {
	if res.ChargeID == "" {
		return orderID + "/attempt-" + strconv.Itoa(res.Attempt) + "/" + res.Outcome
	}
	return orderID + "/" + res.ChargeID
}

// succeededID is the id of the PaymentSucceeded that records payment
// chargeID (not empty) of order orderID as succeeded, whoever appends it
// (recordPaymentFrom).
func succeededID(orderID, chargeID string) string {
	return DerivedID(paymentCause(orderID, domain.PaymentResult{ChargeID: chargeID}), domain.TypePaymentSucceeded)
}

func isRefundRequested(e domain.Event) bool {
	_, ok := e.(domain.RefundRequested)
	return ok
}

// derived gives each event the id derived from cause and its type (a repeat
// of the same decision appends the same ids, so it is a no-op).
func derived(cause string, evs []domain.Event) []pending {
	pend := make([]pending, len(evs))
	for i, e := range evs {
		pend[i] = pending{DerivedID(cause, e.EventType()), e}
	}
	return pend
}

// observe counts and logs what appended order events mean for operators.
func (h *core) observe(ctx context.Context, orderID string, evs []domain.Event) {
	for _, e := range evs {
		switch e := e.(type) {
		case domain.RefundRequested:
			if e.Reason == domain.RefundRedundantEffect {
				h.metrics.RedundantEffect()
				h.log.WarnContext(ctx, "redundant charge; refund requested", "order_id", orderID, "charge_id", e.ChargeID)
			}
		case domain.OrderNeedsReview:
			h.metrics.Reconciliation("needs_review")
			h.log.ErrorContext(ctx, "order needs review", "order_id", orderID, "reason", e.Reason)
		}
	}
}

// endOrder appends order-ending events decided by the caller (a failure past
// the deadline, a finished cancel) at the loaded revision, and runs their
// follow-ups. No events is a no-op; errRetry on a lost race.
func (h *core) endOrder(ctx context.Context, o domain.Order, s *stream, evs []domain.Event, why string) error {
	if len(evs) == 0 {
		return nil
	}
	now, err := h.streams.now(ctx)
	if err != nil {
		return err
	}
	m := eventstore.Metadata{Actor: o.Actor, Intent: o.Intent, OccurredAt: now}
	pend := make([]pending, len(evs))
	for i, e := range evs {
		pend[i] = pending{DerivedID(o.ID, e.EventType()), e}
	}
	_, err = h.commit(ctx, s, m, pend...)
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return errRetry
	}
	if err != nil {
		return err
	}
	h.log.InfoContext(ctx, "order ended", "order_id", o.ID, "why", why)
	h.observe(ctx, o.ID, evs)
	return h.afterOrderEvents(ctx, o.ID, evs)
}

// afterOrderEvents runs the follow-ups of events just appended to an order:
// seats released after a failure or cancel, refunds sent after they were
// requested, payments waiting for the customer's action cancelled once the
// order ended. The process manager and the reconciler repeat them if this
// process dies first.
func (h *core) afterOrderEvents(ctx context.Context, orderID string, evs []domain.Event) error {
	return h.afterOrderEventsOf(ctx, nil, orderID, evs)
}

// afterOrderEventsOf is afterOrderEvents with the order as the caller knows
// it after the events (nil reads it).
func (h *core) afterOrderEventsOf(ctx context.Context, known *domain.Order, orderID string, evs []domain.Event) error {
	var o domain.Order
	if known != nil {
		o = *known
	} else {
		var err error
		if o, _, err = h.loadOrder(ctx, orderID); err != nil {
			return err
		}
	}
	for _, e := range evs {
		switch {
		case endsOrder(e):
			// Final: nothing can send whatever its key, so the delete is
			// batched off the request (within shredDelay), unless the
			// unit that appended e deleted it (shredIn).
			h.shredSoon(orderID)
		case endsSending(e):
			if err := h.shred(ctx, orderID); err != nil {
				h.log.WarnContext(ctx, "order key not deleted yet; the process manager retries", "order_id", orderID, "err", err)
			}
		}
		switch e := e.(type) {
		case domain.OrderFailed:
			if err := h.finishOrderEnd(ctx, o, domain.ReleasePaymentFailed, ""); err != nil {
				return err
			}
		case domain.OrderCancelled:
			if err := h.finishOrderEnd(ctx, o, domain.ReleaseCancelled, ""); err != nil {
				return err
			}
		case domain.RefundRequested:
			if err := h.sendRefund(ctx, orderID, e); err != nil {
				h.log.WarnContext(ctx, "refund not sent yet; the reconciler retries", "order_id", orderID, "charge_id", e.ChargeID, "err", err)
			}
		}
		if domain.EndsOrder(e.EventType()) {
			// A payment still waiting for the customer's action is
			// cancelled once the order can no longer use it.
			if err := h.cancelPayments(ctx, o); err != nil {
				h.log.WarnContext(ctx, "payment not cancelled yet; the reconciler retries", "order_id", orderID, "err", err)
			}
		}
	}
	return nil
}

// backoff is a capped exponential backoff with full jitter (AWS
// Architecture Blog, "Exponential Backoff And Jitter"). Not safe for
// concurrent use.
type backoff struct {
	base, max, cur time.Duration
}

func newBackoff(base, max time.Duration) *backoff { return &backoff{base: base, max: max} }

// next returns the next wait: uniform in [cur/2, cur], cur doubling up to max.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.base
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}
