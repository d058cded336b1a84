package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/booking/provider"
	"github.com/stripe/stripe-go/v84/webhook"
)

// maxSignatureHeader bounds a Stripe-Signature header, so that verifying a
// hostile one does bounded work.
const maxSignatureHeader = 4096

// ParseWebhook verifies a webhook delivery and decodes its event
// (https://docs.stripe.com/webhooks#verify-official-libraries): the
// Stripe-Signature header signatureHeader ("t=<unix seconds>,v1=<hex>,…")
// must carry a v1 HMAC-SHA256 of "<t>.<body>" under one of the configured
// webhook secrets, checked by stripe-go's webhook package over the raw body
// as received; t must lie within the tolerance of now, either way (now is
// the caller's clock, not the host's); the event must be rendered in
// APIVersion's release train unless IgnoreAPIVersionMismatch is set.
//
// The verified body is decoded once, into the members the adapter reads
// (decodeEvent), where stripe-go's ConstructEvent would check the
// signature a second time and decode the whole object into a map. The
// event's PaymentID is data.object.id for a payment_intent object and
// data.object.payment_intent for a charge or refund; Metadata is
// data.object.metadata.
//
// Errors wrap ErrBadSignature (no secret configured; header missing,
// malformed or too long; no signature matches), ErrStaleTimestamp (valid
// signature, timestamp outside the tolerance) or ErrMalformedEvent (not an
// event, another API version, no id, type or data.object, a payment_intent
// without id). The signature is checked first, so an unauthenticated sender
// learns nothing about the others. It is safe for concurrent use.
func (c *Client) ParseWebhook(body []byte, signatureHeader string, now time.Time) (provider.WebhookEvent, error) {
	t, err := c.headerTime(signatureHeader)
	if err != nil {
		return provider.WebhookEvent{}, err
	}
	if err := c.matchSecret(body, signatureHeader); err != nil {
		return provider.WebhookEvent{}, err
	}
	if err := c.checkTime(t, now); err != nil {
		return provider.WebhookEvent{}, err
	}
	return decodeEvent(body, c.ignoreVersion)
}

// CheckWebhookHeader checks what can be checked of a delivery's
// Stripe-Signature header before its body is read: a webhook secret is
// configured; the header is present, at most 4 KiB, made of key=value
// parts with exactly one integer t and at least one v1 signature; and t
// lies within the tolerance of now, either way (now is the caller's
// clock). The signature itself needs the body: ParseWebhook checks it.
//
// Errors wrap ErrBadSignature or, for a well-formed header signed outside
// the tolerance, ErrStaleTimestamp (its signature unchecked). A header it
// accepts may still fail ParseWebhook; one it refuses always would. Safe
// for concurrent use.
func (c *Client) CheckWebhookHeader(signatureHeader string, now time.Time) error {
	t, err := c.headerTime(signatureHeader)
	if err != nil {
		return err
	}
	if !hasV1(signatureHeader) {
		return fmt.Errorf("%w: no v1 signature in Stripe-Signature header", provider.ErrBadSignature)
	}
	return c.checkTime(t, now)
}

// headerTime checks that a webhook secret is configured and the header is
// present and not too long, and returns its t (signatureTime). Errors wrap
// ErrBadSignature.
func (c *Client) headerTime(header string) (time.Time, error) {
	switch {
	case len(c.secrets) == 0:
		return time.Time{}, fmt.Errorf("%w: no webhook secret configured", provider.ErrBadSignature)
	case header == "":
		return time.Time{}, fmt.Errorf("%w: missing Stripe-Signature header", provider.ErrBadSignature)
	case len(header) > maxSignatureHeader:
		return time.Time{}, fmt.Errorf("%w: Stripe-Signature header too long", provider.ErrBadSignature)
	}
	return signatureTime(header)
}

// checkTime returns an error wrapping ErrStaleTimestamp when t is more than
// the tolerance away from now, either way.
func (c *Client) checkTime(t, now time.Time) error {
	if d := now.Sub(t); d > c.tolerance || d < -c.tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)",
			provider.ErrStaleTimestamp, t.UTC().Format(time.RFC3339), d.Round(time.Second), c.tolerance)
	}
	return nil
}

// hasV1 reports whether a Stripe-Signature header carries a v1 signature
// (the scheme stripe-go checks; v0 and others are ignored).
func hasV1(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		if k, v, _ := strings.Cut(part, "="); k == "v1" && v != "" {
			return true
		}
	}
	return false
}

// signatureTime returns the t of a Stripe-Signature header, or an error
// wrapping ErrBadSignature if the header is malformed or has no single t.
func signatureTime(header string) (time.Time, error) {
	var ts string
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return time.Time{}, fmt.Errorf("%w: malformed Stripe-Signature header", provider.ErrBadSignature)
		}
		if k == "t" {
			if ts != "" {
				return time.Time{}, fmt.Errorf("%w: more than one timestamp in Stripe-Signature header", provider.ErrBadSignature)
			}
			ts = v
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: missing or malformed timestamp in Stripe-Signature header", provider.ErrBadSignature)
	}
	return time.Unix(unix, 0), nil
}

// matchSecret checks, with stripe-go, that the header carries the
// signature of body under one of the configured secrets; an error wraps
// ErrBadSignature.
func (c *Client) matchSecret(body []byte, header string) error {
	for _, s := range c.secrets {
		err := webhook.ValidatePayloadIgnoringTolerance(body, header, s)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, webhook.ErrNoValidSignature):
			continue
		default: // ErrInvalidHeader, ErrNotSigned
			return fmt.Errorf("%w: malformed Stripe-Signature header", provider.ErrBadSignature)
		}
	}
	return fmt.Errorf("%w: no signature matches", provider.ErrBadSignature)
}

// eventError says why a correctly signed body is no event of the
// accepted API versions, without quoting it.
func eventError(body []byte) error {
	var head struct {
		Object     string `json:"object"`
		APIVersion string `json:"api_version"`
	}
	switch {
	case json.Unmarshal(body, &head) != nil:
		return fmt.Errorf("%w: body is not a JSON event", provider.ErrMalformedEvent)
	case head.Object != "event":
		return fmt.Errorf("%w: object is %q, not event", provider.ErrMalformedEvent, head.Object)
	}
	return fmt.Errorf("%w: event api_version %q, want %s's release train: pin the webhook endpoint to API version %s",
		provider.ErrMalformedEvent, head.APIVersion, APIVersion, APIVersion)
}

// eventEnvelope is the part of an event
// (https://docs.stripe.com/api/events/object) the adapter reads; the
// members it leaves out are skipped unread.
type eventEnvelope struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	Type       string `json:"type"`
	Created    int64  `json:"created"`
	APIVersion string `json:"api_version"`
	Data       *struct {
		Object *eventObject `json:"object"`
	} `json:"data"`
}

// eventObject is the part of an event's data.object the adapter reads.
type eventObject struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	PaymentIntent json.RawMessage   `json:"payment_intent"` // an id, or an expanded object
	Metadata      map[string]string `json:"metadata"`
}

// decodeEvent maps a verified event body in one pass
// (https://docs.stripe.com/api/events/object). It refuses, wrapping
// ErrMalformedEvent, what stripe-go's ConstructEvent refuses of a body
// whose signature matches: invalid JSON, an object other than "event", an
// api_version outside APIVersion's release train (unless ignoreVersion),
// a data.object that is not a JSON object; and what the adapter needs: an
// id, a type, a data.object (not null), a payment_intent's id.
func decodeEvent(body []byte, ignoreVersion bool) (provider.WebhookEvent, error) {
	var ev eventEnvelope
	if json.Unmarshal(body, &ev) != nil || ev.Object != "event" || (!ignoreVersion && !sameReleaseTrain(ev.APIVersion)) {
		return provider.WebhookEvent{}, eventError(body)
	}
	switch {
	case ev.ID == "":
		return provider.WebhookEvent{}, fmt.Errorf("%w: missing id", provider.ErrMalformedEvent)
	case ev.Type == "":
		return provider.WebhookEvent{}, fmt.Errorf("%w: missing type", provider.ErrMalformedEvent)
	case ev.Data == nil || ev.Data.Object == nil:
		return provider.WebhookEvent{}, fmt.Errorf("%w: missing data.object", provider.ErrMalformedEvent)
	}
	obj := ev.Data.Object
	out := provider.WebhookEvent{
		ID:         ev.ID,
		Type:       ev.Type,
		Created:    time.Unix(ev.Created, 0).UTC(),
		APIVersion: ev.APIVersion,
		Metadata:   obj.Metadata,
	}
	switch obj.Object {
	case "payment_intent":
		if obj.ID == "" {
			return provider.WebhookEvent{}, fmt.Errorf("%w: %s event without a payment_intent id", provider.ErrMalformedEvent, ev.Type)
		}
		out.PaymentID = obj.ID
	case "charge", "refund":
		out.PaymentID = objectID(obj.PaymentIntent)
	}
	return out, nil
}

// sameReleaseTrain reports whether an event's api_version is of
// APIVersion's release train ("2025-09-30.clover": the part after the
// dot), the rule stripe-go's ConstructEvent applies
// (https://docs.stripe.com/api/versioning); a preview version matches only
// itself, and a version without a release train matches none.
func sameReleaseTrain(version string) bool {
	_, train, ok := strings.Cut(version, ".")
	if !ok {
		return false
	}
	_, ours, _ := strings.Cut(APIVersion, ".")
	if ours == "preview" {
		return version == APIVersion
	}
	train, _, _ = strings.Cut(train, ".")
	ours, _, _ = strings.Cut(ours, ".")
	return train == ours
}

// objectID returns the id of an expandable field: the string itself, or
// the expanded object's id; "" for null or anything else.
func objectID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.ID
	}
	return ""
}
