package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Metadata keys the booking service sets on every charge, so that a charge can
// be found by search after its idempotency key has expired (Stripe,
// https://docs.stripe.com/api/metadata).
const (
	MetadataOrderID = "order_id"
	MetadataAttempt = "attempt" // decimal, 1-based
)

// Status is the state of a charge.
type Status string

// The statuses of a charge (Stripe, https://docs.stripe.com/api/charges/object#charge_object-status).
const (
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
)

// ChargeRequest is the body of POST /v1/charges. Its encoding (Body) is
// deterministic, so the exact bytes of an attempt can be stored and every
// retry of the attempt sent byte-identical, even by another build.
//
// Token is a secret: String and GoString redact it, so a ChargeRequest can be
// formatted into logs and errors safely.
type ChargeRequest struct {
	Amount      int64             `json:"amount"`   // minor units of Currency, > 0
	Currency    string            `json:"currency"` // ISO 4217 code
	Token       string            `json:"token"`    // payment token (secret)
	Metadata    map[string]string `json:"metadata"` // at least order_id and attempt
	Description string            `json:"description,omitempty"`
}

// NewChargeRequest returns a ChargeRequest with the order id and the 1-based
// attempt number in its metadata (MetadataOrderID, MetadataAttempt).
func NewChargeRequest(amount int64, currency, token, orderID string, attempt int) ChargeRequest {
	return ChargeRequest{
		Amount:   amount,
		Currency: currency,
		Token:    token,
		Metadata: map[string]string{
			MetadataOrderID: orderID,
			MetadataAttempt: strconv.Itoa(attempt),
		},
	}
}

// Body returns the request's canonical JSON encoding: fields in the order
// amount, currency, token, metadata, description (omitted when empty);
// metadata keys sorted; no insignificant whitespace; no HTML escaping; no
// trailing newline. Equal requests always give equal bytes; testdata pins the
// encoding. A nil Metadata encodes as {}.
func (r ChargeRequest) Body() []byte {
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	return encode(r)
}

// String returns a description of r without its token.
func (r ChargeRequest) String() string {
	return fmt.Sprintf("ChargeRequest{Amount:%d Currency:%s Token:[redacted] Metadata:%v}", r.Amount, r.Currency, r.Metadata)
}

// GoString returns the same as String, so %#v never shows the token either.
func (r ChargeRequest) GoString() string { return r.String() }

// Validate reports whether r can be sent: a positive amount, a three-letter
// currency, a token and metadata keys and values that are not empty. It
// returns an error wrapping ErrInvalidRequest otherwise; the error never
// contains the token.
func (r ChargeRequest) Validate() error {
	switch {
	case r.Amount <= 0:
		return fmt.Errorf("%w: amount must be a positive integer in minor units", ErrInvalidRequest)
	case len(r.Currency) != 3:
		return fmt.Errorf("%w: currency must be a three-letter ISO 4217 code", ErrInvalidRequest)
	case r.Token == "":
		return fmt.Errorf("%w: token is required", ErrInvalidRequest)
	}
	for k := range r.Metadata {
		if k == "" {
			return fmt.Errorf("%w: metadata keys must not be empty", ErrInvalidRequest)
		}
	}
	return nil
}

// ParseChargeRequest decodes a POST /v1/charges body strictly: unknown fields,
// trailing data and non-integral amounts are errors wrapping
// ErrInvalidRequest. It does not call Validate. Errors never contain the token.
func ParseChargeRequest(body []byte) (ChargeRequest, error) {
	return parseStrict[ChargeRequest](body)
}

// Charge is a charge object (Stripe, https://docs.stripe.com/api/charges/object).
// A declined charge exists too, with Status failed and a FailureCode.
type Charge struct {
	ID             string            `json:"id"`     // "ch_…"
	Object         string            `json:"object"` // "charge"
	Amount         int64             `json:"amount"` // minor units
	Currency       string            `json:"currency"`
	Status         Status            `json:"status"`
	FailureCode    string            `json:"failure_code,omitempty"`    // e.g. "card_declined"
	FailureMessage string            `json:"failure_message,omitempty"` // human-readable
	IdempotencyKey string            `json:"idempotency_key"`           // the key of the creating request
	Metadata       map[string]string `json:"metadata"`
	Description    string            `json:"description,omitempty"`
	RefundedAmount int64             `json:"refunded_amount"` // minor units, 0 ≤ RefundedAmount ≤ Amount
	Refunded       bool              `json:"refunded"`        // fully refunded
	Created        int64             `json:"created"`         // Unix seconds, provider clock

	// Replayed reports that the response was a replay of an earlier request
	// with the same idempotency key (header Idempotent-Replayed: true). It is
	// set by Client.CreateCharge and is not part of the JSON object.
	Replayed bool `json:"-"`
}

// Attempt returns the charge's 1-based attempt number from its metadata, or 0
// if it has none.
func (c Charge) Attempt() int {
	n, err := strconv.Atoi(c.Metadata[MetadataAttempt])
	if err != nil {
		return 0
	}
	return n
}

// RefundRequest is the body of POST /v1/refunds. Body is deterministic like
// ChargeRequest.Body.
type RefundRequest struct {
	Charge string `json:"charge"`           // the charge id
	Amount int64  `json:"amount,omitempty"` // minor units; 0 refunds what remains
}

// Body returns the request's canonical JSON encoding: {"charge":…,"amount":…}
// with amount omitted when 0.
func (r RefundRequest) Body() []byte { return encode(r) }

// ParseRefundRequest decodes a POST /v1/refunds body strictly, like
// ParseChargeRequest.
func ParseRefundRequest(body []byte) (RefundRequest, error) {
	return parseStrict[RefundRequest](body)
}

// Refund is a refund object (Stripe, https://docs.stripe.com/api/refunds/object).
type Refund struct {
	ID             string `json:"id"`     // "re_…"
	Object         string `json:"object"` // "refund"
	Amount         int64  `json:"amount"` // minor units
	Currency       string `json:"currency"`
	Charge         string `json:"charge"` // the refunded charge's id
	Status         Status `json:"status"` // always succeeded in this API
	IdempotencyKey string `json:"idempotency_key"`
	Created        int64  `json:"created"` // Unix seconds, provider clock

	// Replayed is as in Charge.
	Replayed bool `json:"-"`
}

// encode marshals v compactly without HTML escaping and without the trailing
// newline of json.Encoder. encoding/json writes struct fields in declaration
// order and map keys sorted, so the result is deterministic.
func encode(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only types defined in this package reach here, and they always encode.
		panic(fmt.Sprintf("provider: encode %T: %v", v, err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// decodeStrict decodes exactly one JSON object into v, refusing unknown
// fields. Its errors wrap ErrInvalidRequest and never quote the input, so a
// token cannot leak through them.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: malformed body: %s", ErrInvalidRequest, describeJSONError(err))
	}
	if dec.More() {
		return fmt.Errorf("%w: malformed body: trailing data after the JSON object", ErrInvalidRequest)
	}
	return nil
}

// describeJSONError describes a decoding error by position and field only.
func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("syntax error at offset %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q must be a JSON %s", typ.Field, typ.Type.Kind())
	default:
		// Unknown-field errors name the field, never a value.
		return err.Error()
	}
}

// parseStrict decodes body into a T with decodeStrict; on an error it
// returns T's zero value.
func parseStrict[T any](body []byte) (T, error) {
	var v T
	if err := decodeStrict(body, &v); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}
