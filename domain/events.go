package domain

import "time"

// Event is a domain fact. EventType returns its stable type name, which is
// stored with the event and never changes; a change of shape gets a new
// schema version (see SchemaVersion), never a new meaning for an old name.
type Event interface {
	EventType() string
}

// SchemaVersion is the schema version of the event types whose shape never
// changed (version 1). Each event's schema version (SchemaVersionOf) is
// written into its metadata; golden files in testdata/events pin the encoding
// of every version, and every version ever written still decodes.
const SchemaVersion = 1

// SchemaVersionOf returns the schema version written with e today:
//
//   - 3 for PaymentAttemptStarted, whose first start stores the attempt's
//     inputs (amount, currency, description, deployment; the payment
//     method is the order's sealed token) instead of request bytes:
//     version 1 held the bytes of a charge request in clear, version 2
//     sealed under the order's data key;
//   - 2 for OrderPlaced, whose private part holds the payment token only
//     sealed under the order's data key (version 1 held it in clear);
//   - 2 for IntentRecorded, which no longer has a private part: the payment
//     token is held sealed in the key table until the order carries it
//     (version 1 held it in clear);
//   - 2 for IntentRejected, which stores the rejection's Kind and Code
//     only (version 1 also stored the HTTP status it was answered with);
//   - SchemaVersion for every other type.
//
// Older versions decode into the same Go types: their fields
// (OrderPrivate.PaymentToken, AttemptPrivate.RequestBody and
// SealedRequestBody, IntentRecorded.Private, IntentRejected.Status) are
// read but never written again.
func SchemaVersionOf(e Event) int {
	switch e.(type) {
	case PaymentAttemptStarted:
		return 3
	case OrderPlaced, IntentRecorded, IntentRejected:
		return 2
	}
	return SchemaVersion
}

// Money is an amount in integer minor units (cents for EUR/USD) of an ISO 4217
// currency.
type Money struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// Times reports m multiplied by n (a seat count).
func (m Money) Times(n int) Money { return Money{Amount: m.Amount * int64(n), Currency: m.Currency} }

// ---- show-{showID} ----

// ShowScheduled is the first event of a show stream.
type ShowScheduled struct {
	ShowID   string    `json:"show_id"`
	Name     string    `json:"name"`
	StartsAt time.Time `json:"starts_at"`
	Capacity int       `json:"capacity"`
	Price    Money     `json:"price"`
}

// SeatsHeld is the commit point of a reservation: Quantity seats of the show
// are held for ReservationID until ExpiresAt unless ordered. Amount is the
// reservation's total price.
type SeatsHeld struct {
	ShowID        string    `json:"show_id"`
	ReservationID string    `json:"reservation_id"`
	Actor         string    `json:"actor"`
	Intent        string    `json:"intent"`
	Quantity      int       `json:"quantity"`
	Amount        Money     `json:"amount"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// SeatsReleased returns a reservation's seats to the show. Reason is one of
// ReleaseExpired, ReleasePaymentFailed, ReleaseCancelled.
type SeatsReleased struct {
	ShowID        string `json:"show_id"`
	ReservationID string `json:"reservation_id"`
	Quantity      int    `json:"quantity"`
	Reason        string `json:"reason"`
}

// Reasons for releasing seats.
const (
	ReleaseExpired       = "expired"
	ReleasePaymentFailed = "payment_failed"
	ReleaseCancelled     = "cancelled"
)

// ---- reservation-{reservationID} ----

// ReservationHeld opens a reservation stream; it follows from SeatsHeld.
type ReservationHeld struct {
	ReservationID string    `json:"reservation_id"`
	ShowID        string    `json:"show_id"`
	Actor         string    `json:"actor"`
	Quantity      int       `json:"quantity"`
	Amount        Money     `json:"amount"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// ReservationOrdered marks the reservation as taken by OrderID; it follows
// from the order claim.
type ReservationOrdered struct {
	ReservationID string `json:"reservation_id"`
	OrderID       string `json:"order_id"`
}

// ReservationExpired follows from the expiry claim.
type ReservationExpired struct {
	ReservationID string `json:"reservation_id"`
}

// ReservationReleased follows from a failed payment or a cancel of its order.
type ReservationReleased struct {
	ReservationID string `json:"reservation_id"`
	OrderID       string `json:"order_id"`
	Reason        string `json:"reason"`
}

// ---- reservation-order-{reservationID} (uniqueness stream) ----

// OrderClaimed is the commit point of an order: the first no-stream append to
// the reservation's uniqueness stream. It carries everything needed to place
// the order.
type OrderClaimed struct {
	ReservationID string `json:"reservation_id"`
	OrderID       string `json:"order_id"`
	ShowID        string `json:"show_id"`
	Actor         string `json:"actor"`
	Intent        string `json:"intent"`
	Quantity      int    `json:"quantity"`
	Amount        Money  `json:"amount"`
}

// ExpiryClaimed is the commit point of a reservation's expiry: the hold
// passed its expires_at (database clock) before any order claimed it.
type ExpiryClaimed struct {
	ReservationID string `json:"reservation_id"`
	ShowID        string `json:"show_id"`
	Quantity      int    `json:"quantity"`
}

// ---- order-{orderID} ----

// OrderPlaced opens an order stream; it follows from OrderClaimed.
// PaymentDeadline bounds how long payment attempts may go on. Private holds
// the payment token (sealed since schema version 2) and is never projected,
// published, logged or shown; it is absent when the token was not known.
type OrderPlaced struct {
	OrderID         string        `json:"order_id"`
	ReservationID   string        `json:"reservation_id"`
	ShowID          string        `json:"show_id"`
	Actor           string        `json:"actor"`
	Intent          string        `json:"intent"`
	Quantity        int           `json:"quantity"`
	Amount          Money         `json:"amount"`
	PaymentDeadline time.Time     `json:"payment_deadline"`
	Private         *OrderPrivate `json:"private,omitempty"`
}

// OrderPrivate is the secret part of OrderPlaced. Version 2 holds
// SealedPaymentToken: the token sealed (AES-256-GCM) under the order's data
// key, which lives outside the log and is deleted once the order can send no
// more, after which the bytes are unreadable. Version 1 held PaymentToken in
// clear; it is still decoded, never written.
type OrderPrivate struct {
	PaymentToken       string `json:"payment_token,omitempty"`
	SealedPaymentToken []byte `json:"sealed_payment_token,omitempty"`
}

// PaymentAttemptStarted starts (or, with the same Attempt, takes over) payment
// attempt Attempt (1-based) under the provider idempotency key ProviderKey.
// Owner holds the attempt's lease until LeaseUntil; the stream revision of
// this event is the lease's fencing token. StartedAt is when the attempt was
// first started (a takeover keeps it): the provider's idempotency window for
// ProviderKey, and the time range in which the attempt's payment was
// created, are measured from it.
//
// The first start of an attempt holds its inputs, so every send of the
// attempt carries identical parameters, even across deploys (Stripe
// compares a repeat's parameters with the first request's under one key,
// https://docs.stripe.com/api/idempotent_requests): Amount, Description,
// Deployment (sent as metadata[deployment]; empty in dev), OrderID and
// Attempt (metadata[order_id], metadata[attempt]); the payment method is
// the order's sealed token (OrderPlaced.Private). RequestSHA256 is the hex
// SHA-256 of those inputs, checked before every send. Versions 1 and 2
// held the bytes of a charge request instead (RequestSHA256 their digest),
// in clear (Private.RequestBody) or sealed under the order's data key
// (Private.SealedRequestBody); such attempts are read by parsing those
// bytes into the same inputs. Renewals and takeovers carry neither inputs
// nor Private: they keep the first start's.
type PaymentAttemptStarted struct {
	OrderID       string          `json:"order_id"`
	Attempt       int             `json:"attempt"`
	ProviderKey   string          `json:"provider_key"`
	Owner         string          `json:"owner"`
	LeaseUntil    time.Time       `json:"lease_until"`
	Amount        Money           `json:"amount"`
	StartedAt     time.Time       `json:"started_at"`
	RequestSHA256 string          `json:"request_sha256"`
	Description   string          `json:"description,omitempty"`
	Deployment    string          `json:"deployment,omitempty"`
	Private       *AttemptPrivate `json:"private,omitempty"`
}

// AttemptPrivate is the secret part of a PaymentAttemptStarted of schema
// version 1 or 2, still decoded and never written: version 2 held
// SealedRequestBody, the charge request's bytes sealed under the order's
// data key (see OrderPrivate); version 1 held RequestBody in clear.
type AttemptPrivate struct {
	RequestBody       string `json:"request_body,omitempty"`
	SealedRequestBody []byte `json:"sealed_request_body,omitempty"`
}

// ChargeID in the payment facts below names the provider's payment: a
// Stripe PaymentIntent id ("pi_…"). Events stored before the service took
// payments through PaymentIntents hold the id of a charge ("ch_…") there;
// the JSON name stays, as stored events never change.

// PaymentSucceeded records that the provider's payment ChargeID (a
// PaymentIntent id) of Attempt succeeded: the money moved.
type PaymentSucceeded struct {
	OrderID  string `json:"order_id"`
	Attempt  int    `json:"attempt"`
	ChargeID string `json:"charge_id"`
	Amount   Money  `json:"amount"`
}

// PaymentFailed records a definitive failure of Attempt: a decline (Code
// the provider's decline code, such as card_declined) or a refusal of the
// request that executed nothing (Reason ReasonProviderRefused, Code the
// provider's error code, such as resource_missing for an unknown token).
type PaymentFailed struct {
	OrderID  string `json:"order_id"`
	Attempt  int    `json:"attempt"`
	ChargeID string `json:"charge_id,omitempty"`
	Code     string `json:"code"`
	Reason   string `json:"reason"`
}

// ReasonProviderRefused is the PaymentFailed Reason of an attempt the
// provider refused as an invalid request (a 4xx invalid_request_error,
// Stripe's https://docs.stripe.com/api/errors), so nothing was charged; it
// is stored in events and never changes. CodeResourceMissing is the Code of
// such a refusal when the provider does not know the payment token.
const (
	ReasonProviderRefused = "the provider refused the payment request"
	CodeResourceMissing   = "resource_missing"
)

// PaymentOutcomeUnknown records that a send of Attempt ended without a
// definitive answer (timeout, 5xx — also one the provider replays for the
// key —, connection loss), or with a payment still processing at the
// provider; reconciliation follows.
type PaymentOutcomeUnknown struct {
	OrderID string `json:"order_id"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
}

// PaymentActionRequired records that the payment PaymentID (a PaymentIntent
// id) of Attempt needs the customer to authenticate (Strong Customer
// Authentication; status requires_action,
// https://docs.stripe.com/payments/paymentintents/lifecycle). The order
// stays pending: the customer's client finishes the payment with the
// client secret and next action, and the webhook, a fetch by the
// reconciler or the payment deadline (which cancels the PaymentIntent)
// settles it. Private holds both sealed under the order's data key, is
// shown only to the order's actor and is never projected, published or
// logged; it is absent when the key was gone.
type PaymentActionRequired struct {
	OrderID   string         `json:"order_id"`
	Attempt   int            `json:"attempt"`
	PaymentID string         `json:"payment_id"`
	Private   *ActionPrivate `json:"private,omitempty"`
}

// ActionPrivate is the secret part of PaymentActionRequired: SealedAction
// is the JSON object {"client_secret", "next_action"} sealed (AES-256-GCM)
// under the order's data key; once the key is deleted it is unreadable.
type ActionPrivate struct {
	SealedAction []byte `json:"sealed_action"`
}

// Ticket is one admission issued for a confirmed order.
type Ticket struct {
	ID string `json:"id"`
}

// OrderConfirmed follows a successful payment; the tickets become valid.
type OrderConfirmed struct {
	OrderID string   `json:"order_id"`
	Tickets []Ticket `json:"tickets"`
}

// OrderFailed ends an order without tickets; its seats are released.
// Reason is one of FailPaymentDeclined, FailPaymentDeadline, FailNoAttempt.
type OrderFailed struct {
	OrderID string `json:"order_id"`
	Reason  string `json:"reason"`
}

// Reasons for failing an order.
const (
	FailPaymentDeclined = "payment_declined"
	FailPaymentDeadline = "payment_deadline"
	FailNoAttempt       = "no_new_attempt_possible"
)

// OrderCancelRequested accepts a cancel while a payment is in flight or
// unknown: the order is cancelling and no new attempt starts.
type OrderCancelRequested struct {
	OrderID string `json:"order_id"`
	Actor   string `json:"actor"`
}

// OrderCancelled ends an order cancelled; its tickets, if any, are void.
type OrderCancelled struct {
	OrderID       string   `json:"order_id"`
	VoidedTickets []string `json:"voided_tickets,omitempty"`
}

// RefundRequested is recorded before a refund call with provider
// idempotency key Key ("refund-{chargeID}"; ChargeID the PaymentIntent to
// refund). Reason is "cancelled" or "redundant_effect".
type RefundRequested struct {
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
	Amount   Money  `json:"amount"`
	Key      string `json:"key"`
	Reason   string `json:"reason"`
}

// RefundSucceeded records the provider's refund of ChargeID.
type RefundSucceeded struct {
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
	RefundID string `json:"refund_id"`
	Amount   Money  `json:"amount"`
}

// RefundRefused records the provider's definitive refusal of the refund of
// ChargeID: it does not know the charge (Code is the provider's error code,
// "resource_missing"; Reason its message). The refund is not sent again; the
// order needs review, since it recorded money the provider denies.
type RefundRefused struct {
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
	Code     string `json:"code"`
	Reason   string `json:"reason"`
}

// OrderNeedsReview parks an order whose facts contradict each other beyond
// automatic repair; terminal until an operator acts.
type OrderNeedsReview struct {
	OrderID string `json:"order_id"`
	Reason  string `json:"reason"`
}

// PaymentSecretsShredded records that the order's data key was deleted
// (crypto-shredding) at ShreddedAt (the database clock): the payment token
// and the provider request bytes sealed under it in this stream cannot be
// read from then on. It is appended only after the key is gone, and once
// per order (its id derives from the order).
type PaymentSecretsShredded struct {
	OrderID    string    `json:"order_id"`
	ShreddedAt time.Time `json:"shredded_at"`
}

// ---- intent-{hash} ----

// IntentRecorded opens an intent stream: the first request with an
// idempotency key. Fingerprint is the hex SHA-256 of the canonical form
// (version CanonicalVersion) of Command, the normalized command. TargetID is
// the resource the intent creates. Executor holds the intent's lease until
// LeaseUntil. Private held the command's secrets (the payment token) in
// clear in schema version 1; it is still decoded, never written: since
// version 2 an order's token is held sealed in the key table, outside every
// intent stream.
type IntentRecorded struct {
	Actor            string         `json:"actor"`
	Operation        string         `json:"operation"`
	KeySHA256        string         `json:"key_sha256"`
	Fingerprint      string         `json:"fingerprint"`
	CanonicalVersion int            `json:"canonical_version"`
	Command          map[string]any `json:"command"`
	TargetID         string         `json:"target_id"`
	Executor         string         `json:"executor"`
	LeaseUntil       time.Time      `json:"lease_until"`
	Private          map[string]any `json:"private,omitempty"`
}

// IntentResumed records that Executor took over an intent whose previous
// executor's lease expired; the stream revision is the fencing token.
type IntentResumed struct {
	Executor   string    `json:"executor"`
	LeaseUntil time.Time `json:"lease_until"`
}

// IntentRejected records a definitive refusal of the intent as a domain
// outcome, so every repeat answers the same Kind and Code (Kind by its
// String name). ResourceID names a resource the answer may show (the
// caller's existing order, for example).
//
// Version 2 stores no HTTP status: the adapter maps Kind to a status. Status
// is read only from version 1 events, which stored the HTTP status fixed
// when they were recorded; a repeat of such an intent answers that status.
type IntentRejected struct {
	Status     int    `json:"status,omitempty"`
	Kind       string `json:"kind"`
	Code       string `json:"code"`
	Detail     string `json:"detail"`
	ResourceID string `json:"resource_id,omitempty"`
}

// EventType returns "ShowScheduled", the stable type name.
func (ShowScheduled) EventType() string { return TypeShowScheduled }

// EventType returns "SeatsHeld", the stable type name.
func (SeatsHeld) EventType() string { return TypeSeatsHeld }

// EventType returns "SeatsReleased", the stable type name.
func (SeatsReleased) EventType() string { return TypeSeatsReleased }

// EventType returns "ReservationHeld", the stable type name.
func (ReservationHeld) EventType() string { return TypeReservationHeld }

// EventType returns "ReservationOrdered", the stable type name.
func (ReservationOrdered) EventType() string { return TypeReservationOrdered }

// EventType returns "ReservationExpired", the stable type name.
func (ReservationExpired) EventType() string { return TypeReservationExpired }

// EventType returns "ReservationReleased", the stable type name.
func (ReservationReleased) EventType() string { return TypeReservationReleased }

// EventType returns "OrderClaimed", the stable type name.
func (OrderClaimed) EventType() string { return TypeOrderClaimed }

// EventType returns "ExpiryClaimed", the stable type name.
func (ExpiryClaimed) EventType() string { return TypeExpiryClaimed }

// EventType returns "OrderPlaced", the stable type name.
func (OrderPlaced) EventType() string { return TypeOrderPlaced }

// EventType returns "PaymentAttemptStarted", the stable type name.
func (PaymentAttemptStarted) EventType() string { return TypePaymentAttemptStarted }

// EventType returns "PaymentSucceeded", the stable type name.
func (PaymentSucceeded) EventType() string { return TypePaymentSucceeded }

// EventType returns "PaymentFailed", the stable type name.
func (PaymentFailed) EventType() string { return TypePaymentFailed }

// EventType returns "PaymentOutcomeUnknown", the stable type name.
func (PaymentOutcomeUnknown) EventType() string { return TypePaymentOutcomeUnknown }

// EventType returns "PaymentActionRequired", the stable type name.
func (PaymentActionRequired) EventType() string { return TypePaymentActionRequired }

// EventType returns "OrderConfirmed", the stable type name.
func (OrderConfirmed) EventType() string { return TypeOrderConfirmed }

// EventType returns "OrderFailed", the stable type name.
func (OrderFailed) EventType() string { return TypeOrderFailed }

// EventType returns "OrderCancelRequested", the stable type name.
func (OrderCancelRequested) EventType() string { return TypeOrderCancelRequested }

// EventType returns "OrderCancelled", the stable type name.
func (OrderCancelled) EventType() string { return TypeOrderCancelled }

// EventType returns "RefundRequested", the stable type name.
func (RefundRequested) EventType() string { return TypeRefundRequested }

// EventType returns "RefundSucceeded", the stable type name.
func (RefundSucceeded) EventType() string { return TypeRefundSucceeded }

// EventType returns "RefundRefused", the stable type name.
func (RefundRefused) EventType() string { return TypeRefundRefused }

// EventType returns "OrderNeedsReview", the stable type name.
func (OrderNeedsReview) EventType() string { return TypeOrderNeedsReview }

// EventType returns "PaymentSecretsShredded", the stable type name.
func (PaymentSecretsShredded) EventType() string { return TypePaymentSecretsShredded }

// EventType returns "IntentRecorded", the stable type name.
func (IntentRecorded) EventType() string { return TypeIntentRecorded }

// EventType returns "IntentResumed", the stable type name.
func (IntentResumed) EventType() string { return TypeIntentResumed }

// EventType returns "IntentRejected", the stable type name.
func (IntentRejected) EventType() string { return TypeIntentRejected }

// EventTypes returns a zero value of every event type, keyed by type name:
// the registry from which the eventstore codec is built (wired in run, no
// init-time registration).
func EventTypes() []Event {
	return []Event{
		ShowScheduled{}, SeatsHeld{}, SeatsReleased{},
		ReservationHeld{}, ReservationOrdered{}, ReservationExpired{}, ReservationReleased{},
		OrderClaimed{}, ExpiryClaimed{},
		OrderPlaced{}, PaymentAttemptStarted{}, PaymentSucceeded{}, PaymentFailed{}, PaymentOutcomeUnknown{},
		PaymentActionRequired{}, OrderConfirmed{}, OrderFailed{}, OrderCancelRequested{}, OrderCancelled{},
		RefundRequested{}, RefundSucceeded{}, RefundRefused{}, OrderNeedsReview{},
		PaymentSecretsShredded{},
		IntentRecorded{}, IntentResumed{}, IntentRejected{},
	}
}
