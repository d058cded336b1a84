package providersim

import (
	"maps"
	"strings"
	"time"

	"github.com/retrysafe/booking/provider"
)

// APIVersion is the Stripe API version the simulator renders its objects
// and events in: the version stripe-go v84 pins (stripe.APIVersion), which
// its webhook.ConstructEvent requires of an event
// (https://docs.stripe.com/api/versioning).
const APIVersion = "2026-02-25.clover"

// PaymentIntent is Stripe's PaymentIntent object
// (https://docs.stripe.com/api/payment_intents/object), the members the
// simulator fills. Amounts are in minor units; Currency is lower case, as
// Stripe answers; Created is Unix seconds on the simulator's base (real)
// clock. Nullable members are pointers (JSON null when nil).
type PaymentIntent struct {
	ID                      string                   `json:"id"`     // "pi_…"
	Object                  string                   `json:"object"` // "payment_intent"
	Amount                  int64                    `json:"amount"`
	AmountCapturable        int64                    `json:"amount_capturable"`
	AmountReceived          int64                    `json:"amount_received"`
	AutomaticPaymentMethods *AutomaticPaymentMethods `json:"automatic_payment_methods"`
	CanceledAt              *int64                   `json:"canceled_at"`
	CancellationReason      *string                  `json:"cancellation_reason"`
	CaptureMethod           string                   `json:"capture_method"` // "automatic"
	ClientSecret            string                   `json:"client_secret"`  // "pi_…_secret_…"
	ConfirmationMethod      string                   `json:"confirmation_method"`
	Created                 int64                    `json:"created"`
	Currency                string                   `json:"currency"`
	Description             *string                  `json:"description"`
	LastPaymentError        *ErrorObject             `json:"last_payment_error"`
	// LatestCharge is nil, the charge's id (a string), or the *Charge
	// when the request expanded latest_charge.
	LatestCharge       any               `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         *NextAction       `json:"next_action"`
	PaymentMethod      *string           `json:"payment_method"` // "pm_…"
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"` // provider.PaymentStatus values
}

// AutomaticPaymentMethods is a PaymentIntent's automatic_payment_methods.
type AutomaticPaymentMethods struct {
	Enabled        bool   `json:"enabled"`
	AllowRedirects string `json:"allow_redirects,omitempty"` // "always" or "never"
}

// NextAction is a PaymentIntent's next_action while it requires action.
// The simulator answers type "use_stripe_sdk", as Stripe does for a card
// that needs 3-D Secure (https://docs.stripe.com/payments/3d-secure).
type NextAction struct {
	Type         string            `json:"type"`
	UseStripeSDK map[string]string `json:"use_stripe_sdk,omitempty"`
}

// Charge is Stripe's Charge object (https://docs.stripe.com/api/charges/object)
// as the simulator fills it: the charge a confirmed PaymentIntent made.
// Status is "succeeded" or "failed".
type Charge struct {
	ID             string            `json:"id"`     // "ch_…"
	Object         string            `json:"object"` // "charge"
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Description    *string           `json:"description"`
	FailureCode    *string           `json:"failure_code"`
	FailureMessage *string           `json:"failure_message"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  string            `json:"payment_intent"`
	PaymentMethod  *string           `json:"payment_method"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
}

// Refund is Stripe's Refund object (https://docs.stripe.com/api/refunds/object);
// Status is always "succeeded" here.
type Refund struct {
	ID            string            `json:"id"`     // "re_…"
	Object        string            `json:"object"` // "refund"
	Amount        int64             `json:"amount"`
	Charge        string            `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
}

// ErrorObject is Stripe's error object (https://docs.stripe.com/api/errors):
// the "error" member of an error answer and a PaymentIntent's
// last_payment_error. Empty members are omitted.
type ErrorObject struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	Message       string         `json:"message,omitempty"`
	Param         string         `json:"param,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent *PaymentIntent `json:"payment_intent,omitempty"`
	PaymentMethod *PaymentMethod `json:"payment_method,omitempty"`
}

// PaymentMethod is the part of Stripe's PaymentMethod object the
// simulator shows (in a decline's error): its id and type.
type PaymentMethod struct {
	ID     string `json:"id"`     // "pm_…"
	Object string `json:"object"` // "payment_method"
	Type   string `json:"type"`   // "card"
}

// SimCharge is an entry of GET /_sim/charges: one per PaymentIntent, in
// creation order. Status is the PaymentIntent's ("succeeded" once the
// money moved); Currency is upper case (ISO 4217); RefundedAmount is what
// the refunds of its charge returned, in minor units; IdempotencyKey is
// the key of the request that created it ("" without one).
type SimCharge struct {
	ID             string                 `json:"id"`
	IdempotencyKey string                 `json:"idempotency_key"`
	Amount         int64                  `json:"amount"`
	Currency       string                 `json:"currency"`
	Status         provider.PaymentStatus `json:"status"`
	RefundedAmount int64                  `json:"refunded_amount"`
	Metadata       map[string]string      `json:"metadata"`
}

// intent is a PaymentIntent with what only the simulator knows of it.
//
// Objects held by the Server are replaced, never changed in place: an
// update stores a modified copy. Nested values (maps, slices, pointers)
// are shared between copies and never written after creation, so a
// shallow copy is a snapshot.
type intent struct {
	pi        *PaymentIntent
	key       string    // the Idempotency-Key that created it
	createdAt time.Time // base clock, full precision: the search lag counts from it
}

// clonePI returns a copy of pi whose metadata map the caller may change.
func clonePI(pi *PaymentIntent) PaymentIntent {
	out := *pi
	out.Metadata = maps.Clone(pi.Metadata)
	return out
}

func cloneCharge(ch *Charge) Charge {
	out := *ch
	out.Metadata = maps.Clone(ch.Metadata)
	return out
}

func cloneRefund(re *Refund) Refund {
	out := *re
	out.Metadata = maps.Clone(re.Metadata)
	return out
}

// simChargeLocked returns the /_sim/charges view of it.
func (s *Server) simChargeLocked(it *intent) SimCharge {
	pi := it.pi
	var refunded int64
	if id, ok := pi.LatestCharge.(string); ok {
		if ch := s.chargeByID[id]; ch != nil {
			refunded = ch.AmountRefunded
		}
	}
	return SimCharge{
		ID:             pi.ID,
		IdempotencyKey: it.key,
		Amount:         pi.Amount,
		Currency:       strings.ToUpper(pi.Currency),
		Status:         provider.PaymentStatus(pi.Status),
		RefundedAmount: refunded,
		Metadata:       maps.Clone(pi.Metadata),
	}
}

func strPtr(s string) *string { return &s }

func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
