package provider

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Sentinel errors. Every error an adapter returns that has one of these
// meanings wraps it; check with errors.Is. The package doc says which of them
// may have charged.
var (
	// ErrDeclined is a definitive decline (402 card_error): the payment
	// failed and no money moved. The *APIError in the chain carries the
	// declined payment. Retrying with the same key replays the decline.
	ErrDeclined = errors.New("provider: payment declined")

	// ErrKeyInUse is a 409 idempotency_key_in_use: another request with the
	// same key is still executing (Stripe, https://docs.stripe.com/error-low-level#idempotency).
	// The outcome is pending, not failed: wait and repeat, or reconcile.
	ErrKeyInUse = errors.New("provider: idempotency key in use")

	// ErrIdempotency is a 400 idempotency_error: the key was used before with
	// different parameters. It is a bug or a misconfiguration to alert on,
	// never a decline; the earlier request's outcome is unchanged.
	ErrIdempotency = errors.New("provider: idempotency key reused with different parameters")

	// ErrOutcomeUnknown means the request was sent and may have been
	// executed: a timeout, a lost connection, an unreadable answer or a 5xx to
	// a POST (a 500 the provider replays for the key too). The cause is
	// wrapped as well. Resolve it by listing the payments created meanwhile,
	// or by repeating the same request with the same key.
	ErrOutcomeUnknown = errors.New("provider: outcome unknown")

	// ErrUnavailable means the provider could not be used and nothing was
	// executed: the request was never sent (connection refused, DNS failure,
	// context done before sending), a 429, or a 5xx to a GET.
	ErrUnavailable = errors.New("provider: unavailable")

	// ErrInvalidRequest is a 4xx invalid_request_error (other than 404), or a
	// request refused before sending. Nothing was executed.
	ErrInvalidRequest = errors.New("provider: invalid request")

	// ErrNotFound is a 404: the payment or refund does not exist.
	ErrNotFound = errors.New("provider: not found")

	// ErrUnauthorized is a 401 or 403: the provider refused the API key
	// (missing, wrong or without permission). Nothing was executed. Errors
	// that wrap it also wrap ErrUnavailable: it is a configuration fault to
	// alert on and retry after, never a decline.
	ErrUnauthorized = errors.New("provider: API key refused")

	// ErrBadSignature means a webhook's signature header (Stripe-Signature)
	// is missing, malformed, or matches no expected signature of the body.
	ErrBadSignature = errors.New("provider: bad webhook signature")

	// ErrStaleTimestamp means a webhook's signature is valid but its timestamp
	// is outside the tolerance, so it may be a replay; from a check of the
	// header alone (before the body is read), that the header is well formed
	// but signed outside the tolerance.
	ErrStaleTimestamp = errors.New("provider: webhook timestamp outside tolerance")

	// ErrMalformedEvent means a webhook body is not a well-formed event.
	ErrMalformedEvent = errors.New("provider: malformed event")
)

// Error types of the provider API (Stripe, https://docs.stripe.com/api/errors#errors-type).
const (
	TypeCardError           = "card_error"             // a decline (402)
	TypeIdempotencyError    = "idempotency_error"      // key reused with other parameters (400)
	TypeIdempotencyKeyInUse = "idempotency_key_in_use" // a request with the key is executing (409)
	TypeInvalidRequestError = "invalid_request_error"  // the request is invalid (400, 404)
	TypeAPIError            = "api_error"              // the provider failed (5xx)
	TypeRateLimitError      = "rate_limit_error"       // too many requests (429)
)

// Error codes of the provider API (Stripe, https://docs.stripe.com/error-codes).
const (
	CodeCardDeclined          = "card_declined"           // the payment was declined
	CodeResourceMissing       = "resource_missing"        // no such payment, refund or payment method
	CodeChargeAlreadyRefunded = "charge_already_refunded" // nothing is left to refund
	CodeAmountTooLarge        = "amount_too_large"        // the refund exceeds what is left
	CodeChargeNotRefundable   = "charge_not_refundable"   // the charge did not succeed
)

// APIError is an error answer from the provider. It wraps the sentinel that
// classifies it (ErrDeclined, ErrKeyInUse, ErrIdempotency, ErrOutcomeUnknown,
// ErrUnavailable, ErrNotFound, ErrInvalidRequest, or ErrUnauthorized together
// with ErrUnavailable), so errors.Is works on it, and errors.As retrieves the
// details.
type APIError struct {
	Method, Path string // the request, e.g. "POST", "/v1/payment_intents"
	StatusCode   int    // HTTP status
	Type         string // e.g. TypeCardError
	Code         string // e.g. CodeCardDeclined
	DeclineCode  string // for declines, e.g. "generic_decline"
	Message      string // human-readable; never contains a payment method or secret
	Param        string // the offending parameter, if any
	RequestID    string // the provider's Request-Id header
	Replayed     bool   // the answer was an idempotent replay

	// Payment is the PaymentIntent of a decline (ErrDeclined): status
	// requires_payment_method with LastError set, as Stripe returns it in
	// the error's payment_intent (https://docs.stripe.com/api/errors#errors-payment_intent);
	// nil otherwise. Its ClientSecret and NextAction are secrets.
	Payment *Payment

	kind error
}

// Error returns a one-line description: method, path, status, type, code and
// message.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider: %s %s: %d", e.Method, e.Path, e.StatusCode)
	if e.Type != "" {
		b.WriteString(" " + e.Type)
	}
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Unwrap returns the sentinel that classifies e.
func (e *APIError) Unwrap() error { return e.kind }

// NewAPIError returns a copy of e classified by its Method, StatusCode and
// Type, for adapters of a provider's API: 401 or 403 ErrUnauthorized (and
// ErrUnavailable), 402 or card_error ErrDeclined, 409 ErrKeyInUse,
// idempotency_error ErrIdempotency, 429 ErrUnavailable, 5xx to a POST
// ErrOutcomeUnknown (a saved and replayed 500 too: the request may have
// executed), 5xx to another method ErrUnavailable, 404 ErrNotFound, any
// other status ErrInvalidRequest. These are Stripe's rules
// (https://docs.stripe.com/api/errors, https://docs.stripe.com/api/idempotent_requests).
// e.Message must hold no secret: it is part of Error.
func NewAPIError(e APIError) *APIError {
	e.kind = classify(e.Method, e.StatusCode, e.Type)
	return &e
}

// errUnauthorized is the classification of a refused API key: both
// ErrUnauthorized and ErrUnavailable.
var errUnauthorized = fmt.Errorf("%w: %w", ErrUnauthorized, ErrUnavailable)

// classify returns the sentinel for an error answer to method.
func classify(method string, status int, typ string) error {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return errUnauthorized
	case status == http.StatusPaymentRequired || typ == TypeCardError:
		return ErrDeclined
	case status == http.StatusConflict || typ == TypeIdempotencyKeyInUse:
		return ErrKeyInUse
	case typ == TypeIdempotencyError:
		return ErrIdempotency
	case status == http.StatusTooManyRequests:
		return ErrUnavailable
	case status >= 500 && method == http.MethodPost:
		return ErrOutcomeUnknown
	case status >= 500:
		return ErrUnavailable
	case status == http.StatusNotFound:
		return ErrNotFound
	default:
		return ErrInvalidRequest
	}
}
