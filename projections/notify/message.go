package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/eventcodec"
)

// Header names of a notification, as docs/notifications.md ("What is
// published") lists them. Nats-Msg-Id is JetStream's
// de-duplication header; the others are the service's own.
const (
	HeaderMsgID     = "Nats-Msg-Id"
	HeaderStream    = "Booking-Stream"
	HeaderRevision  = "Booking-Revision"
	HeaderPosition  = "Booking-Position"
	HeaderEventType = "Booking-Event-Type"
	// HeaderRequestID carries the event's correlation id (metadata
	// correlation_id): the id the service assigned (a UUIDv7, never a
	// client's value) to the HTTP request that caused the event's intent,
	// kept by its follow-ups, recovery, the reconciler and webhooks. Absent
	// only for events stored before correlation ids were kept.
	HeaderRequestID = "Booking-Request-Id"
)

// SubjectPrefix begins every notification subject; SubjectAll matches them all.
const (
	SubjectPrefix = "booking.v1."
	SubjectAll    = "booking.v1.>"
)

// Stream-name prefixes of the public entities, and their subject categories.
// reservation-order-{id} (the uniqueness stream) and intent-{hash} are not
// public; reservation-order- must be tested before reservation-.
var categories = []struct{ prefix, category string }{
	{domain.CategoryClaim, ""},
	{domain.CategoryShow, "show"},
	{domain.CategoryReservation, "reservation"},
	{domain.CategoryOrder, "order"},
}

// Category returns the subject category (show, reservation or order) of an
// event stream and the entity id (the stream name without its prefix), or
// ok == false for a stream whose events are not published.
func Category(stream string) (category, id string, ok bool) {
	for _, c := range categories {
		if rest, found := strings.CutPrefix(stream, c.prefix); found {
			if c.category == "" || rest == "" {
				return "", "", false
			}
			return c.category, rest, true
		}
	}
	return "", "", false
}

// Subject returns the subject booking.v1.{category}.{id}.{event} of an event
// of type eventType on stream, or ok == false for a stream whose events are
// not published. It returns an error for a public stream whose id or type
// cannot be a subject token (empty, or holding '.', '*', '>' or white space).
func Subject(stream, eventType string) (subject string, ok bool, err error) {
	category, id, ok := Category(stream)
	if !ok {
		return "", false, nil
	}
	event, cached := eventTokens()[eventType]
	if !cached {
		event = SnakeCase(eventType)
	}
	if !validToken(id) || !cached && !validToken(event) {
		return "", true, fmt.Errorf("notify: stream %q, event type %q: not a valid subject token", stream, eventType)
	}
	return SubjectPrefix + category + "." + id + "." + event, true, nil
}

// eventTokens maps the type of every domain event (domain.EventTypes) to
// its SnakeCase form, every one a valid subject token.
var eventTokens = sync.OnceValue(func() map[string]string {
	tokens := make(map[string]string)
	for _, e := range domain.EventTypes() {
		if t := SnakeCase(e.EventType()); validToken(t) {
			tokens[e.EventType()] = t
		}
	}
	return tokens
})

// validToken reports whether s can be a subject token: not empty, and
// without '.', '*', '>' or white space (unicode.IsSpace).
func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf:
			return !strings.ContainsFunc(s[i:], func(r rune) bool {
				return r == '.' || r == '*' || r == '>' || unicode.IsSpace(r)
			})
		case c == '.' || c == '*' || c == '>' || c == ' ' || '\t' <= c && c <= '\r':
			return false
		}
	}
	return s != ""
}

// SnakeCase returns the snake_case form of an event type name:
// OrderConfirmed → order_confirmed, SeatsHeld → seats_held. An acronym stays
// one word (HTTPFailed → http_failed).
func SnakeCase(name string) string {
	rs := []rune(name)
	var b strings.Builder
	b.Grow(len(name) + 4)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 {
				prev := rs[i-1]
				nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
					b.WriteByte('_')
				}
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Payload is the JSON body of a notification: the event, with its data as
// PublicData leaves it. Position is in the "commit/prepare" form of the
// Booking-Position header; OccurredAt comes from the event's metadata (the
// recording time if the metadata has none).
type Payload struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Stream     string          `json:"stream"`
	Revision   uint64          `json:"revision"`
	Position   string          `json:"position"`
	OccurredAt time.Time       `json:"occurred_at"`
	Data       json.RawMessage `json:"data"`
}

// privateKey is the member of event data that holds sealed secrets
// (docs/secrets.md); it is never published.
var privateKey = []byte(`"private"`)

// internalMembers lists, by event type, the top-level members of event data
// that are never published beside "private": they describe how the service
// coordinates, not what happened. SeatsHeld and OrderPlaced name the
// intent stream, a digest of the client's idempotency key; a
// PaymentAttemptStarted names the replica holding the attempt's lease
// (owner), the lease's end, and request_sha256, the digest of the attempt's
// inputs, the payment token among them.
var internalMembers = map[string][]string{
	domain.TypeSeatsHeld:             {"intent"},
	domain.TypeOrderPlaced:           {"intent"},
	domain.TypePaymentAttemptStarted: {"owner", "lease_until", "request_sha256"},
}

// PublicData returns the data of an event of type eventType as published:
// without its top-level "private" member and without the internal members
// internalMembers lists for the type. Data with none of them is returned
// as is (no copy); otherwise the members keep their values, in key order.
// It returns an error for data that must be pruned but is not a JSON
// object, so a secret or an internal is never published by mistake.
func PublicData(eventType string, data []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return json.RawMessage("{}"), nil
	}
	internal := internalMembers[eventType]
	if len(internal) == 0 && !bytes.Contains(data, privateKey) {
		return data, nil
	}
	var m map[string]json.RawMessage
	if err := gojson.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("notify: %s data must be pruned (private or internal members) but is not a JSON object: %w", eventType, err)
	}
	delete(m, "private")
	for _, k := range internal {
		delete(m, k)
	}
	out, err := gojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("notify: re-encode event data: %w", err)
	}
	return out, nil
}

// codec is the domain's event registry; NewMessage reads metadata with its
// decoder (github.com/goccy/go-json).
var codec = eventcodec.Registry()

// NewMessage returns the notification of e: its subject, headers and
// payload, or ok == false if e's stream is not published. It returns an
// error if the subject cannot be formed or the data cannot be made public.
// The metadata is read and the payload written with
// github.com/goccy/go-json (about twice as fast as encoding/json here),
// byte for byte what encoding/json writes: FuzzNewMessage holds NewMessage
// to a reference on encoding/json alone.
func NewMessage(e eventstore.RecordedEvent) (msg *nats.Msg, ok bool, err error) {
	subject, ok, err := Subject(e.Stream, e.Type)
	if !ok || err != nil {
		return nil, ok, err
	}
	data, err := PublicData(e.Type, e.Data)
	if err != nil {
		return nil, true, fmt.Errorf("notify: event %s (%s@%d): %w", e.ID, e.Stream, e.Revision, err)
	}
	occurred, correlation, traceparent, tracestate := e.RecordedAt, "", "", ""
	if md, err := codec.DecodeMetadata(e.Metadata); err == nil {
		if !md.OccurredAt.IsZero() {
			occurred = md.OccurredAt
		}
		correlation, traceparent, tracestate = md.CorrelationID, md.Traceparent, md.Tracestate
	}
	pos := e.Position.String()
	body, err := gojson.Marshal(Payload{
		ID: e.ID, Type: e.Type, Stream: e.Stream, Revision: e.Revision,
		Position: pos, OccurredAt: occurred.UTC(), Data: data,
	})
	if err != nil {
		return nil, true, fmt.Errorf("notify: encode payload of event %s: %w", e.ID, err)
	}
	// A map of one group (8 entries: the 5 headers every message has,
	// and as a rule Booking-Request-Id, traceparent and the relay's
	// Nats-Expected-Last-Msg-Id), its values in one array: each value is
	// a slice of length and capacity 1, so no append can reach another.
	h, vals := make(nats.Header, 8), make([]string, 0, 8)
	set := func(key, val string) {
		vals = append(vals, val)
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HeaderMsgID, e.ID)
	set(HeaderStream, e.Stream)
	set(HeaderRevision, strconv.FormatUint(e.Revision, 10))
	set(HeaderPosition, pos)
	set(HeaderEventType, e.Type)
	if correlation != "" {
		set(HeaderRequestID, correlation)
	}
	if traceparent != "" {
		set(HeaderTraceparent, traceparent)
		if tracestate != "" {
			set(HeaderTracestate, tracestate)
		}
	}
	return &nats.Msg{Subject: subject, Header: h, Data: body}, true, nil
}
