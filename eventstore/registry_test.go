package eventstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/eventstore"
)

// Event types of the registry tests.

type regSeatsHeld struct {
	ShowID    string            `json:"show_id"`
	Quantity  int               `json:"quantity"`
	ExpiresAt time.Time         `json:"expires_at"`
	Tags      []string          `json:"tags,omitempty"`
	Extra     map[string]string `json:"extra,omitempty"`
	Private   *regPrivate       `json:"private,omitempty"`
}

type regPrivate struct {
	Token string `json:"token"`
}

func (regSeatsHeld) EventType() string { return "SeatsHeld" }

type regReleased struct {
	ShowID string `json:"show_id"`
}

func (regReleased) EventType() string { return "SeatsReleased" }

// regImpostor has the name of regSeatsHeld: registering both is a bug.
type regImpostor struct{}

func (regImpostor) EventType() string { return "SeatsHeld" }

// regBroken cannot be encoded to JSON.
type regBroken struct {
	C chan int `json:"c"`
}

func (regBroken) EventType() string { return "Broken" }

const regEventID = "0190f5a1-02b4-7e8c-8f1d-2a3b4c5d6e7f"

func TestRegistryRoundTrip(t *testing.T) {
	t.Parallel()
	reg := eventstore.NewRegistry(regSeatsHeld{}, regReleased{})
	tests := []struct {
		name  string
		event eventstore.Typed
	}{
		{"A fully populated event round-trips.", regSeatsHeld{ShowID: "show-1", Quantity: 3,
			ExpiresAt: time.Date(2030, 5, 20, 10, 15, 0, 123456000, time.UTC), Tags: []string{"a", "b"},
			Extra: map[string]string{"k": "v"}, Private: &regPrivate{Token: "tok"}}},
		{"An event with its optional fields empty round-trips.", regSeatsHeld{ShowID: "show-1", Quantity: 1,
			ExpiresAt: time.Date(2030, 5, 20, 10, 15, 0, 0, time.UTC)}},
		{"A zero event round-trips.", regSeatsHeld{}},
		{"Another registered type round-trips as its own type.", regReleased{ShowID: "show-2"}},
		{"Non-ASCII and HTML characters round-trip.", regReleased{ShowID: "Café <&> \u2028"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ed, err := eventstore.Encode(regEventID, tt.event, eventstore.Metadata{})
			if err != nil {
				t.Fatalf("Encode(%v) error = %v", tt.event, err)
			}
			if ed.ID != regEventID || ed.Type != tt.event.EventType() {
				t.Errorf("Encode(...) = id %q type %q, want id %q type %q", ed.ID, ed.Type, regEventID, tt.event.EventType())
			}
			got, err := reg.Decode(ed.Type, ed.Data)
			if err != nil {
				t.Fatalf("Decode(%q, %s) error = %v", ed.Type, ed.Data, err)
			}
			if diff := cmp.Diff(tt.event, got); diff != "" {
				t.Errorf("Decode(Encode(...)) mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegistryDecodeReturnsTheRegisteredValueType(t *testing.T) {
	t.Parallel()
	reg := eventstore.NewRegistry(regSeatsHeld{})
	got, err := reg.Decode("SeatsHeld", []byte(`{"show_id":"s","quantity":2}`))
	if err != nil {
		t.Fatalf("Decode(...) error = %v", err)
	}
	if _, ok := got.(regSeatsHeld); !ok {
		t.Errorf("Decode(...) = %T, want regSeatsHeld (a value, not a pointer)", got)
	}
}

func TestRegistryDecodeErrors(t *testing.T) {
	t.Parallel()
	reg := eventstore.NewRegistry(regSeatsHeld{}, regReleased{})
	tests := []struct {
		name        string
		typ         string
		data        string
		wantUnknown bool
		wantText    string
	}{
		{name: "An unregistered type is unknown.", typ: "OrderPlaced", data: `{}`, wantUnknown: true, wantText: `"OrderPlaced"`},
		{name: "Type names are case-sensitive.", typ: "seatsheld", data: `{}`, wantUnknown: true, wantText: `"seatsheld"`},
		{name: "An empty type name is unknown.", typ: "", data: `{}`, wantUnknown: true},
		{name: "Malformed JSON is a decode error, not an unknown type.", typ: "SeatsHeld", data: `{"show_id":`, wantText: "decode SeatsHeld"},
		{name: "A field of the wrong JSON type is a decode error.", typ: "SeatsHeld", data: `{"quantity":"two"}`, wantText: "decode SeatsHeld"},
		{name: "A JSON array is a decode error.", typ: "SeatsReleased", data: `[]`, wantText: "decode SeatsReleased"},
		{name: "Empty data is a decode error.", typ: "SeatsReleased", data: ``, wantText: "decode SeatsReleased"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := reg.Decode(tt.typ, []byte(tt.data))
			if err == nil {
				t.Fatalf("Decode(%q, %q) = %v, nil; want an error", tt.typ, tt.data, got)
			}
			if got != nil {
				t.Errorf("Decode(%q, %q) = %v, want nil with the error", tt.typ, tt.data, got)
			}
			if is := errors.Is(err, eventstore.ErrUnknownEventType); is != tt.wantUnknown {
				t.Errorf("errors.Is(Decode(%q, ...) error %q, ErrUnknownEventType) = %t, want %t", tt.typ, err, is, tt.wantUnknown)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Decode(%q, ...) error = %q, want it to contain %q", tt.typ, err, tt.wantText)
			}
		})
	}
}

func TestRegistryKnown(t *testing.T) {
	t.Parallel()
	reg := eventstore.NewRegistry(regSeatsHeld{}, regReleased{})
	for name, want := range map[string]bool{"SeatsHeld": true, "SeatsReleased": true, "OrderPlaced": false, "": false, "seatsheld": false} {
		if got := reg.Known(name); got != want {
			t.Errorf("Known(%q) = %t, want %t", name, got, want)
		}
	}
	if empty := eventstore.NewRegistry(); empty.Known("SeatsHeld") {
		t.Errorf("NewRegistry().Known(%q) = true, want false", "SeatsHeld")
	}
}

func TestRegistryDuplicateRegistrationPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events []eventstore.Typed
	}{
		{"Two types with one name panic.", []eventstore.Typed{regSeatsHeld{}, regReleased{}, regImpostor{}}},
		{"One type registered twice panics.", []eventstore.Typed{regSeatsHeld{}, regSeatsHeld{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				r := recover()
				if r == nil {
					t.Fatalf("NewRegistry(%v) did not panic, want a panic naming SeatsHeld", tt.events)
				}
				if msg := fmt.Sprint(r); !strings.Contains(msg, "SeatsHeld") {
					t.Errorf("NewRegistry(...) panicked with %q, want it to name SeatsHeld", msg)
				}
			}()
			eventstore.NewRegistry(tt.events...)
		})
	}
}

func TestRegistryEncodeError(t *testing.T) {
	t.Parallel()
	_, err := eventstore.Encode(regEventID, regBroken{C: make(chan int)}, eventstore.Metadata{})
	if err == nil || !strings.Contains(err.Error(), "encode Broken") {
		t.Errorf("Encode(unencodable) error = %v, want an error naming Broken", err)
	}
}

func TestRegistryMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	occurred := time.Date(2030, 5, 20, 10, 3, 7, 654321000, time.UTC)
	tests := []struct {
		name     string
		meta     eventstore.Metadata
		wantJSON string
	}{
		{name: "Full metadata round-trips.",
			meta: eventstore.Metadata{Actor: "user-2f8e1c", Intent: "intent-abc", CorrelationID: "0197c000-0000-7000-8000-0000000000c1",
				CausationID: regEventID, RequestID: "0197c000-0000-7000-8000-0000000000c2", ClientRequestID: "checkout-42",
				ObservedBy: "webhook", OccurredAt: occurred, SchemaVersion: 1},
			wantJSON: `{"actor":"user-2f8e1c","intent":"intent-abc","correlation_id":"0197c000-0000-7000-8000-0000000000c1","causation_id":"` + regEventID +
				`","request_id":"0197c000-0000-7000-8000-0000000000c2","client_request_id":"checkout-42","observed_by":"webhook",` +
				`"occurred_at":"2030-05-20T10:03:07.654321Z","schema_version":1}`},
		{name: "Metadata without actor, intent, correlation or causation omits them.",
			meta:     eventstore.Metadata{OccurredAt: occurred, SchemaVersion: 1},
			wantJSON: `{"occurred_at":"2030-05-20T10:03:07.654321Z","schema_version":1}`},
		{name: "Zero metadata round-trips.",
			meta:     eventstore.Metadata{},
			wantJSON: `{"occurred_at":"0001-01-01T00:00:00Z","schema_version":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ed, err := eventstore.Encode(regEventID, regReleased{ShowID: "s"}, tt.meta)
			if err != nil {
				t.Fatalf("Encode(...) error = %v", err)
			}
			if string(ed.Metadata) != tt.wantJSON {
				t.Errorf("Encode(...).Metadata = %s, want %s", ed.Metadata, tt.wantJSON)
			}
			got, err := eventstore.DecodeMetadata(ed.Metadata)
			if err != nil {
				t.Fatalf("DecodeMetadata(%s) error = %v", ed.Metadata, err)
			}
			if diff := cmp.Diff(tt.meta, got); diff != "" {
				t.Errorf("DecodeMetadata(Encode(...).Metadata) mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegistryDecodeMetadata(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    eventstore.Metadata
		wantErr bool
	}{
		{name: "Empty metadata is the zero Metadata.", in: ""},
		{name: "An empty object is the zero Metadata.", in: "{}"},
		{name: "Unknown fields are ignored.", in: `{"actor":"a","future_field":true}`, want: eventstore.Metadata{Actor: "a"}},
		{name: "A time with an offset keeps its instant.", in: `{"occurred_at":"2030-05-20T12:03:07+02:00"}`,
			want: eventstore.Metadata{OccurredAt: time.Date(2030, 5, 20, 10, 3, 7, 0, time.UTC)}},
		{name: "Malformed metadata is an error.", in: `{"actor":`, wantErr: true},
		{name: "A malformed time is an error.", in: `{"occurred_at":"yesterday"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := eventstore.DecodeMetadata([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("DecodeMetadata(%q) error = %v, want error %t", tt.in, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecodeMetadata(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// TestRegistryConcurrentDecode exercises the documented concurrency safety
// under -race.
func TestRegistryConcurrentDecode(t *testing.T) {
	t.Parallel()
	reg := eventstore.NewRegistry(regSeatsHeld{}, regReleased{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				want := regReleased{ShowID: fmt.Sprintf("show-%d-%d", i, j)}
				ed, err := eventstore.Encode(regEventID, want, eventstore.Metadata{})
				if err != nil {
					t.Errorf("Encode(...) error = %v", err)
					return
				}
				got, err := reg.Decode(ed.Type, ed.Data)
				if err != nil || got != want {
					t.Errorf("Decode(...) = %v, %v; want %v", got, err, want)
					return
				}
				reg.Known("SeatsHeld")
			}
		}()
	}
	wg.Wait()
}

// TestDecodingWith: a registry decodes with the Unmarshal given to
// DecodingWith, and the one it was copied from still with encoding/json.
func TestDecodingWith(t *testing.T) {
	base := eventstore.NewRegistry(regReleased{})
	var calls int
	counted := base.DecodingWith(func(data []byte, v any) error {
		calls++
		return json.Unmarshal(data, v)
	})
	ev, err := counted.Decode("SeatsReleased", []byte(`{"show_id":"s1"}`))
	if err != nil || ev != (regReleased{ShowID: "s1"}) || calls != 1 {
		t.Fatalf("DecodingWith's Decode = %#v, %v after %d calls of its Unmarshal; want {s1}, nil after 1", ev, err, calls)
	}
	if _, err := base.Decode("SeatsReleased", []byte(`{"show_id":"s2"}`)); err != nil || calls != 1 {
		t.Fatalf("the original registry's Decode = %v and called the copy's Unmarshal (%d calls in all, want 1)", err, calls)
	}
	if _, err := counted.Decode("Nope", nil); !errors.Is(err, eventstore.ErrUnknownEventType) || calls != 1 {
		t.Fatalf("Decode of an unknown type = %v after %d calls; want ErrUnknownEventType without decoding", err, calls)
	}
	md, err := counted.DecodeMetadata([]byte(`{"actor":"a"}`))
	if err != nil || md.Actor != "a" || calls != 2 {
		t.Fatalf("DecodingWith's DecodeMetadata = %+v, %v after %d calls of its Unmarshal; want actor a, nil after 2", md, err, calls)
	}
	if md, err := counted.DecodeMetadata(nil); err != nil || md != (eventstore.Metadata{}) || calls != 2 {
		t.Fatalf("DecodeMetadata(nil) = %+v, %v after %d calls; want the zero Metadata without decoding", md, err, calls)
	}
	if _, err := base.DecodeMetadata([]byte(`{"actor":`)); err == nil || calls != 2 {
		t.Fatalf("the original registry's DecodeMetadata of malformed input = nil error or called the copy's Unmarshal (%d calls)", calls)
	}
}
