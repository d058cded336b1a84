package projections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
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

// decode unmarshals the event's data into v (a projection-local struct that
// names only the public fields the projection needs, so private parts are
// never decoded).
func (e *envelope) decode(v any) error {
	if err := json.Unmarshal(e.data, v); err != nil {
		return fmt.Errorf("decode %s %s@%d: %w", e.typ, e.stream, e.revision, err)
	}
	return nil
}

// streamID returns the id of the entity of e's stream, which must be
// prefix + a UUID (the row key).
func (e *envelope) streamID(prefix string) (pgtype.UUID, error) {
	s, ok := strings.CutPrefix(e.stream, prefix)
	if !ok {
		return pgtype.UUID{}, e.badStream(prefix)
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return pgtype.UUID{}, fmt.Errorf("%s %s@%d: stream id is not a UUID", e.typ, e.stream, e.revision)
	}
	return pgtype.UUID{Bytes: id, Valid: true}, nil
}

// opens reports whether e is an event of type typ that opens its stream
// (revision 0), for rowSet.needOpened.
func (e *envelope) opens(typ string) bool { return e.typ == typ && e.revision == 0 }

// rowKey returns the canonical UUID text of e's stream id (prefix + a
// UUID): the key of the row e's stream feeds.

func (e *envelope) rowKey(prefix string) (string, error) {
	id, err := e.streamID(prefix)
	if err != nil {
		return "", err
	}
	return uuid.UUID(id.Bytes).String(), nil
}

// canonUUID returns s in canonical UUID text, or the error of field.
func (e *envelope) canonUUID(s, field string) (string, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return "", e.badField(field)
	}
	return id.String(), nil
}

// Stream name prefixes: the domain's stream categories.
const (
	showPrefix        = domain.CategoryShow
	reservationPrefix = domain.CategoryReservation
	orderPrefix       = domain.CategoryOrder
	intentPrefix      = domain.CategoryIntent
)

// Event data, as far as the projections read it. Field names and JSON tags
// follow package domain (pinned by its golden files); private parts are
// deliberately absent.

type money struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

type showScheduled struct {
	Name     string    `json:"name"`
	StartsAt time.Time `json:"starts_at"`
	Capacity int       `json:"capacity"`
	Price    money     `json:"price"`
}

type seatsChanged struct { // SeatsHeld, SeatsReleased
	Quantity int `json:"quantity"`
}

type reservationHeld struct {
	ShowID    string    `json:"show_id"`
	Actor     string    `json:"actor"`
	Quantity  int       `json:"quantity"`
	Amount    money     `json:"amount"`
	ExpiresAt time.Time `json:"expires_at"`
}

type reservationChanged struct { // ReservationOrdered, ReservationReleased
	OrderID string `json:"order_id"`
	Reason  string `json:"reason"`
}

type orderPlaced struct {
	ReservationID   string    `json:"reservation_id"`
	ShowID          string    `json:"show_id"`
	Actor           string    `json:"actor"`
	Intent          string    `json:"intent"`
	Quantity        int       `json:"quantity"`
	Amount          money     `json:"amount"`
	PaymentDeadline time.Time `json:"payment_deadline"`
}

type paymentFact struct { // PaymentAttemptStarted, PaymentSucceeded, PaymentFailed, PaymentOutcomeUnknown, PaymentActionRequired, Refund*
	Attempt  int    `json:"attempt"`
	ChargeID string `json:"charge_id"`
}

type orderConfirmed struct {
	Tickets []struct {
		ID string `json:"id"`
	} `json:"tickets"`
}

type orderReason struct { // OrderFailed, OrderNeedsReview
	Reason string `json:"reason"`
}

type intentRecorded struct {
	Actor      string    `json:"actor"`
	Operation  string    `json:"operation"`
	TargetID   string    `json:"target_id"`
	Executor   string    `json:"executor"`
	LeaseUntil time.Time `json:"lease_until"`
	Command    struct {
		OrderID string `json:"order_id"`
	} `json:"command"`
}

type secretsShredded struct { // PaymentSecretsShredded
	ShreddedAt time.Time `json:"shredded_at"`
}

type intentResumed struct {
	Executor   string    `json:"executor"`
	LeaseUntil time.Time `json:"lease_until"`
}

type intentRejected struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
}

// badStream is the error of an event on a stream without prefix.
func (e *envelope) badStream(prefix string) error {
	return fmt.Errorf("%s %s@%d: stream is not a %q stream", e.typ, e.stream, e.revision, prefix)
}

// badField is the error of an event whose field is not a UUID.
func (e *envelope) badField(field string) error {
	return fmt.Errorf("%s %s@%d: %s is not a UUID", e.typ, e.stream, e.revision, field)
}
