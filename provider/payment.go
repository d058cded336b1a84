package provider

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PaymentStatus is the status of a payment: a Stripe PaymentIntent's status
// (https://docs.stripe.com/payments/paymentintents/lifecycle).
type PaymentStatus string

// The statuses of a PaymentIntent (https://docs.stripe.com/api/payment_intents/object#payment_intent_object-status).
const (
	// PaymentRequiresPaymentMethod: no usable payment method; after a
	// confirmation it means the payment was declined (LastError says why).
	PaymentRequiresPaymentMethod PaymentStatus = "requires_payment_method"
	// PaymentRequiresConfirmation: created without confirm=true.
	PaymentRequiresConfirmation PaymentStatus = "requires_confirmation"
	// PaymentRequiresAction: the customer must authenticate (Strong Customer
	// Authentication); NextAction and ClientSecret say how.
	PaymentRequiresAction PaymentStatus = "requires_action"
	// PaymentProcessing: the provider is still processing it.
	PaymentProcessing PaymentStatus = "processing"
	// PaymentRequiresCapture: authorized, not captured (never used here).
	PaymentRequiresCapture PaymentStatus = "requires_capture"
	// PaymentCanceled: canceled; no money moved.
	PaymentCanceled PaymentStatus = "canceled"
	// PaymentSucceeded: captured; the money moved.
	PaymentSucceeded PaymentStatus = "succeeded"
)

// Final reports whether s can no longer change by itself or by the
// customer: succeeded or canceled. A requires_payment_method after a
// confirmation is final for the attempt too (see Payment.Declined).
func (s PaymentStatus) Final() bool { return s == PaymentSucceeded || s == PaymentCanceled }

// PaymentRequest holds the inputs of one payment attempt. An attempt stores
// them (sealed where secret) so that every send of the attempt carries
// identical parameters: Stripe compares a repeat's parameters with the
// first request's under the same Idempotency-Key
// (https://docs.stripe.com/api/idempotent_requests).
//
// PaymentMethod is a secret: String and GoString redact it.
type PaymentRequest struct {
	Amount        int64  // minor units of Currency, > 0
	Currency      string // ISO 4217 code, any case (Stripe takes lower case)
	PaymentMethod string // a PaymentMethod id (pm_…) or a test alias (tok_…); secret
	OrderID       string // sent as metadata[order_id]
	Attempt       int    // 1-based; sent as metadata[attempt]
	Deployment    string // sent as metadata[deployment] when not empty
	Description   string // optional
}

// Metadata returns the metadata a payment of r carries: MetadataOrderID,
// MetadataAttempt and, when r.Deployment is set, MetadataDeployment. A
// webhook receiver ignores payments whose metadata names another
// deployment (one Stripe account can serve several).
func (r PaymentRequest) Metadata() map[string]string {
	m := map[string]string{MetadataOrderID: r.OrderID, MetadataAttempt: strconv.Itoa(r.Attempt)}
	if r.Deployment != "" {
		m[MetadataDeployment] = r.Deployment
	}
	return m
}

// Metadata keys the booking service sets on every payment
// (https://docs.stripe.com/api/metadata): the order and the 1-based attempt,
// by which reconciliation recognizes an attempt's payment in a list, and
// the deployment that made it (its idempotency-key prefix; absent in dev).
const (
	MetadataOrderID    = "order_id"
	MetadataAttempt    = "attempt" // decimal, 1-based
	MetadataDeployment = "deployment"
)

// Validate reports whether r can be sent: a positive amount, a three-letter
// currency, a payment method, an order id and a positive attempt. It
// returns an error wrapping ErrInvalidRequest otherwise; the error never
// contains the payment method.
func (r PaymentRequest) Validate() error {
	switch {
	case r.Amount <= 0:
		return fmt.Errorf("%w: amount must be a positive integer in minor units", ErrInvalidRequest)
	case len(r.Currency) != 3:
		return fmt.Errorf("%w: currency must be a three-letter ISO 4217 code", ErrInvalidRequest)
	case r.PaymentMethod == "":
		return fmt.Errorf("%w: payment method is required", ErrInvalidRequest)
	case r.OrderID == "":
		return fmt.Errorf("%w: order id is required", ErrInvalidRequest)
	case r.Attempt <= 0:
		return fmt.Errorf("%w: attempt must be positive", ErrInvalidRequest)
	}
	return nil
}

// String returns a description of r without its payment method.
func (r PaymentRequest) String() string {
	return fmt.Sprintf("PaymentRequest{Amount:%d Currency:%s PaymentMethod:[redacted] OrderID:%s Attempt:%d}",
		r.Amount, r.Currency, r.OrderID, r.Attempt)
}

// GoString returns the same as String, so %#v never shows the payment method.
func (r PaymentRequest) GoString() string { return r.String() }

// Payment is the provider's view of one payment: a Stripe PaymentIntent
// (https://docs.stripe.com/api/payment_intents/object). One attempt of an
// order creates at most one Payment.
//
// ClientSecret and NextAction are secrets: String and GoString redact them.
type Payment struct {
	ID       string            // "pi_…"
	Amount   int64             // minor units
	Currency string            // ISO 4217, upper case
	Status   PaymentStatus     //
	Metadata map[string]string // MetadataOrderID, MetadataAttempt
	Created  time.Time         // provider clock, whole seconds
	// AmountRefunded is the minor units refunded of the payment's charge.
	AmountRefunded int64
	// LastError is the last payment error (a decline), or nil.
	LastError *PaymentError
	// ClientSecret lets the customer's client finish a requires_action
	// payment (secret).
	ClientSecret string
	// NextAction is the PaymentIntent's next_action as raw JSON, or nil
	// (secret: it can hold authentication URLs).
	NextAction []byte
	// Replayed reports that the answer was a replay of an earlier request
	// with the same idempotency key (header Idempotent-Replayed: true).
	Replayed bool
}

// PaymentError is a payment's last_payment_error, or the error of a
// declined request (https://docs.stripe.com/api/errors).
type PaymentError struct {
	Type        string // e.g. TypeCardError
	Code        string // e.g. CodeCardDeclined
	DeclineCode string // e.g. "generic_decline", "insufficient_funds"
	Message     string // human-readable; never contains a secret
}

// OrderID returns the payment's metadata order id, or "".
func (p Payment) OrderID() string { return p.Metadata[MetadataOrderID] }

// Attempt returns the payment's 1-based attempt number from its metadata,
// or 0 if it has none.
func (p Payment) Attempt() int {
	n, err := strconv.Atoi(p.Metadata[MetadataAttempt])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Declined reports whether the payment was confirmed and declined: it
// needs a payment method again and carries a last payment error.
func (p Payment) Declined() bool {
	return p.Status == PaymentRequiresPaymentMethod && p.LastError != nil
}

// String returns a description of p without its client secret and next
// action.
func (p Payment) String() string {
	return fmt.Sprintf("Payment{ID:%s Amount:%d Currency:%s Status:%s Metadata:%v}", p.ID, p.Amount, p.Currency, p.Status, p.Metadata)
}

// GoString returns the same as String.
func (p Payment) GoString() string { return p.String() }

// PaymentRefundRequest is one refund of a payment (https://docs.stripe.com/api/refunds/create).
type PaymentRefundRequest struct {
	PaymentID string            // the PaymentIntent to refund
	Amount    int64             // minor units; 0 refunds what remains
	Metadata  map[string]string // optional
}

// PaymentRefund is a refund object (https://docs.stripe.com/api/refunds/object).
type PaymentRefund struct {
	ID        string            // "re_…"
	PaymentID string            // the refunded PaymentIntent
	Amount    int64             // minor units
	Currency  string            // ISO 4217, upper case
	Status    string            // "succeeded", "pending", "failed" or "canceled"
	Metadata  map[string]string //
	Created   time.Time         // provider clock
	Replayed  bool              // as in Payment
}

// Webhook event types the service acts on (https://docs.stripe.com/api/events/types);
// EventChargeRefunded's object is a charge, PaymentID its payment_intent.
const (
	EventChargeRefunded              = "charge.refunded"
	EventPaymentIntentSucceeded      = "payment_intent.succeeded"
	EventPaymentIntentPaymentFailed  = "payment_intent.payment_failed"
	EventPaymentIntentRequiresAction = "payment_intent.requires_action"
	EventPaymentIntentCanceled       = "payment_intent.canceled"
	EventPaymentIntentProcessing     = "payment_intent.processing"
)

// WebhookEvent is a verified webhook notification
// (https://docs.stripe.com/api/events/object). Its object may be stale,
// duplicated or reordered: a receiver dedupes by ID and fetches the
// payment's current state.
type WebhookEvent struct {
	ID         string            // "evt_…"; the same for every delivery
	Type       string            // e.g. EventPaymentIntentSucceeded
	Created    time.Time         // provider clock
	APIVersion string            // the API version the event was rendered in
	PaymentID  string            // the PaymentIntent the event is about, or "" (another kind of object)
	Metadata   map[string]string // the object's metadata (for charge.* events, empty)
}

// OrderID returns the event's metadata order id, or "".
func (e WebhookEvent) OrderID() string { return e.Metadata[MetadataOrderID] }

// IsPaymentEvent reports whether the event is about a PaymentIntent or
// its charge.
func (e WebhookEvent) IsPaymentEvent() bool {
	return e.PaymentID != "" && (strings.HasPrefix(e.Type, "payment_intent.") || strings.HasPrefix(e.Type, "charge."))
}

// Error codes of Stripe's API beyond those of the charges API
// (https://docs.stripe.com/error-codes).
const (
	// CodePaymentIntentUnexpectedState: the PaymentIntent's status does not
	// allow the operation (for example cancelling a succeeded one).
	CodePaymentIntentUnexpectedState = "payment_intent_unexpected_state"
	// CodeParameterUnknown: a parameter Stripe does not know.
	CodeParameterUnknown = "parameter_unknown"
)
