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

// paymentOf maps a PaymentIntent that was the whole answer of a request
// (create, retrieve, cancel): its next_action is taken verbatim from the
// body and Replayed from the answer's headers.
func paymentOf(pi *stripego.PaymentIntent) provider.Payment {
	var raw []byte
	replayed := false
	if pi.LastResponse != nil {
		raw = pi.LastResponse.RawJSON
		replayed = pi.LastResponse.Header.Get(headerReplayed) == "true"
	}
	var next []byte
	if raw != nil {
		next = nextActionIn(raw)
	} else {
		next = typedNextAction(pi.NextAction)
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

// typedNextAction encodes a next_action decoded by stripe-go (a list or
// search item, whose raw JSON is not kept), without its absent members.
// stripe-go does not decode use_stripe_sdk's contents, which only
// Stripe.js reads; the client secret is enough for it
// (https://docs.stripe.com/js/payment_intents/handle_next_action).
func typedNextAction(na *stripego.PaymentIntentNextAction) []byte {
	if na == nil {
		return nil
	}
	b, err := json.Marshal(na)
	if err != nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	maps.DeleteFunc(m, func(_ string, v json.RawMessage) bool { return bytes.Equal(v, []byte("null")) })
	b, err = json.Marshal(m)
	if err != nil {
		return nil
	}
	return b
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
