package eventstore

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"
)

// Typed is a value with a stable event type name (domain.Event satisfies it).
type Typed interface {
	EventType() string
}

// Registry maps stable event type names to Go types, for encoding events to
// JSON (encoding/json: the bytes stored) and decoding them back
// (encoding/json's Unmarshal unless DecodingWith says otherwise). It is
// built explicitly (in run), never through init-time registration. A
// Registry is immutable after NewRegistry and safe for concurrent use.
type Registry struct {
	types     map[string]reflect.Type
	unmarshal func(data []byte, v any) error
}

// NewRegistry returns a registry of the given event values' types (zero
// values are fine). It panics on two types with one name, a programming error.
func NewRegistry(events ...Typed) *Registry {
	r := &Registry{types: make(map[string]reflect.Type, len(events)), unmarshal: json.Unmarshal}
	for _, e := range events {
		name := e.EventType()
		if _, dup := r.types[name]; dup {
			panic("eventstore: event type registered twice: " + name)
		}
		r.types[name] = reflect.TypeOf(e)
	}
	return r
}

// DecodingWith returns a copy of r that decodes with unmarshal, which must
// be a drop-in for encoding/json's Unmarshal: for any input, an error where
// encoding/json gives one, and otherwise the same value, unless an object
// repeats a member name (RFC 8259, section 4, leaves its meaning to the
// parser; encoding/json never writes one).
func (r *Registry) DecodingWith(unmarshal func(data []byte, v any) error) *Registry {
	return &Registry{types: r.types, unmarshal: unmarshal}
}

// ErrUnknownEventType is returned by Decode for a type name not registered.
var ErrUnknownEventType = fmt.Errorf("eventstore: unknown event type")

// Decode returns the event of type name decoded from data, as the registered
// (non-pointer) Go type. Returns ErrUnknownEventType (wrapped) for an
// unregistered name, or the JSON error.
func (r *Registry) Decode(name string, data []byte) (Typed, error) {
	t, ok := r.types[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownEventType, name)
	}
	v := reflect.New(t)
	if err := r.unmarshal(data, v.Interface()); err != nil {
		return nil, fmt.Errorf("eventstore: decode %s: %w", name, err)
	}
	return v.Elem().Interface().(Typed), nil
}

// Known reports whether name is registered.
func (r *Registry) Known(name string) bool { _, ok := r.types[name]; return ok }

// Metadata is the JSON metadata stored with every event (see ARCHITECTURE.md,
// Key lineage, for how each member is derived): who
// caused it, under which intent stream, the correlation and causation ids,
// the request behind it, when it happened (database clock or an injected
// clock, UTC) and the schema version of its data.
type Metadata struct {
	Actor  string `json:"actor,omitempty"`
	Intent string `json:"intent,omitempty"`
	// CorrelationID is the server-assigned id of the HTTP request that
	// caused the event's intent (never a client's id), kept by every event
	// that follows from it, whoever appends it.
	CorrelationID string `json:"correlation_id,omitempty"`
	// CausationID is the id of what caused the event: another event's id,
	// or the server-assigned id of the request that decided it.
	CausationID string `json:"causation_id,omitempty"`
	// RequestID is the server-assigned id of the HTTP request that caused
	// the event: the one that appended it, or for an event that follows
	// from another, that event's RequestID. ClientRequestID is that
	// request's own X-Request-Id when the client sent a valid one.
	RequestID       string `json:"request_id,omitempty"`
	ClientRequestID string `json:"client_request_id,omitempty"`
	// ObservedBy names who observed a provider fact the event records:
	// "send" (the answer to the service's own call), "reconciliation" (a
	// look-up of the attempt at the provider) or "webhook" (a provider
	// notification, fetched). Empty for every other event, and for facts
	// recorded before it existed.
	ObservedBy string `json:"observed_by,omitempty"`
	// Traceparent and Tracestate are the W3C trace context
	// (https://www.w3.org/TR/trace-context/#traceparent-header) of the
	// span the event was decided in: whoever acts on the event later
	// continues that trace, and the relay publishes them as the NATS
	// headers of the same names. Empty when the event was decided outside
	// any trace.
	Traceparent   string    `json:"traceparent,omitempty"`
	Tracestate    string    `json:"tracestate,omitempty"`
	OccurredAt    time.Time `json:"occurred_at"`
	SchemaVersion int       `json:"schema_version"`
}

// DecodeMetadata parses an event's metadata with encoding/json; empty
// input gives the zero Metadata. It returns the decoder's error for
// anything but a JSON object of Metadata's members.
func DecodeMetadata(b []byte) (Metadata, error) { return decodeMetadata(json.Unmarshal, b) }

// DecodeMetadata is the package's DecodeMetadata with r's decoder (see
// DecodingWith): the zero Metadata for empty input, else the decoder's
// result and error.
func (r *Registry) DecodeMetadata(b []byte) (Metadata, error) {
	return decodeMetadata(r.unmarshal, b)
}

func decodeMetadata(unmarshal func(data []byte, v any) error, b []byte) (Metadata, error) {
	var m Metadata
	if len(b) == 0 {
		return m, nil
	}
	err := unmarshal(b, &m)
	return m, err
}

// Encode returns the EventData of e with id and metadata m.
func Encode(id string, e Typed, m Metadata) (EventData, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return EventData{}, fmt.Errorf("eventstore: encode %s: %w", e.EventType(), err)
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return EventData{}, fmt.Errorf("eventstore: encode metadata: %w", err)
	}
	return EventData{ID: id, Type: e.EventType(), Data: data, Metadata: meta}, nil
}
