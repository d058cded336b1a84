package domain

import (
	"fmt"
	"time"
)

// Order statuses, as shown by the API.
const (
	OrderStatusPending     = "pending"      // placed; payment not resolved yet
	OrderStatusConfirmed   = "confirmed"    // paid; tickets valid
	OrderStatusFailed      = "failed"       // payment declined or deadline passed; seats released
	OrderStatusCancelling  = "cancelling"   // cancel accepted while a payment was in flight or unknown
	OrderStatusCancelled   = "cancelled"    // cancelled; net charge 0; tickets void
	OrderStatusNeedsReview = "needs_review" // contradictory facts; terminal until an operator acts
)

// Payment outcomes of an attempt.
const (
	OutcomeNone      = ""
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeUnknown   = "unknown"
)

// Attempt is the state of one payment attempt (1-based N).
type Attempt struct {
	N             int
	ProviderKey   string
	Owner         string
	LeaseUntil    time.Time
	StartedAt     time.Time
	RequestSHA256 string
	RequestBody   string
	Outcome       string
	ChargeID      string
	// Takeovers counts the lease takeovers of the attempt.
	Takeovers int
}

// Refund is the state of one refund, keyed by charge id.
type Refund struct {
	ChargeID  string
	Amount    Money
	Key       string
	Reason    string
	Succeeded bool
	RefundID  string
}

// Order is the state of an order stream. The zero Order does not exist. Not
// safe for concurrent use.
type Order struct {
	ID              string
	ReservationID   string
	ShowID          string
	Actor           string
	Intent          string
	Quantity        int
	Amount          Money
	PaymentDeadline time.Time
	PaymentToken    string
	Status          string
	// FirstOutcome is the first final payment outcome ("confirmed" or
	// "declined"); it fixes the status of replays of the creating intent.
	FirstOutcome string
	FailReason   string
	Attempts     []Attempt
	ChargeID     string // the charge that paid the order
	Tickets      []Ticket
	Refunds      map[string]*Refund
	// Charges records every charge id seen succeeded or failed, for dedup.
	Charges map[string]string
}

// Exists reports whether the order stream has been opened.
func (o *Order) Exists() bool { return o.Status != "" }

// LastAttempt returns the current attempt, or nil before the first.
func (o *Order) LastAttempt() *Attempt {
	if len(o.Attempts) == 0 {
		return nil
	}
	return &o.Attempts[len(o.Attempts)-1]
}

// Final reports whether the order has reached a status that payments can no
// longer change (refunds of redundant effects still can happen).
func (o *Order) Final() bool {
	switch o.Status {
	case OrderStatusConfirmed, OrderStatusFailed, OrderStatusCancelled, OrderStatusNeedsReview:
		return true
	}
	return false
}

// NetCharged returns the amount charged and not refunded (refund requested
// counts as pending, not refunded).
func (o *Order) NetCharged() int64 {
	var n int64
	if o.ChargeID != "" {
		n += o.Amount.Amount
	}
	for _, r := range o.Refunds {
		if r.Succeeded && r.ChargeID == o.ChargeID {
			n -= r.Amount.Amount
		}
	}
	return n
}

// PlacedFrom derives OrderPlaced from the order claim.
func PlacedFrom(c OrderClaimed, deadline time.Time, token string) OrderPlaced {
	p := OrderPlaced{OrderID: c.OrderID, ReservationID: c.ReservationID, ShowID: c.ShowID, Actor: c.Actor,
		Intent: c.Intent, Quantity: c.Quantity, Amount: c.Amount, PaymentDeadline: deadline.UTC()}
	if token != "" {
		p.Private = &OrderPrivate{PaymentToken: token}
	}
	return p
}

// Apply evolves the order by one event of its stream.
func (o *Order) Apply(e Event) {
	switch e := e.(type) {
	case OrderPlaced:
		*o = Order{ID: e.OrderID, ReservationID: e.ReservationID, ShowID: e.ShowID, Actor: e.Actor, Intent: e.Intent,
			Quantity: e.Quantity, Amount: e.Amount, PaymentDeadline: e.PaymentDeadline, Status: OrderStatusPending,
			Refunds: map[string]*Refund{}, Charges: map[string]string{}}
		if e.Private != nil {
			o.PaymentToken = e.Private.PaymentToken
		}
	case PaymentAttemptStarted:
		a := Attempt{N: e.Attempt, ProviderKey: e.ProviderKey, Owner: e.Owner, LeaseUntil: e.LeaseUntil,
			StartedAt: e.StartedAt, RequestSHA256: e.RequestSHA256}
		if e.Private != nil {
			a.RequestBody = e.Private.RequestBody
		}
		if last := o.LastAttempt(); last != nil && last.N == e.Attempt {
			// A takeover of the same attempt keeps its request and outcome.
			last.Owner, last.LeaseUntil = e.Owner, e.LeaseUntil
			last.Takeovers++
			return
		}
		o.Attempts = append(o.Attempts, a)
	case PaymentSucceeded:
		o.Charges[e.ChargeID] = OutcomeSucceeded
		if a := o.attempt(e.Attempt); a != nil {
			a.Outcome, a.ChargeID = OutcomeSucceeded, e.ChargeID
		}
		if o.ChargeID == "" {
			o.ChargeID = e.ChargeID
		}
	case PaymentFailed:
		if e.ChargeID != "" {
			o.Charges[e.ChargeID] = OutcomeFailed
		}
		if a := o.attempt(e.Attempt); a != nil && a.Outcome != OutcomeSucceeded {
			a.Outcome, a.ChargeID = OutcomeFailed, e.ChargeID
		}
	case PaymentOutcomeUnknown:
		if a := o.attempt(e.Attempt); a != nil && a.Outcome == OutcomeNone {
			a.Outcome = OutcomeUnknown
		}
	case OrderConfirmed:
		o.Status, o.Tickets = OrderStatusConfirmed, e.Tickets
		if o.FirstOutcome == "" {
			o.FirstOutcome = OrderStatusConfirmed
		}
	case OrderFailed:
		o.Status, o.FailReason = OrderStatusFailed, e.Reason
		if o.FirstOutcome == "" {
			o.FirstOutcome = e.Reason
		}
	case OrderCancelRequested:
		o.Status = OrderStatusCancelling
	case OrderCancelled:
		o.Status = OrderStatusCancelled
		if o.FirstOutcome == "" {
			o.FirstOutcome = OrderStatusCancelled
		}
	case RefundRequested:
		if _, ok := o.Refunds[e.ChargeID]; !ok {
			o.Refunds[e.ChargeID] = &Refund{ChargeID: e.ChargeID, Amount: e.Amount, Key: e.Key, Reason: e.Reason}
		}
	case RefundSucceeded:
		if r, ok := o.Refunds[e.ChargeID]; ok {
			r.Succeeded, r.RefundID = true, e.RefundID
		}
	case OrderNeedsReview:
		o.Status = OrderStatusNeedsReview
	}
}

func (o *Order) attempt(n int) *Attempt {
	for i := range o.Attempts {
		if o.Attempts[i].N == n {
			return &o.Attempts[i]
		}
	}
	return nil
}

// StartAttempt is the command to start payment attempt N, or to take over
// its lease when N is the current attempt.
type StartAttempt struct {
	N             int
	ProviderKey   string
	Owner         string
	LeaseUntil    time.Time
	RequestSHA256 string
	RequestBody   string
}

// ErrAttemptNotAllowed is returned when a payment attempt may not start or be
// taken over: the order is final or cancelling, the attempt has an outcome,
// or its lease is still held by another owner.
var ErrAttemptNotAllowed = &Error{Kind: Conflict, Code: "attempt-not-allowed", Msg: "payment attempt not allowed"}

// Start decides StartAttempt. A new attempt (N = last+1) needs the order
// pending and the previous attempt resolved as unknown-and-reconciled by the
// caller; a takeover (N = last) needs the previous lease expired by now and
// keeps the attempt's request bytes. Returns ErrAttemptNotAllowed otherwise.
func (o *Order) Start(cmd StartAttempt, now time.Time) ([]Event, error) {
	if o.Status != OrderStatusPending {
		return nil, ErrAttemptNotAllowed.With("order is " + o.Status)
	}
	ev := PaymentAttemptStarted{OrderID: o.ID, Attempt: cmd.N, ProviderKey: cmd.ProviderKey, Owner: cmd.Owner,
		LeaseUntil: cmd.LeaseUntil.UTC(), Amount: o.Amount, StartedAt: now.UTC(), RequestSHA256: cmd.RequestSHA256,
		Private: &AttemptPrivate{RequestBody: cmd.RequestBody}}
	last := o.LastAttempt()
	switch {
	case last == nil && cmd.N == 1:
	case last != nil && cmd.N == last.N:
		if last.Outcome == OutcomeSucceeded || last.Outcome == OutcomeFailed {
			return nil, ErrAttemptNotAllowed.With("attempt already has an outcome")
		}
		if last.Owner != cmd.Owner && now.Before(last.LeaseUntil) {
			return nil, ErrAttemptNotAllowed.With("lease held by another owner")
		}
		ev.ProviderKey, ev.RequestSHA256, ev.StartedAt = last.ProviderKey, last.RequestSHA256, last.StartedAt
		ev.Private = &AttemptPrivate{RequestBody: last.RequestBody}
	case last != nil && cmd.N == last.N+1:
		if last.Outcome == OutcomeSucceeded || last.Outcome == OutcomeFailed {
			return nil, ErrAttemptNotAllowed.With("previous attempt has an outcome")
		}
		if now.Before(last.LeaseUntil) {
			return nil, ErrAttemptNotAllowed.With("previous attempt's lease is still held")
		}
	default:
		return nil, ErrAttemptNotAllowed.With(fmt.Sprintf("attempt %d is out of sequence", cmd.N))
	}
	return []Event{ev}, nil
}

// CanSend reports whether owner may send attempt n now: it holds the lease
// and now+budget (provider timeout plus a safety margin) is before the
// lease's end. This is the fence on external effects.
func (o *Order) CanSend(n int, owner string, now time.Time, budget time.Duration) bool {
	a := o.attempt(n)
	return a != nil && a.Owner == owner && a.Outcome != OutcomeSucceeded && a.Outcome != OutcomeFailed &&
		o.Status == OrderStatusPending && now.Add(budget).Before(a.LeaseUntil)
}

// PaymentResult is a provider fact about one charge of attempt Attempt.
type PaymentResult struct {
	Attempt  int
	Outcome  string // OutcomeSucceeded, OutcomeFailed or OutcomeUnknown
	ChargeID string
	Amount   Money
	Code     string // decline code
	Reason   string
}

// RefundKey is the provider idempotency key of a charge's refund.
func RefundKey(chargeID string) string { return "refund-" + chargeID }

// Record folds a provider fact into the order. Facts are never refused:
// whoever observed them appends them. It returns the events to append (none
// for a fact already known):
//   - a success while pending confirms the order with ticketIDs' tickets;
//   - a success of another charge than the one that paid, or any success
//     after the order failed or was cancelled, is a redundant effect:
//     RefundRequested (reason "redundant_effect");
//   - a success while cancelling is refunded and the order cancelled;
//   - a decline while pending fails the order (reason payment_declined);
//     while cancelling it cancels the order;
//   - an unknown outcome is recorded once per attempt while pending.
func (o *Order) Record(r PaymentResult, ticketIDs []string) []Event {
	if !o.Exists() {
		return nil
	}
	switch r.Outcome {
	case OutcomeSucceeded:
		if _, seen := o.Charges[r.ChargeID]; seen && o.Charges[r.ChargeID] == OutcomeSucceeded {
			return nil
		}
		if _, refunding := o.Refunds[r.ChargeID]; refunding {
			return nil
		}
		amount := r.Amount
		if amount.Currency == "" {
			amount = o.Amount
		}
		succeeded := PaymentSucceeded{OrderID: o.ID, Attempt: r.Attempt, ChargeID: r.ChargeID, Amount: amount}
		refund := RefundRequested{OrderID: o.ID, ChargeID: r.ChargeID, Amount: amount, Key: RefundKey(r.ChargeID), Reason: "redundant_effect"}
		switch o.Status {
		case OrderStatusPending:
			tickets := make([]Ticket, len(ticketIDs))
			for i, id := range ticketIDs {
				tickets[i] = Ticket{ID: id}
			}
			return []Event{succeeded, OrderConfirmed{OrderID: o.ID, Tickets: tickets}}
		case OrderStatusCancelling:
			refund.Reason = "cancelled"
			return []Event{succeeded, refund, OrderCancelled{OrderID: o.ID}}
		default:
			return []Event{refund}
		}
	case OutcomeFailed:
		if r.ChargeID != "" {
			if _, seen := o.Charges[r.ChargeID]; seen {
				return nil
			}
		}
		failed := PaymentFailed{OrderID: o.ID, Attempt: r.Attempt, ChargeID: r.ChargeID, Code: r.Code, Reason: r.Reason}
		switch o.Status {
		case OrderStatusPending:
			if a := o.attempt(r.Attempt); a != nil && a.Outcome == OutcomeFailed {
				return nil
			}
			return []Event{failed, OrderFailed{OrderID: o.ID, Reason: FailPaymentDeclined}}
		case OrderStatusCancelling:
			return []Event{failed, OrderCancelled{OrderID: o.ID}}
		default:
			if r.ChargeID == "" {
				return nil
			}
			return []Event{failed}
		}
	case OutcomeUnknown:
		a := o.attempt(r.Attempt)
		if a == nil || a.Outcome != OutcomeNone || (o.Status != OrderStatusPending && o.Status != OrderStatusCancelling) {
			return nil
		}
		return []Event{PaymentOutcomeUnknown{OrderID: o.ID, Attempt: r.Attempt, Reason: r.Reason}}
	}
	return nil
}

// RecordRefund folds a provider's refund of chargeID into the order; no
// events if it is already known or was never requested.
func (o *Order) RecordRefund(chargeID, refundID string, amount Money) []Event {
	r, ok := o.Refunds[chargeID]
	if !ok || r.Succeeded {
		return nil
	}
	return []Event{RefundSucceeded{OrderID: o.ID, ChargeID: chargeID, RefundID: refundID, Amount: amount}}
}

// Cancel decides a cancel requested by actor at now, before showStartsAt.
// A confirmed order is refunded and cancelled (tickets voided); a pending
// order without a payment in flight is cancelled at once; with a payment in
// flight or unknown it becomes cancelling. A repeat returns no events.
// Returns ErrOrderNotFound for another actor's order, ErrShowStarted once
// the show has started, ErrNotCancellable for a failed or needs_review order.
func (o *Order) Cancel(actor string, now, showStartsAt time.Time) ([]Event, error) {
	if !o.Exists() || o.Actor != actor {
		return nil, ErrOrderNotFound
	}
	switch o.Status {
	case OrderStatusCancelled, OrderStatusCancelling:
		return nil, nil
	case OrderStatusFailed, OrderStatusNeedsReview:
		return nil, ErrNotCancellable.With("the order is " + o.Status)
	}
	if !now.Before(showStartsAt) {
		return nil, ErrShowStarted
	}
	switch o.Status {
	case OrderStatusConfirmed:
		voided := make([]string, len(o.Tickets))
		for i, t := range o.Tickets {
			voided[i] = t.ID
		}
		return []Event{
			RefundRequested{OrderID: o.ID, ChargeID: o.ChargeID, Amount: o.Amount, Key: RefundKey(o.ChargeID), Reason: "cancelled"},
			OrderCancelled{OrderID: o.ID, VoidedTickets: voided},
		}, nil
	default: // pending
		if last := o.LastAttempt(); last != nil {
			return []Event{OrderCancelRequested{OrderID: o.ID, Actor: actor}}, nil
		}
		return []Event{OrderCancelled{OrderID: o.ID}}, nil
	}
}

// FailPastDeadline decides the payment deadline: a pending order with no
// lease held at now and past its deadline fails (seats released).
func (o *Order) FailPastDeadline(now time.Time) []Event {
	if o.Status != OrderStatusPending || now.Before(o.PaymentDeadline) {
		return nil
	}
	if last := o.LastAttempt(); last != nil && (now.Before(last.LeaseUntil) || last.Outcome == OutcomeUnknown) {
		return nil
	}
	return []Event{OrderFailed{OrderID: o.ID, Reason: FailPaymentDeadline}}
}
