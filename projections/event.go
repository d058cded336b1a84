package projections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/eventcodec"
)

// envelope is a recorded event as the projectors see it: where it is, when
// it happened (metadata occurred_at, or the store's recorded_at when the
// metadata has none) and its undecoded data.
type envelope struct {
	stream   string
	revision int64
	typ      string
	data     []byte
	at       time.Time
	pos      eventstore.Position
}

// meta is the part of eventstore.Metadata the projectors read.
type meta struct {
	OccurredAt time.Time `json:"occurred_at"`
}

// newEnvelope returns r as an envelope. Metadata that does not parse counts
// as missing: the event's time is then its recorded_at, which is as
// deterministic (stored with the event).
func newEnvelope(r *eventstore.RecordedEvent) envelope {
	e := envelope{stream: r.Stream, revision: int64(r.Revision), typ: r.Type, data: r.Data, pos: r.Position, at: r.RecordedAt}
	if t, ok := occurredAt(r.Metadata); ok {
		e.at = t
	}
	e.at = micro(e.at) // PostgreSQL's precision: what is stored is what is folded
	return e
}

// occurredAtKey is how encoding/json writes the occurred_at member. Inside
// a JSON string a quote is escaped, so this text can only be a member name.
var occurredAtKey = []byte(`"occurred_at":"`)

// occurredAt returns the occurred_at of event metadata, reading the member
// directly when it is written as encoding/json writes it (the common case,
// and the hot path of a rebuild), else decoding the metadata.
func occurredAt(metadata []byte) (time.Time, bool) {
	if len(metadata) == 0 {
		return time.Time{}, false
	}
	if i := bytes.Index(metadata, occurredAtKey); i >= 0 && bytes.Count(metadata, occurredAtKey) == 1 {
		rest := metadata[i+len(occurredAtKey):]
		if j := bytes.IndexByte(rest, '"'); j > 0 {
			if t, err := time.Parse(time.RFC3339Nano, string(rest[:j])); err == nil {
				return t, !t.IsZero()
			}
		}
	}
	var m meta
	if json.Unmarshal(metadata, &m) != nil || m.OccurredAt.IsZero() {
		return time.Time{}, false
	}
	return m.OccurredAt, true
}

// registry is the domain's event registry (eventcodec.Registry, as the use
// cases decode): every event a projection reads is decoded through it into
// the domain's own type, so a projection reads what the deciders read,
// every schema version included.
var registry = eventcodec.Registry()

// event returns the event's data decoded through the domain's registry;
// the error names the event and wraps the registry's (an unknown type, or
// data that does not decode).
func (e *envelope) event() (domain.Event, error) {
	ev, err := registry.Decode(e.typ, e.data)
	if err != nil {
		return nil, fmt.Errorf("decode %s %s@%d: %w", e.typ, e.stream, e.revision, err)
	}
	return ev.(domain.Event), nil
}

// decodeAs returns the event decoded through the domain's registry as a T,
// the domain type of e.typ; an event of another type is an error.
func decodeAs[T domain.Event](e *envelope) (T, error) {
	var t T
	ev, err := e.event()
	if err != nil {
		return t, err
	}
	t, ok := ev.(T)
	if !ok {
		return t, fmt.Errorf("decode %s %s@%d: not a %s", e.typ, e.stream, e.revision, t.EventType())
	}
	return t, nil
}

// opens reports whether e is an event of type typ that opens its stream
// (revision 0), for rowSet.needOpened.
func (e *envelope) opens(typ string) bool { return e.typ == typ && e.revision == 0 }

// rowKey returns the canonical UUID text of e's stream id (prefix + a
// UUID): the key of the row e's stream feeds.
func (e *envelope) rowKey(prefix string) (string, error) {
	s, ok := strings.CutPrefix(e.stream, prefix)
	if !ok {
		return "", e.badStream(prefix)
	}
	key, ok := canonicalUUID(s)
	if !ok {
		return "", fmt.Errorf("%s %s@%d: stream id is not a UUID", e.typ, e.stream, e.revision)
	}
	return key, nil
}

// canonUUID returns s in canonical UUID text, or the error of field.
func (e *envelope) canonUUID(s, field string) (string, error) {
	c, ok := canonicalUUID(s)
	if !ok {
		return "", e.badField(field)
	}
	return c, nil
}

// canonicalUUID returns s in canonical UUID text (uuid.UUID.String: lower
// case, hyphenated) and true when s is a UUID in any form uuid.Parse
// accepts, else false. When s already is canonical (as the domain writes
// ids) it returns s itself, allocating nothing: of the forms uuid.Parse
// accepts, only the hyphenated one is 36 bytes long.
func canonicalUUID(s string) (string, bool) {
	id, err := uuid.Parse(s)
	if err != nil {
		return "", false
	}
	if len(s) == 36 && !strings.ContainsAny(s, "ABCDEF") {
		return s, true
	}
	return id.String(), true
}

// Stream name prefixes: the domain's stream categories.
const (
	showPrefix        = domain.CategoryShow
	reservationPrefix = domain.CategoryReservation
	orderPrefix       = domain.CategoryOrder
	intentPrefix      = domain.CategoryIntent
)

// paymentFact is what the orders projection reads of a payment or refund
// event: its attempt (payment events) and its charge id (a success, and
// refund events).
type paymentFact struct {
	Attempt  int
	ChargeID string
}

// payment returns the payment fact of a payment or refund event.
func (e *envelope) payment() (paymentFact, error) {
	ev, err := e.event()
	if err != nil {
		return paymentFact{}, err
	}
	switch ev := ev.(type) {
	case domain.PaymentAttemptStarted:
		return paymentFact{Attempt: ev.Attempt}, nil
	case domain.PaymentSucceeded:
		return paymentFact{Attempt: ev.Attempt, ChargeID: ev.ChargeID}, nil
	case domain.PaymentFailed:
		return paymentFact{Attempt: ev.Attempt, ChargeID: ev.ChargeID}, nil
	case domain.PaymentOutcomeUnknown:
		return paymentFact{Attempt: ev.Attempt}, nil
	case domain.PaymentActionRequired:
		return paymentFact{Attempt: ev.Attempt}, nil
	case domain.RefundRequested:
		return paymentFact{ChargeID: ev.ChargeID}, nil
	case domain.RefundSucceeded:
		return paymentFact{ChargeID: ev.ChargeID}, nil
	case domain.RefundRefused:
		return paymentFact{ChargeID: ev.ChargeID}, nil
	}
	return paymentFact{}, fmt.Errorf("decode %s %s@%d: not a payment or refund event", e.typ, e.stream, e.revision)
}

// reservationChange returns the order id and the release reason of a
// reservation event after its opening (ReservationOrdered,
// ReservationExpired, ReservationReleased); either may be empty.
func (e *envelope) reservationChange() (orderID, reason string, err error) {
	ev, err := e.event()
	if err != nil {
		return "", "", err
	}
	switch ev := ev.(type) {
	case domain.ReservationOrdered:
		return ev.OrderID, "", nil
	case domain.ReservationReleased:
		return ev.OrderID, ev.Reason, nil
	case domain.ReservationExpired:
		return "", "", nil
	}
	return "", "", fmt.Errorf("decode %s %s@%d: not a reservation change", e.typ, e.stream, e.revision)
}

// seats returns the quantity of a SeatsHeld or SeatsReleased event.
func (e *envelope) seats() (int, error) {
	ev, err := e.event()
	if err != nil {
		return 0, err
	}
	switch ev := ev.(type) {
	case domain.SeatsHeld:
		return ev.Quantity, nil
	case domain.SeatsReleased:
		return ev.Quantity, nil
	}
	return 0, fmt.Errorf("decode %s %s@%d: not a seats event", e.typ, e.stream, e.revision)
}

// badStream is the error of an event on a stream without prefix.
func (e *envelope) badStream(prefix string) error {
	return fmt.Errorf("%s %s@%d: stream is not a %q stream", e.typ, e.stream, e.revision, prefix)
}

// badField is the error of an event whose field is not a UUID.
func (e *envelope) badField(field string) error {
	return fmt.Errorf("%s %s@%d: %s is not a UUID", e.typ, e.stream, e.revision, field)
}
