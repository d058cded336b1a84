package stripe

import (
	"bytes"
	"encoding/json"
	"maps"
	"strings"
	"time"

	"github.com/retrysafe/booking/provider"
	stripego "github.com/stripe/stripe-go/v84"
)

// paymentOf maps a PaymentIntent decoded by stripe-go, with its
// next_action verbatim from the JSON it was decoded from (stripe-go keeps
// each object's JSON, list and search items included, but decodes only
// part of next_action) and Replayed from the answer's headers.
func paymentOf(pi *stripego.PaymentIntent) provider.Payment {
	var next []byte
	replayed := false
	if pi.LastResponse != nil {
		if pi.NextAction != nil { // the body is read again only for a payment with a next action
			next = nextActionIn(pi.LastResponse.RawJSON)
		}
		replayed = pi.LastResponse.Header.Get(headerReplayed) == "true"
	}
	return paymentFrom(pi, next, replayed)
}

// paymentFrom maps a PaymentIntent (https://docs.stripe.com/api/payment_intents/object)
// to a provider.Payment with the given raw next_action and replay flag.
// Currency becomes upper case; AmountRefunded is the latest charge's
// amount_refunded when the charge was expanded (0 otherwise).
func paymentFrom(pi *stripego.PaymentIntent, nextAction []byte, replayed bool) provider.Payment {
	p := provider.Payment{
		ID:           pi.ID,
		Amount:       pi.Amount,
		Currency:     strings.ToUpper(string(pi.Currency)),
		Status:       provider.PaymentStatus(pi.Status),
		Metadata:     maps.Clone(pi.Metadata),
		Created:      time.Unix(pi.Created, 0).UTC(),
		ClientSecret: pi.ClientSecret,
		NextAction:   nextAction,
		Replayed:     replayed,
	}
	if pi.LatestCharge != nil {
		p.AmountRefunded = pi.LatestCharge.AmountRefunded
	}
	if e := pi.LastPaymentError; e != nil {
		p.LastError = &provider.PaymentError{
			Type:        string(e.Type),
			Code:        string(e.Code),
			DeclineCode: string(e.DeclineCode),
			Message:     paymentErrorMessage(string(e.Code), string(e.DeclineCode)),
		}
	}
	return p
}

// paymentErrorMessage describes a payment error by its code and decline
// code (https://docs.stripe.com/declines/codes), never by Stripe's message,
// which can quote a payment method id.
func paymentErrorMessage(code, declineCode string) string {
	msg := strings.ReplaceAll(code, "_", " ")
	if msg == "" {
		msg = "payment failed"
	}
	if declineCode != "" {
		msg += " (" + declineCode + ")"
	}
	return msg
}

// nextActionIn returns the next_action of the object at path (a chain of
// keys, e.g. "error", "payment_intent"; none: the top level) in the JSON
// body raw, verbatim, or nil when it is absent or null.
func nextActionIn(raw []byte, path ...string) []byte {
	obj := json.RawMessage(raw)
	for _, k := range append(path, "next_action") {
		var m map[string]json.RawMessage
		if json.Unmarshal(obj, &m) != nil {
			return nil
		}
		obj = m[k]
	}
	if len(obj) == 0 || bytes.Equal(obj, []byte("null")) {
		return nil
	}
	return bytes.Clone(obj)
}

// refundOf maps a refund (https://docs.stripe.com/api/refunds/object);
// paymentID stands in when Stripe's answer names no payment_intent.
func refundOf(re *stripego.Refund, paymentID string) provider.PaymentRefund {
	r := provider.PaymentRefund{
		ID:        re.ID,
		PaymentID: paymentID,
		Amount:    re.Amount,
		Currency:  strings.ToUpper(string(re.Currency)),
		Status:    string(re.Status),
		Metadata:  maps.Clone(re.Metadata),
		Created:   time.Unix(re.Created, 0).UTC(),
	}
	if re.PaymentIntent != nil && re.PaymentIntent.ID != "" {
		r.PaymentID = re.PaymentIntent.ID
	}
	if re.LastResponse != nil {
		r.Replayed = re.LastResponse.Header.Get(headerReplayed) == "true"
	}
	return r
}
