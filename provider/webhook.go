package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is the largest accepted difference between a webhook's
// signature timestamp and the receiver's clock (Stripe's default, 5 minutes:
// https://docs.stripe.com/webhooks#replay-attacks).
const DefaultTolerance = 5 * time.Minute

// Event types (Stripe, https://docs.stripe.com/api/events/types).
const (
	EventChargeSucceeded = "charge.succeeded"
	EventChargeFailed    = "charge.failed"
	EventChargeRefunded  = "charge.refunded"
)

// Limits on a Provider-Signature header, so that verifying a hostile header
// does bounded work.
const (
	maxSignatureHeader = 4096
	maxSignatures      = 8
)

// Event is a webhook notification (Stripe, https://docs.stripe.com/api/events/object).
// Every event this provider sends is about a charge, whose state at the time
// of the event is Data.Object; it may be stale or arrive out of order, so a
// receiver should fetch the charge (Client.GetCharge) and dedupe by ID.
type Event struct {
	ID      string    `json:"id"`      // "evt_…"; the same for every delivery of the event
	Object  string    `json:"object"`  // "event"
	Type    string    `json:"type"`    // e.g. EventChargeSucceeded
	Created int64     `json:"created"` // Unix seconds, provider clock
	Data    EventData `json:"data"`
}

// EventData holds an event's object.
type EventData struct {
	Object Charge `json:"object"`
}

// Body returns the event's JSON encoding, as the simulator sends it.
func (e Event) Body() []byte { return encode(e) }

// ParseEvent decodes a webhook body. It tolerates unknown fields (providers add
// fields over time) but requires an id, a type and, for charge.* events, a
// charge with an id. Errors wrap ErrMalformedEvent. Call it only after
// VerifySignature succeeded on the same bytes.
func ParseEvent(body []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(body, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %s", ErrMalformedEvent, describeJSONError(err))
	}
	switch {
	case e.ID == "":
		return Event{}, fmt.Errorf("%w: missing id", ErrMalformedEvent)
	case e.Type == "":
		return Event{}, fmt.Errorf("%w: missing type", ErrMalformedEvent)
	case strings.HasPrefix(e.Type, "charge.") && e.Data.Object.ID == "":
		return Event{}, fmt.Errorf("%w: %s event without a charge id", ErrMalformedEvent, e.Type)
	}
	return e, nil
}

// Sign returns a Provider-Signature header value for body at time t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>", with one v1
// entry per secret in order, so a sender can sign with the old and the new
// secret while a rotation is in progress (Stripe,
// https://docs.stripe.com/webhooks#verify-manually).
func Sign(body []byte, t time.Time, secrets ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=" + ts)
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(s, ts, body)))
	}
	return b.String()
}

// VerifySignature checks a Provider-Signature header against the raw body
// bytes as received (before any JSON decoding): some v1 signature must equal
// HMAC-SHA256(secret, "<t>.<body>") — compared in constant time — and t must
// be within tolerance of now, in either direction. A tolerance ≤ 0 means
// DefaultTolerance. Entries other than t and v1 (for example v0) are ignored.
//
// It returns nil, or an error wrapping ErrBadSignature (missing or malformed
// header, no matching signature, empty secret) or ErrStaleTimestamp (valid
// signature, timestamp out of tolerance). The signature is checked first, so
// an unauthenticated sender learns nothing about the timestamp check.
func VerifySignature(header string, body []byte, secret []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret configured", ErrBadSignature)
	}
	if header == "" {
		return fmt.Errorf("%w: missing %s header", ErrBadSignature, HeaderSignature)
	}
	if len(header) > maxSignatureHeader {
		return fmt.Errorf("%w: header too long", ErrBadSignature)
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: malformed header", ErrBadSignature)
		}
		switch k {
		case "t":
			if ts != "" {
				return fmt.Errorf("%w: more than one timestamp", ErrBadSignature)
			}
			ts = v
		case "v1":
			if len(sigs) == maxSignatures {
				return fmt.Errorf("%w: too many signatures", ErrBadSignature)
			}
			if sig, err := hex.DecodeString(v); err == nil && len(sig) == sha256.Size {
				sigs = append(sigs, sig)
			}
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: missing or malformed timestamp", ErrBadSignature)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no v1 signature", ErrBadSignature)
	}
	want := mac(secret, ts, body)
	matched := false
	for _, sig := range sigs {
		// Check every signature, so the time taken does not depend on which one matched.
		if hmac.Equal(sig, want) {
			matched = true
		}
	}
	if !matched {
		return fmt.Errorf("%w: no signature matches", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now, tolerance %s", ErrStaleTimestamp, d.Round(time.Second), tolerance)
	}
	return nil
}

// mac returns HMAC-SHA256(secret, ts + "." + body).
func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}
