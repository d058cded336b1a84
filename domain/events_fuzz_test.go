package domain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// FuzzDecodeStoredEvent: decoding stored event data (eventstore registry,
// as every reader of the log does) never panics, refuses an unknown type
// with ErrUnknownEventType, and returns the registered type; what it
// decodes re-encodes to bytes that decode to the same event (an empty map
// or slice being the same as none) and encode to the same bytes (one step
// to a fixed point); folding the event into every
// aggregate does not panic; stored metadata decodes the same way. Event
// data decodes exactly as encoding/json's Unmarshal decodes it (the
// service's registry uses a faster drop-in): the same value, or an error
// from both (only the error where a member is repeated, which RFC 8259
// leaves to the parser). The golden files of every event type and schema version, and
// decodeSeeds, are the seeds.
func FuzzDecodeStoredEvent(f *testing.F) {
	types := domain.EventTypes()
	addDecodeSeeds(f, types)
	reg := commands.NewRegistry() // every domain event type, as `booking serve` builds it
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		name := "NoSuchEvent"
		if int(which) < len(types) {
			name = types[which].EventType()
		}
		ev, err := reg.Decode(name, data)
		if int(which) < len(types) {
			agreeWithEncodingJSON(t, types[which], data, ev, err)
		}
		switch {
		case int(which) >= len(types):
			if !errors.Is(err, eventstore.ErrUnknownEventType) {
				t.Fatalf("Decode(%q) error = %v, want ErrUnknownEventType", name, err)
			}
		case err == nil:
			if ev.EventType() != name {
				t.Fatalf("Decode(%q, %q) = a %s", name, data, ev.EventType())
			}
			ed, err := eventstore.Encode("id", ev, eventstore.Metadata{})
			var unwritable *json.MarshalerError // a time encoding/json cannot write: never stored
			if errors.As(err, &unwritable) {
				return
			} else if err != nil {
				t.Fatalf("Encode(Decode(%q, %q)) error = %v", name, data, err)
			}
			again, err := reg.Decode(name, ed.Data)
			if err != nil {
				t.Fatalf("Decode(%q, %s), the re-encoding of %q, error = %v", name, ed.Data, data, err)
			}
			// An empty map or slice and none are one value here: omitempty
			// drops both, and the service never writes an empty one.
			if diff := cmp.Diff(ev, again, cmpopts.EquateEmpty(), dynamicByDeepEqual); diff != "" {
				t.Fatalf("Decode(%q, %q) and its re-encoding differ (-first +again):\n%s", name, data, diff)
			}
			ed2, err := eventstore.Encode("id", again, eventstore.Metadata{})
			if err != nil || !bytes.Equal(ed.Data, ed2.Data) {
				t.Fatalf("encodings of one event differ: %s then %s (%v)", ed.Data, ed2.Data, err)
			}
			de := ev.(domain.Event)
			var show domain.Show
			var res domain.Reservation
			var claim domain.Claim
			var order domain.Order
			var intent domain.Intent
			for range 2 { // an event applied twice: a redelivery
				show.Apply(de)
				res.Apply(de)
				claim.Apply(de)
				order.Apply(de)
				intent.Apply(de)
			}
		}

		m, err := eventstore.DecodeMetadata(data)
		if err != nil {
			return
		}
		ed, err := eventstore.Encode("id", domain.SeatsReleased{}, m)
		if err != nil {
			t.Fatalf("Encode(metadata %+v) error = %v", m, err)
		}
		m2, err := eventstore.DecodeMetadata(ed.Metadata)
		if err != nil {
			t.Fatalf("DecodeMetadata(%s), the re-encoding of %q, error = %v", ed.Metadata, data, err)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("DecodeMetadata(%q) and its re-encoding differ (-first +again):\n%s", data, diff)
		}
	})
}

// agreeWithEncodingJSON fails t unless (ev, err), the registry's decoding
// of data as the type of like, is what encoding/json's Unmarshal gives:
// both fail, or both give the same value.
func agreeWithEncodingJSON(t *testing.T, like domain.Event, data []byte, ev eventstore.Typed, err error) {
	t.Helper()
	v := reflect.New(reflect.TypeOf(like))
	stdErr := json.Unmarshal(data, v.Interface())
	if (err == nil) != (stdErr == nil) {
		t.Fatalf("Decode(%q, %q) error = %v, encoding/json's = %v", like.EventType(), data, err, stdErr)
	}
	if err != nil || repeatsAMember(data) {
		return
	}
	if diff := cmp.Diff(v.Elem().Interface(), ev, dynamicByDeepEqual); diff != "" {
		t.Fatalf("Decode(%q, %q) differs from encoding/json's (-std +got):\n%s", like.EventType(), data, diff)
	}
}

// repeatsAMember reports whether data, read as JSON, has an object with two
// members of one name, as encoding/json matches names (case-insensitively).
// RFC 8259 (section 4) leaves what such an object means to the parser,
// and encoding/json never writes one: decoders may differ on it. Data that
// is not JSON reports false up to where it stops being JSON.
func repeatsAMember(data []byte) bool {
	type level struct {
		object, wantName bool
		names            map[string]bool
	}
	var stack []*level
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		name, isString := tok.(string)
		switch {
		case tok == json.Delim('{') || tok == json.Delim('['):
			if top != nil && top.object {
				top.wantName = true // after this value
			}
			stack = append(stack, &level{object: tok == json.Delim('{'), wantName: true, names: map[string]bool{}})
		case tok == json.Delim('}') || tok == json.Delim(']'):
			stack = stack[:len(stack)-1]
		case isString && top != nil && top.object && top.wantName:
			folded := strings.ToLower(strings.ToUpper(name))
			if top.names[folded] {
				return true
			}
			top.names[folded], top.wantName = true, false
		case top != nil && top.object:
			top.wantName = true // a scalar value
		}
	}
}

// dynamicByDeepEqual has cmp compare the values held in interfaces (the
// members of an IntentRecorded's command and private part) with
// reflect.DeepEqual, in time linear in the depth of nested arrays where
// cmp's own comparison takes time exponential in it (20 levels, a second).
// It is as strict: JSON gives no NaN, and an empty array or object and null
// stay apart, as they round-trip exactly. Two empty ones are left to
// cmpopts.EquateEmpty where it is given (cmp refuses two options on one
// pair).
var dynamicByDeepEqual = cmp.FilterPath(func(p cmp.Path) bool {
	return p.Last().Type().Kind() == reflect.Interface
}, cmp.FilterValues(func(a, b any) bool {
	return !isEmptyContainer(a) || !isEmptyContainer(b)
}, cmp.Comparer(func(a, b any) bool { return reflect.DeepEqual(a, b) })))

// isEmptyContainer reports whether v is a slice or map of no elements.
func isEmptyContainer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.IsValid() && (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Map) && rv.Len() == 0
}

// addDecodeSeeds adds FuzzDecodeStoredEvent's seeds to f, by the index of
// their event type in types: the golden file of every event type and
// schema version (Name.json, Name.vN.json), a few literals and decodeSeeds.
func addDecodeSeeds(f *testing.F, types []domain.Event) {
	index := func(name string) (uint8, bool) {
		for i, e := range types {
			if e.EventType() == name {
				return uint8(i), true
			}
		}
		return 0, false
	}
	files, err := filepath.Glob(filepath.Join("testdata", "events", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(filepath.Base(file), ".json"), ".")
		if i, ok := index(name); ok {
			f.Add(i, raw)
		}
	}
	f.Add(uint8(255), []byte(`{}`))
	f.Add(uint8(0), []byte(`{"show_id":1}`))
	f.Add(uint8(1), []byte(`{"quantity":-5,"expires_at":"0001-01-01T00:00:00+14:00"}`))
	f.Add(uint8(0), []byte(`{"occurred_at":"2030-05-20T10:00:00.123456789+02:00","schema_version":1,"actor":"a"}`))
	for _, s := range decodeSeeds {
		i, ok := index(s.typ)
		if !ok {
			f.Fatalf("a seed of unknown event type %q", s.typ)
		}
		f.Add(i, []byte(s.data))
	}
}

// decodeSeeds are event data, by event type name, on the edges of JSON
// decoding; on each, the registry's decoding and encoding/json's agree
// (the same value, or an error from both).
var decodeSeeds = []struct{ typ, data string }{
	// Times encoding/json refuses (a '>' for a ':') and accepts (a one-digit
	// hour, a comma before the fraction); a decoder tried before disagreed
	// on both.
	{domain.TypePaymentAttemptStarted, `{"lease_until":"0000-01-10T00:00>00Z"}`},
	{domain.TypePaymentAttemptStarted, `{"lease_until":"0000-01-10T0:00:00,0Z"}`},
	// Keys: matched case-insensitively by Unicode simple folding (a Kelvin
	// sign is a k, a long s an s, a dotless i matches no i), escaped, repeated.
	{domain.TypeSeatsReleased, `{"SHOW_ID":"s","Reason":"r","qUANTITY":2}`},
	{domain.TypeRefundRequested, `{"\u212aey":"k","ORDER_ID":"o"}`},
	{domain.TypeIntentRejected, "{\"\u212aind\":\"k\"}"},
	{domain.TypeSeatsReleased, "{\"\u017fhow_id\":\"s\",\"show_\u0131d\":\"t\"}"},
	{domain.TypeSeatsReleased, `{"show\u005fid":"s","\u0071uantity":2,"reason\u0000":"r"}`},
	{domain.TypeSeatsReleased, `{"show_id":"a","SHOW_ID":"b","quantity":1,"quantity":2}`},
	{domain.TypeSeatsReleased, `{"SHOW_ID":"b","show_id":"a"}`},
	{domain.TypeOrderConfirmed, `{"tickets":[{"ID":"a"},{"id":"b","Id":"c"}]}`},
	{domain.TypeIntentRecorded, `{"canonicaX_version":1,"CANONICAL_VERSION":2,"key_sha256x":"x"}`},
	// Strings: invalid UTF-8 and lone surrogates (U+FFFD), control
	// characters (refused), escapes.
	{domain.TypeOrderFailed, "{\"order_id\":\"a\xffb\",\"reason\":\"\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82\"}"},
	{domain.TypeOrderFailed, `{"order_id":"\ud800\u0041","reason":"\ud83d\ude00\udc00\ud800\ud800"}`},
	{domain.TypeOrderFailed, "{\"order_id\":\"a\tb\"}"},
	{domain.TypeOrderFailed, `{"order_id":"\u0000\/\b","reason":"\q"}`},
	{domain.TypeIntentRecorded, "{\"command\":{\"\xff\":1,\"\ufffd\":2,\"\\ud800\":3,\"A\":4,\"a\":5}}"},
	// Numbers: into an int (exponents, fractions, beyond int64, strings,
	// null) and into any (beyond float64, -0, subnormals).
	{domain.TypeSeatsReleased, `{"quantity":1e2}`},
	{domain.TypeSeatsReleased, `{"quantity":1.0}`},
	{domain.TypeSeatsReleased, `{"quantity":-0,"reason":null}`},
	{domain.TypeSeatsReleased, `{"quantity":-9223372036854775808}`},
	{domain.TypeSeatsReleased, `{"quantity":9223372036854775808}`},
	{domain.TypeSeatsReleased, `{"quantity":"1"}`},
	{domain.TypeSeatsReleased, `{"quantity":01}`},
	{domain.TypeSeatsReleased, `{"quantity":2,"quantity":null}`},
	{domain.TypePaymentSucceeded, `{"amount":{"amount":1e0,"currency":"EUR"}}`},
	{domain.TypeIntentRecorded, `{"command":{"a":1e400}}`},
	{domain.TypeIntentRecorded, `{"command":{"a":-0,"b":4.9e-324,"c":1e-400,"d":12345678901234567890,"e":1.7976931348623157e308}}`},
	// Times: a leap second, an escape, a tenth fractional digit, odd
	// offsets and case, null after a time (which keeps it).
	{domain.TypeIntentResumed, `{"lease_until":"2030-05-20T23:59:60Z"}`},
	{domain.TypeIntentResumed, `{"lease_until":"2030-05-20T10:00:00\u005a"}`},
	{domain.TypeIntentResumed, `{"lease_until":"2030-05-20T10:00:00.1234567891-23:59"}`},
	{domain.TypeIntentResumed, `{"lease_until":"2030-05-20t10:00:00z"}`},
	{domain.TypeIntentResumed, `{"lease_until":" 2030-05-20T10:00:00Z"}`},
	{domain.TypeIntentResumed, `{"lease_until":"2030-05-20T10:00:00Z","lease_until":null}`},
	{domain.TypePaymentSecretsShredded, `{"shredded_at":"9999-12-31T23:59:59.999999999-23:59"}`},
	// Documents: empty, null, whitespace, trailing bytes, not an object,
	// nesting at encoding/json's limit of 10000 levels and past it.
	{domain.TypeSeatsReleased, ``},
	{domain.TypeSeatsReleased, `null`},
	{domain.TypeSeatsReleased, " \t\r\n{}\n "},
	{domain.TypeSeatsReleased, `{} x`},
	{domain.TypeSeatsReleased, `{}{}`},
	{domain.TypeSeatsReleased, `[]`},
	{domain.TypeSeatsReleased, "\ufeff{}"},
	{domain.TypeSeatsReleased, `{"a":1,}`},
	{domain.TypeSeatsReleased, `{"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`},
	{domain.TypeSeatsReleased, `{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`},
	// Unknown members: skipped, but only when valid JSON.
	{domain.TypeSeatsReleased, `{"x":{"a":[1,{"b":null}],"c":"\u00e9"},"quantity":1}`},
	{domain.TypeSeatsReleased, `{"x":[1,],"quantity":1}`},
	{domain.TypeSeatsReleased, `{"x":tru,"quantity":1}`},
	{domain.TypeSeatsReleased, `{"x":"\q","quantity":1}`},
	// Pointers, slices, maps and bytes: null, empty, the wrong kind, base64
	// edges, and a repeated member merging into what the first decoded.
	{domain.TypeOrderPlaced, `{"private":null}`},
	{domain.TypeOrderPlaced, `{"private":{}}`},
	{domain.TypeOrderPlaced, `{"private":[]}`},
	{domain.TypeOrderPlaced, `{"private":{"sealed_payment_token":[1,2,255]}}`},
	{domain.TypeOrderPlaced, `{"private":{"sealed_payment_token":[256]}}`},
	{domain.TypeOrderPlaced, `{"private":{"sealed_payment_token":"AQ"}}`},
	{domain.TypeOrderPlaced, `{"private":{"sealed_payment_token":"A\r\nQ=="}}`},
	{domain.TypeOrderPlaced, `{"private":{"sealed_payment_token":"_-8="}}`},
	{domain.TypeOrderPlaced, `{"private":{"payment_token":"a"},"private":{"sealed_payment_token":"AQ=="}}`},
	{domain.TypePaymentActionRequired, `{"private":{"sealed_action":null}}`},
	{domain.TypePaymentActionRequired, `{"private":{"sealed_action":"AQ=="},"private":{}}`},
	{domain.TypePaymentAttemptStarted, `{"amount":{"amount":1,"currency":"EUR"},"amount":{"amount":2}}`},
	{domain.TypeOrderConfirmed, `{"tickets":[]}`},
	{domain.TypeOrderConfirmed, `{"tickets":[null,{"id":null}]}`},
	{domain.TypeOrderConfirmed, `{"tickets":[{"id":"a"},{"id":"b"}],"tickets":[{}]}`},
	{domain.TypeOrderCancelled, `{"voided_tickets":["a","b"],"voided_tickets":["c",null]}`},
	{domain.TypeIntentRecorded, `{"command":{"a":1,"b":{"x":1}},"command":{"b":{"y":2}}}`},
	{domain.TypeIntentRecorded, `{"command":{"a":[]},"private":{"a":1},"private":{}}`},
	{domain.TypeIntentRecorded, `{"command":{"a":1},"command":null}`},
	// Arrays nested deep in a map: values compared in time linear in their depth.
	{domain.TypeIntentRecorded, `{"command":{"a":` + strings.Repeat("[", 64) + `1` + strings.Repeat("]", 64) + `},"private":{"b":[[[[[]]]]]}}`},
	// A member repeated, null the second time, for a []byte field:
	// encoding/json clears the field, goccy/go-json keeps the first value.
	// RFC 8259 leaves repeated names to the parser and encoding/json never
	// writes one, so agreeWithEncodingJSON compares only the error here.
	{domain.TypePaymentActionRequired, `{"private":{"sealed_action":"AQ==","sealed_action":null}}`},
	{domain.TypeOrderPlaced, `{"private":{"sealed_payment_token":"AQ=="},"private":{"sealed_payment_token":null}}`},
	{domain.TypePaymentAttemptStarted, `{"private":{"SEALED_REQUEST_BODY":"AQ==","sealed_request_body":null}}`},
	// An offset beyond ±23:59 decodes, but encoding/json cannot write it:
	// no stored event holds one.
	{domain.TypeIntentResumed, `{"lease_until":"2030-05-20T10:00:00+24:00"}`},
}

// TestRepeatsAMember: repeated names are found at any depth, as
// encoding/json matches them (case-insensitively), and only in objects.
func TestRepeatsAMember(t *testing.T) {
	for data, want := range map[string]bool{
		`{"a":1,"b":2}`:                   false,
		`{"a":1,"a":2}`:                   true,
		`{"a":1,"A":2}`:                   true,
		`{"a":{"b":1},"c":{"b":2}}`:       false,
		`{"a":{"b":1,"b":null}}`:          true,
		`{"a":[{"b":1},{"b":2}],"c":"a"}`: false,
		`{"a":[1,{"a":1}],"a":2}`:         true,
		`["a","a"]`:                       false,
		`{"a":"b","b":"a"}`:               false,
		`{"a":1,`:                         false,
	} {
		if got := repeatsAMember([]byte(data)); got != want {
			t.Errorf("repeatsAMember(%s) = %v, want %v", data, got, want)
		}
	}
}
