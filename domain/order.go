package domain

import (
	"fmt"
	"sort"
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

// Payment outcomes of an attempt. OutcomeRequiresAction is a durable
// pending outcome: the attempt's payment exists and waits for the
// customer's authentication (PaymentActionRequired).
const (
	OutcomeNone           = ""
	OutcomeSucceeded      = "succeeded"
	OutcomeFailed         = "failed"
	OutcomeUnknown        = "unknown"
	OutcomeRequiresAction = "requires_action"
)

// Refund reasons (RefundRequested.Reason).
const (
	RefundCancelled       = "cancelled"        // the order was cancelled
	RefundRedundantEffect = "redundant_effect" // a charge the order does not need
)

// Attempt is the state of one payment attempt (1-based N).
type Attempt struct {
	N             int
	ProviderKey   string
	Owner         string
	LeaseUntil    time.Time
	StartedAt     time.Time
	RequestSHA256 string
	// Amount, Description and Deployment are the attempt's inputs (schema
	// version 3; the payment method is the order's token).
	Amount      Money
	Description string
	Deployment  string
	// SealedRequestBody is the charge request of a version-2 attempt,
	// sealed under the order's data key; RequestBody the clear bytes of a
	// version-1 one. Both are empty for a version-3 attempt (see Legacy).
	SealedRequestBody []byte
	RequestBody       string
	Outcome           string
	// ChargeID is the provider's payment of the attempt once an outcome
	// names one (a PaymentIntent id).
	ChargeID string
	// SealedAction is the client secret and next action of the attempt's
	// payment while it requires the customer's action (sealed under the
	// order's data key; nil when the key was gone).
	SealedAction []byte
	// Takeovers counts the lease starts of the attempt after the first
	// (renewals by the owner and takeovers by another executor).
	Takeovers int
	// FailureCode and FailureReason are the Code and Reason of the
	// attempt's PaymentFailed (empty until it failed).
	FailureCode, FailureReason string
}

// Legacy reports whether the attempt was stored as a charge request's bytes
// (schema versions 1 and 2) rather than as its inputs.
func (a *Attempt) Legacy() bool { return a.RequestBody != "" || len(a.SealedRequestBody) > 0 }

// Refund is the state of one refund, keyed by charge id (the refunded
// PaymentIntent's id).
type Refund struct {
	ChargeID  string
	Amount    Money // requested
	Key       string
	Reason    string
	Succeeded bool
	RefundID  string
	Refunded  Money // as recorded by RefundSucceeded
	// Refused is set by RefundRefused: the provider does not know the
	// charge, so the refund is no longer sent (the order is in review).
	Refused bool
}

// ChargeFact is what the order knows about one provider payment (a
// PaymentIntent), succeeded or failed.
type ChargeFact struct {
	Attempt int
	Outcome string // OutcomeSucceeded or OutcomeFailed
	Amount  Money
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
	// SealedPaymentToken is the token sealed under the order's data key
	// (schema version 2); PaymentToken the clear token of a version-1 event.
	SealedPaymentToken []byte
	PaymentToken       string
	Status             string
	// FirstOutcome is the first final payment outcome ("confirmed",
	// "cancelled" or an OrderFailed reason); it fixes the status of replays
	// of the creating intent.
	FirstOutcome string
	FailReason   string
	ReviewReason string
	// CancelAccepted is set once a cancel was accepted (OrderCancelRequested
	// or OrderCancelled); it stays set if the order goes to review later (a
	// refund the provider refused), so a repeat of the cancel is not refused.
	CancelAccepted bool
	Attempts       []Attempt
	ChargeID       string // the charge that paid the order (also when refunded after a cancel)
	Tickets        []Ticket
	Refunds        map[string]*Refund
	// Charges records every charge seen succeeded or failed, by charge id,
	// for dedup and for the net amount charged.
	Charges map[string]ChargeFact
}

// Exists reports whether the order stream has been opened.
func (o *Order) Exists() bool { return o.Status != "" }

// HasPaymentToken reports whether the order carries a payment token (sealed,
// or in clear from a version-1 event). Without one no attempt can start.
func (o *Order) HasPaymentToken() bool { return o.PaymentToken != "" || len(o.SealedPaymentToken) > 0 }

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

// NetCharged returns the minor units charged for the order and not refunded,
// over every succeeded charge it knows (a requested refund counts only once
// it succeeded).
func (o *Order) NetCharged() int64 {
	var n int64
	for _, c := range o.Charges {
		if c.Outcome == OutcomeSucceeded {
			n += c.Amount.Amount
		}
	}
	for _, r := range o.Refunds {
		if r.Succeeded {
			n -= r.Refunded.Amount
		}
	}
	return n
}

// PendingRefunds returns the refunds requested and neither recorded as
// succeeded nor refused by the provider (the ones still to send), ordered
// by charge id.
func (o *Order) PendingRefunds() []Refund {
	var out []Refund
	for _, r := range o.Refunds {
		if !r.Succeeded && !r.Refused {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ChargeID < out[j].ChargeID })
	return out
}

// PlacedFrom derives OrderPlaced from the order claim. sealedToken is the
// payment token sealed under the order's data key, nil when it is not known
// (the order's payment then fails).
func PlacedFrom(c OrderClaimed, deadline time.Time, sealedToken []byte) OrderPlaced {
	p := OrderPlaced{OrderID: c.OrderID, ReservationID: c.ReservationID, ShowID: c.ShowID, Actor: c.Actor,
		Intent: c.Intent, Quantity: c.Quantity, Amount: c.Amount, PaymentDeadline: deadline.UTC()}
	if len(sealedToken) > 0 {
		p.Private = &OrderPrivate{SealedPaymentToken: sealedToken}
	}
	return p
}

// Apply evolves the order by one event of its stream.
func (o *Order) Apply(e Event) {
	switch e := e.(type) {
	case OrderPlaced:
		o.placed(e)
	case PaymentAttemptStarted:
		o.attemptStarted(e)
	case PaymentSucceeded:
		o.paymentSucceeded(e)
	case PaymentFailed:
		o.paymentFailed(e)
	case PaymentOutcomeUnknown:
		if a := o.attempt(e.Attempt); a != nil && a.Outcome == OutcomeNone {
			a.Outcome = OutcomeUnknown
		}
	case PaymentActionRequired:
		o.actionRequired(e)
	case OrderConfirmed:
		o.Status, o.Tickets = OrderStatusConfirmed, e.Tickets
		o.firstOutcome(OrderStatusConfirmed)
	case OrderFailed:
		o.Status, o.FailReason = OrderStatusFailed, e.Reason
		o.firstOutcome(e.Reason)
	case OrderCancelRequested:
		o.Status, o.CancelAccepted = OrderStatusCancelling, true
	case OrderCancelled:
		o.Status, o.CancelAccepted = OrderStatusCancelled, true
		o.firstOutcome(OrderStatusCancelled)
	case RefundRequested, RefundSucceeded, RefundRefused:
		o.applyRefund(e)
	case OrderNeedsReview:
		o.Status, o.ReviewReason = OrderStatusNeedsReview, e.Reason
	}
}

// placed starts the order over from its OrderPlaced.
func (o *Order) placed(e OrderPlaced) {
	*o = Order{ID: e.OrderID, ReservationID: e.ReservationID, ShowID: e.ShowID, Actor: e.Actor, Intent: e.Intent,
		Quantity: e.Quantity, Amount: e.Amount, PaymentDeadline: e.PaymentDeadline, Status: OrderStatusPending,
		Refunds: map[string]*Refund{}, Charges: map[string]ChargeFact{}}
	if e.Private != nil {
		o.PaymentToken, o.SealedPaymentToken = e.Private.PaymentToken, e.Private.SealedPaymentToken
	}
}

// attemptStarted adds a new attempt, or renews the lease of the current
// one when e starts the same attempt again.
func (o *Order) attemptStarted(e PaymentAttemptStarted) {
	if last := o.LastAttempt(); last != nil && last.N == e.Attempt {
		// A renewal or takeover of the same attempt keeps its key, request
		// bytes, first start and outcome.
		last.Owner, last.LeaseUntil = e.Owner, e.LeaseUntil
		last.Takeovers++
		return
	}
	a := Attempt{N: e.Attempt, ProviderKey: e.ProviderKey, Owner: e.Owner, LeaseUntil: e.LeaseUntil,
		StartedAt: e.StartedAt, RequestSHA256: e.RequestSHA256, Amount: e.Amount, Description: e.Description, Deployment: e.Deployment}
	if e.Private != nil {
		a.RequestBody, a.SealedRequestBody = e.Private.RequestBody, e.Private.SealedRequestBody
	}
	o.Attempts = append(o.Attempts, a)
}

// paymentSucceeded records the charge, settles its attempt (a success is
// final) and, while the order is still open, makes it the order's charge.
func (o *Order) paymentSucceeded(e PaymentSucceeded) {
	o.initMaps()
	o.Charges[e.ChargeID] = ChargeFact{Attempt: e.Attempt, Outcome: OutcomeSucceeded, Amount: e.Amount}
	if a := o.attempt(e.Attempt); a != nil && a.Outcome != OutcomeSucceeded {
		a.Outcome, a.ChargeID = OutcomeSucceeded, e.ChargeID
	}
	if o.ChargeID == "" && (o.Status == OrderStatusPending || o.Status == OrderStatusCancelling) {
		o.ChargeID = e.ChargeID
	}
}

// paymentFailed records a failed charge and attempt, unless a success was
// already recorded for either.
func (o *Order) paymentFailed(e PaymentFailed) {
	o.initMaps()
	if e.ChargeID != "" {
		if c, ok := o.Charges[e.ChargeID]; !ok || c.Outcome != OutcomeSucceeded {
			o.Charges[e.ChargeID] = ChargeFact{Attempt: e.Attempt, Outcome: OutcomeFailed}
		}
	}
	if a := o.attempt(e.Attempt); a != nil && a.Outcome != OutcomeSucceeded {
		a.Outcome, a.ChargeID = OutcomeFailed, e.ChargeID
		a.FailureCode, a.FailureReason = e.Code, e.Reason
	}
}

// actionRequired marks an attempt without a known outcome as waiting for
// the customer's action.
func (o *Order) actionRequired(e PaymentActionRequired) {
	if a := o.attempt(e.Attempt); a != nil && (a.Outcome == OutcomeNone || a.Outcome == OutcomeUnknown) {
		a.Outcome, a.ChargeID = OutcomeRequiresAction, e.PaymentID
		if e.Private != nil {
			a.SealedAction = e.Private.SealedAction
		}
	}
}

// firstOutcome sets the order's first outcome unless it has one.
func (o *Order) firstOutcome(outcome string) {
	if o.FirstOutcome == "" {
		o.FirstOutcome = outcome
	}
}

// applyRefund evolves the order's refunds by a RefundRequested (the first
// request of a charge counts), RefundSucceeded or RefundRefused (a refusal
// after a success changes nothing).
func (o *Order) applyRefund(e Event) {
	switch e := e.(type) {
	case RefundRequested:
		o.initMaps()
		if _, ok := o.Refunds[e.ChargeID]; !ok {
			o.Refunds[e.ChargeID] = &Refund{ChargeID: e.ChargeID, Amount: e.Amount, Key: e.Key, Reason: e.Reason}
		}
	case RefundSucceeded:
		if r, ok := o.Refunds[e.ChargeID]; ok {
			r.Succeeded, r.RefundID, r.Refunded = true, e.RefundID, e.Amount
		}
	case RefundRefused:
		if r, ok := o.Refunds[e.ChargeID]; ok && !r.Succeeded {
			r.Refused = true
		}
	}
}

// initMaps makes the fact maps of an order that was not placed (a stream
// whose first event is not OrderPlaced, which the service never writes):
// folding such a stream must not panic a reader.
func (o *Order) initMaps() {
	if o.Charges == nil {
		o.Charges = map[string]ChargeFact{}
	}
	if o.Refunds == nil {
		o.Refunds = map[string]*Refund{}
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

// StartAttempt is the command to start payment attempt N, or to renew or
// take over its lease when N is the current attempt. ProviderKey,
// RequestSHA256 (the digest of the attempt's inputs), Description and
// Deployment are a new attempt's; a renewal or takeover ignores them.
type StartAttempt struct {
	N             int
	ProviderKey   string
	Owner         string
	LeaseUntil    time.Time
	RequestSHA256 string
	Description   string
	Deployment    string
	// Settle is the settling margin: a new attempt starts only when the
	// previous attempt's lease ended at least Settle ago, so that its last
	// send (begun at least ProviderTimeout + SendMargin before the lease's
	// end) is older than the provider timeout plus Settle.
	Settle time.Duration
}

// ErrAttemptNotAllowed is returned when a payment attempt may not start or be
// taken over: the order is not pending, the deadline passed, the attempt has
// an outcome, its lease is held by another owner, or the previous attempt
// has not settled.
var ErrAttemptNotAllowed = &Error{Kind: Conflict, Code: "attempt-not-allowed", Msg: "payment attempt not allowed"}

// Start decides StartAttempt at now. It returns the PaymentAttemptStarted to
// append at the expected revision the order was loaded at (the revision is
// the lease's fencing token), or ErrAttemptNotAllowed.
//
//   - The first attempt (N = 1) needs a pending order before its deadline.
//   - A renewal or takeover (N = last) needs the attempt without a final or
//     pending outcome (none or unknown), and its lease expired or held by
//     cmd.Owner; it keeps the attempt's key, inputs and StartedAt, so every
//     send of the attempt is the same.
//   - A new attempt (N = last+1) needs the previous one without a final or
//     pending outcome and settled (its lease ended at least cmd.Settle
//     before now); the caller must have proved that the previous attempt
//     made no payment at the provider (a list of the payments created in
//     its time range).
func (o *Order) Start(cmd StartAttempt, now time.Time) ([]Event, error) {
	if o.Status != OrderStatusPending {
		return nil, ErrAttemptNotAllowed.With("order is " + o.Status)
	}
	if !now.Before(o.PaymentDeadline) {
		return nil, ErrAttemptNotAllowed.With("the payment deadline has passed")
	}
	ev := PaymentAttemptStarted{OrderID: o.ID, Attempt: cmd.N, ProviderKey: cmd.ProviderKey, Owner: cmd.Owner,
		LeaseUntil: cmd.LeaseUntil.UTC(), Amount: o.Amount, StartedAt: now.UTC(), RequestSHA256: cmd.RequestSHA256,
		Description: cmd.Description, Deployment: cmd.Deployment}
	last := o.LastAttempt()
	switch {
	case last == nil && cmd.N == 1:
	case last != nil && cmd.N == last.N:
		if last.resolved() {
			return nil, ErrAttemptNotAllowed.With("attempt already has an outcome")
		}
		if last.Owner != cmd.Owner && now.Before(last.LeaseUntil) {
			return nil, ErrAttemptNotAllowed.With("lease held by another owner")
		}
		// The first start holds the key, the inputs and the start time.
		ev.ProviderKey, ev.RequestSHA256, ev.StartedAt = last.ProviderKey, last.RequestSHA256, last.StartedAt
		ev.Description, ev.Deployment = "", ""
	case last != nil && cmd.N == last.N+1:
		if last.resolved() {
			return nil, ErrAttemptNotAllowed.With("previous attempt has an outcome")
		}
		if now.Before(last.LeaseUntil.Add(cmd.Settle)) {
			return nil, ErrAttemptNotAllowed.With("previous attempt has not settled")
		}
	default:
		return nil, ErrAttemptNotAllowed.With(fmt.Sprintf("attempt %d is out of sequence", cmd.N))
	}
	if cmd.LeaseUntil.IsZero() || !now.Before(cmd.LeaseUntil) {
		return nil, ErrAttemptNotAllowed.With("the lease must end after now")
	}
	return []Event{ev}, nil
}

// resolved reports whether the attempt's payment is known: succeeded,
// failed, or waiting for the customer's action. Such an attempt is never
// sent again, and no new attempt follows it.
func (a *Attempt) resolved() bool {
	return a.Outcome == OutcomeSucceeded || a.Outcome == OutcomeFailed || a.Outcome == OutcomeRequiresAction
}

// CanSend reports whether owner may send attempt n at now: n is the current
// attempt and its outcome is none or unknown, the order is pending and before its payment
// deadline, owner holds the lease, and now+budget (provider timeout plus the
// send margin) is before the lease's end. This is the fence on external
// effects.
func (o *Order) CanSend(n int, owner string, now time.Time, budget time.Duration) bool {
	a := o.LastAttempt()
	return a != nil && a.N == n && a.Owner == owner && !a.resolved() &&
		o.Status == OrderStatusPending && now.Before(o.PaymentDeadline) && now.Add(budget).Before(a.LeaseUntil)
}

// Settled reports whether no send of the order can still be executing at
// the provider at now: there is no attempt, or the last attempt's lease
// ended at least settle before now.
func (o *Order) Settled(now time.Time, settle time.Duration) bool {
	last := o.LastAttempt()
	return last == nil || !now.Before(last.LeaseUntil.Add(settle))
}

// PaymentResult is a provider fact about one payment (PaymentIntent) of
// attempt Attempt.
type PaymentResult struct {
	Attempt  int
	Outcome  string // OutcomeSucceeded, OutcomeFailed, OutcomeUnknown or OutcomeRequiresAction
	ChargeID string // the PaymentIntent id; empty for an unknown outcome or a refusal that made no payment
	Amount   Money  // of the charge; zero means the order's amount
	Code     string // decline or refusal code
	Reason   string
	// FailReason is the OrderFailed reason of a failure of the current
	// attempt while pending; empty means FailPaymentDeclined.
	FailReason string
	// SealedAction is, for OutcomeRequiresAction, the client secret and
	// next action sealed under the order's data key (nil when the key is
	// gone).
	SealedAction []byte
}

// RefundKey is the provider idempotency key of the refund of a payment
// (chargeID, a PaymentIntent id).
func RefundKey(chargeID string) string { return "refund-" + chargeID }

// CancelKey is the provider idempotency key of the cancel of a payment
// (a PaymentIntent id) that waits for the customer's action.
func CancelKey(paymentID string) string { return "cancel-" + paymentID }

// Record folds a provider fact into the order. Facts are never refused and
// never fenced: whoever observed them appends them. It returns the events
// to append, none for a fact already known:
//   - a success is recorded once per charge id (PaymentSucceeded); while
//     pending it confirms the order with ticketIDs' tickets, unless its
//     amount differs from the order's (needs_review); while cancelling it is
//     refunded and the order cancelled; in any other status (confirmed by
//     another charge, failed, cancelled, needs_review) it is a redundant
//     effect and refunded (RefundRequested, reason redundant_effect);
//   - a failure of the current attempt fails a pending order (r.FailReason,
//     default payment_declined) and cancels a cancelling one; a failure of
//     an older attempt, or in a final status, is recorded as a fact only;
//     a failure reported for the charge that paid a confirmed order is a
//     contradiction (needs_review);
//   - an unknown outcome is recorded once per attempt while pending or
//     cancelling;
//   - a payment that requires the customer's action is recorded once
//     (PaymentActionRequired) for an attempt whose outcome is none or
//     unknown, whatever the order's status: a pending order waits for it,
//     and an order that can no longer use it has it cancelled
//     (PaymentsToCancel).
func (o *Order) Record(r PaymentResult, ticketIDs []string) []Event {
	if !o.Exists() {
		return nil
	}
	switch r.Outcome {
	case OutcomeSucceeded:
		return o.recordSuccess(r, ticketIDs)
	case OutcomeFailed:
		return o.recordFailure(r)
	case OutcomeUnknown:
		a := o.attempt(r.Attempt)
		if a == nil || a.Outcome != OutcomeNone || (o.Status != OrderStatusPending && o.Status != OrderStatusCancelling) {
			return nil
		}
		return []Event{PaymentOutcomeUnknown{OrderID: o.ID, Attempt: r.Attempt, Reason: r.Reason}}
	case OutcomeRequiresAction:
		a := o.attempt(r.Attempt)
		if a == nil || r.ChargeID == "" || (a.Outcome != OutcomeNone && a.Outcome != OutcomeUnknown) {
			return nil
		}
		if _, seen := o.Charges[r.ChargeID]; seen {
			return nil
		}
		e := PaymentActionRequired{OrderID: o.ID, Attempt: r.Attempt, PaymentID: r.ChargeID}
		if len(r.SealedAction) > 0 {
			e.Private = &ActionPrivate{SealedAction: r.SealedAction}
		}
		return []Event{e}
	}
	return nil
}

// PaymentsToCancel returns the payments (PaymentIntent ids) that wait for
// the customer's action while the order can no longer use them: it failed
// (the payment deadline passed), was cancelled or is in review. Each is to
// be cancelled at the provider under CancelKey until its final state is
// recorded (PaymentFailed once cancelled, or PaymentSucceeded for a late
// success, then refunded). A pending or cancelling order's payment is the
// payment driver's. Ordered by attempt.
func (o *Order) PaymentsToCancel() []string {
	if !o.Final() {
		return nil
	}
	var out []string
	for _, a := range o.Attempts {
		if a.Outcome == OutcomeRequiresAction && a.ChargeID != "" {
			out = append(out, a.ChargeID)
		}
	}
	return out
}

func (o *Order) recordSuccess(r PaymentResult, ticketIDs []string) []Event {
	if r.ChargeID == "" {
		return nil
	}
	if c, seen := o.Charges[r.ChargeID]; seen && c.Outcome == OutcomeSucceeded {
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
	refund := RefundRequested{OrderID: o.ID, ChargeID: r.ChargeID, Amount: amount, Key: RefundKey(r.ChargeID), Reason: RefundRedundantEffect}
	switch o.Status {
	case OrderStatusPending:
		if amount != o.Amount {
			return []Event{succeeded, OrderNeedsReview{OrderID: o.ID,
				Reason: fmt.Sprintf("charge %s is %d %s, the order is %d %s", r.ChargeID, amount.Amount, amount.Currency, o.Amount.Amount, o.Amount.Currency)}}
		}
		tickets := make([]Ticket, len(ticketIDs))
		for i, id := range ticketIDs {
			tickets[i] = Ticket{ID: id}
		}
		return []Event{succeeded, OrderConfirmed{OrderID: o.ID, Tickets: tickets}}
	case OrderStatusCancelling:
		refund.Reason = RefundCancelled
		return []Event{succeeded, refund, OrderCancelled{OrderID: o.ID}}
	default:
		return []Event{succeeded, refund}
	}
}

func (o *Order) recordFailure(r PaymentResult) []Event {
	if r.ChargeID != "" {
		if c, seen := o.Charges[r.ChargeID]; seen {
			if c.Outcome == OutcomeSucceeded && o.Status == OrderStatusConfirmed && r.ChargeID == o.ChargeID {
				return []Event{OrderNeedsReview{OrderID: o.ID, Reason: "the provider reports the paying charge " + r.ChargeID + " as failed"}}
			}
			return nil
		}
	}
	a := o.attempt(r.Attempt)
	if r.ChargeID == "" && (a == nil || a.Outcome == OutcomeFailed || a.Outcome == OutcomeSucceeded) {
		return nil
	}
	failed := PaymentFailed{OrderID: o.ID, Attempt: r.Attempt, ChargeID: r.ChargeID, Code: r.Code, Reason: r.Reason}
	last := o.LastAttempt()
	current := last != nil && last.N == r.Attempt && last.Outcome != OutcomeSucceeded
	switch {
	case current && o.Status == OrderStatusPending:
		reason := r.FailReason
		if reason == "" {
			reason = FailPaymentDeclined
		}
		return []Event{failed, OrderFailed{OrderID: o.ID, Reason: reason}}
	case current && o.Status == OrderStatusCancelling:
		return []Event{failed, OrderCancelled{OrderID: o.ID}}
	case r.ChargeID != "":
		return []Event{failed}
	}
	return nil
}

// RecordRefund folds the provider's refund of chargeID (refund refundID, in
// total amount) into the order: RefundSucceeded when the refund was
// requested and not yet recorded (also after a RefundRefused: money
// returned is a fact, whatever was said before), with the amount the
// provider refunded; followed by OrderNeedsReview when that is less than
// the amount requested (another refund came first, and the provider
// refused the rest: part of the charge stands), unless the order is in
// review already. OrderNeedsReview alone when the provider refunded the
// charge that paid a confirmed order without a request (tickets valid,
// money returned); no events otherwise.
func (o *Order) RecordRefund(chargeID, refundID string, amount Money) []Event {
	r, ok := o.Refunds[chargeID]
	switch {
	case ok && !r.Succeeded:
		evs := []Event{RefundSucceeded{OrderID: o.ID, ChargeID: chargeID, RefundID: refundID, Amount: amount}}
		if amount.Amount < r.Amount.Amount && o.Status != OrderStatusNeedsReview {
			evs = append(evs, OrderNeedsReview{OrderID: o.ID, Reason: fmt.Sprintf(
				"the provider refunded %d of the %d requested of charge %s (another refund, such as a partial one made in its dashboard, came first); the rest is still charged",
				amount.Amount, r.Amount.Amount, chargeID)})
		}
		return evs
	case !ok && o.Status == OrderStatusConfirmed && chargeID == o.ChargeID:
		return []Event{OrderNeedsReview{OrderID: o.ID, Reason: "the provider refunded the paying charge " + chargeID + " without a request"}}
	}
	return nil
}

// RefuseRefund folds the provider's definitive refusal of the refund of
// chargeID (code and reason as the provider gave them) into the order: the
// caller found that the provider does not know the charge. The order
// recorded that charge as made and the provider denies it, a contradiction
// no retry repairs, so it returns RefundRefused (the refund is not sent
// again) and OrderNeedsReview, unless the order is in review already. It
// returns no events when no refund of chargeID is pending (never
// requested, succeeded, or refused before).
func (o *Order) RefuseRefund(chargeID, code, reason string) []Event {
	r, ok := o.Refunds[chargeID]
	if !ok || r.Succeeded || r.Refused {
		return nil
	}
	evs := []Event{RefundRefused{OrderID: o.ID, ChargeID: chargeID, Code: code, Reason: reason}}
	if o.Status != OrderStatusNeedsReview {
		evs = append(evs, OrderNeedsReview{OrderID: o.ID,
			Reason: fmt.Sprintf("the provider does not know charge %s, whose refund was requested (%s)", chargeID, code)})
	}
	return evs
}

// Cancel decides a cancel requested by actor at now, before showStartsAt.
// A confirmed order is refunded and cancelled (tickets voided); a pending
// order without an attempt is cancelled at once; with a payment in flight
// or unknown it becomes cancelling: no new attempt or send starts, and it
// ends cancelled once the payment resolves (a charge refunded). A repeat
// returns no events, also once the accepted cancel's order went to review.
// Returns ErrOrderNotFound for another actor's order, ErrNotCancellable for
// a failed order or one in review without a cancel, ErrShowStarted once the
// show has started.
func (o *Order) Cancel(actor string, now, showStartsAt time.Time) ([]Event, error) {
	if !o.Exists() || o.Actor != actor {
		return nil, ErrOrderNotFound
	}
	if o.CancelAccepted {
		return nil, nil
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
	if o.Status == OrderStatusConfirmed {
		voided := make([]string, len(o.Tickets))
		for i, t := range o.Tickets {
			voided[i] = t.ID
		}
		evs := []Event{}
		if _, requested := o.Refunds[o.ChargeID]; !requested {
			evs = append(evs, RefundRequested{OrderID: o.ID, ChargeID: o.ChargeID, Amount: o.Charges[o.ChargeID].Amount,
				Key: RefundKey(o.ChargeID), Reason: RefundCancelled})
		}
		return append(evs, OrderCancelled{OrderID: o.ID, VoidedTickets: voided}), nil
	}
	if o.LastAttempt() != nil {
		return []Event{OrderCancelRequested{OrderID: o.ID, Actor: actor}}, nil
	}
	return []Event{OrderCancelled{OrderID: o.ID}}, nil
}

// FailPastDeadline decides the payment deadline at now: a pending order past
// its deadline whose payment is settled (see Settled) and uncharged fails
// (reason payment_deadline; seats released). uncharged is the caller's
// finding: the provider's list of the payments created in the last
// attempt's time range holds none of the attempt that succeeded
// (trivially true without an attempt), or the attempt's payment still
// waits for the customer's action: that one needs no settling, and is
// cancelled once the order failed (PaymentsToCancel).
func (o *Order) FailPastDeadline(now time.Time, settle time.Duration, uncharged bool) []Event {
	if o.Status != OrderStatusPending || now.Before(o.PaymentDeadline) || !uncharged {
		return nil
	}
	switch last := o.LastAttempt(); {
	case last == nil:
	case last.Outcome == OutcomeSucceeded || last.Outcome == OutcomeFailed:
		return nil
	case last.Outcome == OutcomeRequiresAction:
		// Its payment is known and no send of it can be in flight: no
		// settling to wait for.
	case !o.Settled(now, settle):
		return nil
	}
	return []Event{OrderFailed{OrderID: o.ID, Reason: FailPaymentDeadline}}
}

// FinishCancel decides a cancelling order whose payment is uncharged (as
// for FailPastDeadline) and either settled at now (see Settled) or unsent:
// the caller started the last attempt's lease itself and knows that no send
// of it ever began. It ends cancelled with nothing to refund.
func (o *Order) FinishCancel(now time.Time, settle time.Duration, uncharged, unsent bool) []Event {
	if o.Status != OrderStatusCancelling || !uncharged || (!unsent && !o.Settled(now, settle)) {
		return nil
	}
	return []Event{OrderCancelled{OrderID: o.ID}}
}
