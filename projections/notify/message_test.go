package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"

	"github.com/retrysafe/booking/eventstore"
)

// goldenMetadata is the metadata of the benchmark's and the fuzz seeds'
// events, as the service writes it.
const goldenMetadata = `{"actor":"user-2f8e1c","intent":"intent-9c1d6e0a4f2b8375e6d1c0b9a8f7e6d5c4b3a29181706f5e4d3c2b1a09f8e7d6",` +
	`"correlation_id":"0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a41","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",` +
	`"occurred_at":"2026-12-06T16:00:00.123456Z","schema_version":1}`

// goldenEvents returns an event per golden file of domain/testdata/events
// (every type and schema version), on a stream of its type, with
// goldenMetadata.
func goldenEvents(tb testing.TB) []eventstore.RecordedEvent {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "domain", "testdata", "events", "*.json"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("golden events: %v, %v", files, err)
	}
	events := make([]eventstore.RecordedEvent, 0, len(files))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		typ, _, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".json"), ".")
		stream, _ := streamOf(typ)
		events = append(events, eventstore.RecordedEvent{
			ID: fmt.Sprintf("0190f5a1-5d20-7a66-b3c4-%012d", i), Stream: stream, Type: typ, Revision: uint64(i % 12),
			Position: eventstore.Position{Commit: 48_213_977 + uint64(i), Prepare: 1_204_518 + uint64(i)},
			Data:     data, Metadata: []byte(goldenMetadata),
			RecordedAt: time.Date(2026, 12, 6, 16, 0, 0, 123_999_000, time.UTC),
		})
	}
	return events
}

// BenchmarkNewMessage measures NewMessage, the relay's work per event, over
// the golden events (every type and schema version, published or not) with
// the service's metadata; ns/op and allocs/op are per event.
func BenchmarkNewMessage(b *testing.B) {
	events := goldenEvents(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := NewMessage(events[i%len(events)]); err != nil {
			b.Fatal(err)
		}
	}
}

// refNewMessage is NewMessage written on encoding/json alone: the
// reference FuzzNewMessage holds NewMessage to, byte for byte.
func refNewMessage(e eventstore.RecordedEvent) (msg *nats.Msg, ok bool, err error) {
	subject, ok, err := refSubject(e.Stream, e.Type)
	if !ok || err != nil {
		return nil, ok, err
	}
	data, err := refPublicData(e.Type, e.Data)
	if err != nil {
		return nil, true, fmt.Errorf("notify: event %s (%s@%d): %w", e.ID, e.Stream, e.Revision, err)
	}
	occurred, correlation, traceparent, tracestate := e.RecordedAt, "", "", ""
	var md eventstore.Metadata
	if len(e.Metadata) == 0 || json.Unmarshal(e.Metadata, &md) == nil {
		if !md.OccurredAt.IsZero() {
			occurred = md.OccurredAt
		}
		correlation, traceparent, tracestate = md.CorrelationID, md.Traceparent, md.Tracestate
	}
	pos := fmt.Sprintf("%d/%d", e.Position.Commit, e.Position.Prepare)
	body, err := json.Marshal(Payload{
		ID: e.ID, Type: e.Type, Stream: e.Stream, Revision: e.Revision,
		Position: pos, OccurredAt: occurred.UTC(), Data: data,
	})
	if err != nil {
		return nil, true, fmt.Errorf("notify: encode payload of event %s: %w", e.ID, err)
	}
	h := make(nats.Header, 9)
	h[HeaderMsgID] = []string{e.ID}
	h[HeaderStream] = []string{e.Stream}
	h[HeaderRevision] = []string{strconv.FormatUint(e.Revision, 10)}
	h[HeaderPosition] = []string{pos}
	h[HeaderEventType] = []string{e.Type}
	if correlation != "" {
		h[HeaderRequestID] = []string{correlation}
	}
	if traceparent != "" {
		h[HeaderTraceparent] = []string{traceparent}
		if tracestate != "" {
			h[HeaderTracestate] = []string{tracestate}
		}
	}
	return &nats.Msg{Subject: subject, Header: h, Data: body}, true, nil
}

// refSubject is Subject on refSnakeCase.
func refSubject(stream, eventType string) (subject string, ok bool, err error) {
	category, id, ok := Category(stream)
	if !ok {
		return "", false, nil
	}
	event := refSnakeCase(eventType)
	if !refValidToken(id) || !refValidToken(event) {
		return "", true, fmt.Errorf("notify: stream %q, event type %q: not a valid subject token", stream, eventType)
	}
	return SubjectPrefix + category + "." + id + "." + event, true, nil
}

func refValidToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r == '.' || r == '*' || r == '>' || unicode.IsSpace(r)
	})
}

// refSnakeCase is SnakeCase, rune by rune.
func refSnakeCase(name string) string {
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

// refPublicData is PublicData through a map[string]json.RawMessage.
func refPublicData(eventType string, data []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return json.RawMessage("{}"), nil
	}
	internal := internalMembers[eventType]
	if len(internal) == 0 && !bytes.Contains(data, privateKey) {
		return data, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("notify: %s data must be pruned (private or internal members) but is not a JSON object: %w", eventType, err)
	}
	delete(m, "private")
	for _, k := range internal {
		delete(m, k)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("notify: re-encode event data: %w", err)
	}
	return out, nil
}

// sameMessage fails t unless NewMessage(e) is refNewMessage(e): the same
// ok, an error where it gives one (the JSON decoder's own words may
// differ), the same subject, headers and payload bytes.
func sameMessage(t *testing.T, e eventstore.RecordedEvent) {
	t.Helper()
	want, wantOK, wantErr := refNewMessage(e)
	got, ok, err := NewMessage(e)
	if ok != wantOK || (err == nil) != (wantErr == nil) {
		t.Fatalf("NewMessage(%+v) = ok %v, error %v; reference: ok %v, error %v", e, ok, err, wantOK, wantErr)
	}
	if (got == nil) != (want == nil) {
		t.Fatalf("NewMessage(%+v) = %v; reference: %v", e, got, want)
	}
	if got == nil {
		return
	}
	if got.Subject != want.Subject || !reflect.DeepEqual(got.Header, want.Header) || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("NewMessage(%+v) =\n subject %q\n header %v\n data %s\nreference:\n subject %q\n header %v\n data %s",
			e, got.Subject, got.Header, got.Data, want.Subject, want.Header, want.Data)
	}
}

// FuzzNewMessage: NewMessage gives what refNewMessage gives (the same ok,
// an error where it gives one, the same subject, headers and payload
// bytes) for any event
// ID, stream, type, data, metadata, revision, position and recording
// time. The golden events (as stored, then with crafted data and metadata:
// white space, escapes, HTML characters, U+2028, repeated or unknown
// members, times encoding/json refuses to write) are the seeds.
func FuzzNewMessage(f *testing.F) {
	add := func(e eventstore.RecordedEvent) {
		f.Add(e.ID, e.Stream, e.Type, e.Data, e.Metadata, e.Revision, e.Position.Commit, e.Position.Prepare, e.RecordedAt.Unix())
	}
	events := goldenEvents(f)
	for _, e := range events {
		add(e)
	}
	order := events[0]
	for _, e := range events {
		if e.Type == "OrderPlaced" {
			order = e
		}
	}
	for _, data := range fuzzDataSeeds {
		for _, typ := range []string{"OrderPlaced", "OrderConfirmed", "PaymentAttemptStarted"} {
			e := order
			e.Type, e.Data = typ, []byte(data)
			add(e)
		}
	}
	for _, md := range fuzzMetadataSeeds {
		e := order
		e.Metadata = []byte(md)
		add(e)
	}
	for _, id := range []string{"", "a<b", "é", "\xff", "a\u2028b", `"`, "\x7f"} {
		e := order
		e.ID, e.Stream = id, "order-"+id
		add(e)
	}
	f.Fuzz(func(t *testing.T, id, stream, typ string, data, metadata []byte, revision, commit, prepare uint64, recorded int64) {
		sameMessage(t, eventstore.RecordedEvent{
			ID: id, Stream: stream, Type: typ, Revision: revision,
			Position: eventstore.Position{Commit: commit, Prepare: prepare},
			Data:     data, Metadata: metadata, RecordedAt: time.Unix(recorded, recorded%1e9),
		})
	})
}

// fuzzDataSeeds are event data as the service writes it and otherwise
// (white space, escapes, HTML characters, repeated members, invalid JSON).
var fuzzDataSeeds = []string{
	``, ` `, `{}`, `null`, `[]`, `"private"`, `["private"]`, `{"a":1} `, ` {"a":1}`, `{"a": 1}`,
	`{"private":1,"a":2,"intent":3}`, `{"private":1,"private":2,"a":3}`, `{"a":1,"a":2,"private":3}`,
	`{"b":"<","private":1}`, `{"b":"\u003c","private":1}`, "{\"b\":\"\u2028\",\"private\":1}", `{"b":"&"}`,
	`{"é":1,"private":2}`, `{"\u00e9":1,"private":2}`, `{"A":1,"a":2,"B":3,"private":{}}`, `{"Private":1,"owner":2}`,
	`{"a":[1,2.5e-3,-0,true,false,null,{"x":"y"}],"private":"\"private\""}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`,
	`{"a":"\x01"}`, `{"a":"\ud800"}`, `{"a":"\x"}`, "{\"a\":\"\xff\"}", `{"owner":"o","lease_until":"t","order_id":"x"}`,
	strings.Repeat("[", 600) + strings.Repeat("]", 600), `{"a":1}{"b":2}`, `tru`, `-`, `1e+`, `"\u00zz"`,
	`{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, `{"priv\u0061te":1,"a":2}`, `{"a":1,"\u0061":2,"private":1}`,
	`{"a":"\u0000","private":1}`, `{"a":1e999999,"private":1}`, `{"a":"x","private":1,}`, `{"a":"\q","private":1}`,
}

// fuzzMetadataSeeds are metadata as the service writes it and otherwise.
var fuzzMetadataSeeds = []string{
	``, ` `, `null`, `{}`, `[]`, `{"occurred_at":"0000-01-01T00:30:00+01:00"}`, `{"occurred_at":"9999-12-31T23:30:00-01:00"}`,
	`{"occurred_at":null}`, `{"occurred_at":"2030-05-20T10:03:07Z","occurred_at":"2031-05-20T10:03:07Z"}`,
	`{"occurred_at":"2030-05-20 10:03:07Z"}`, `{"occurred_at":1}`, `{"Correlation_ID":"c"}`, `{"correlation_id":"c","future":1}`,
	`{"correlation_id":"\u0063"}`, `{"correlation_id":"<"}`, `{"correlation_id":"é"}`, `{"correlation_id":5}`,
	`{"traceparent":"t","tracestate":"s"}`, `{"tracestate":"s"}`, `{"traceparent":"t","tracestate":"a=<b>"}`,
	`{"actor":1}`, `{"actor":null}`, `{"schema_version":"1"}`, `{"schema_version":1.0}`, `{"schema_version":-0}`,
	`{"schema_version":99999999999999999999}`, `{"schema_version":null}`, `{ "correlation_id":"c"}`, `{"correlation_id":"c"} `,
	`{"correlation_id":"c","correlation_id":""}`, `{"correlation_id":"c"`, `{"ſchema_version":"x"}`,
	`{"correlation\u005fid":"c"}`, `{"traceparent":"t","traceſtate":"s"}`, `{"correlation_id":"a","CORRELATION_ID":"b"}`,
	`{"correlation_id":"c","future":tru}`, `{"correlation_id":"c","future":"\q"}`, `{"correlation_id":"c","future":[1,]}`,
	`{"correlation_id":"c","future":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, `{"correlation_id":"a\u0000b"}`,
	"{\"correlation_id\":\"a\xffb\"}", `{"correlation_id":"\ud800"}`, `{"correlation_id":"c","schema_version":1e2}`,
	`{"occurred_at":"2030-05-20T10:03:07+01"}`, `{"occurred_at":"2030-05-20T10:03:07.1234567890Z"}`, `{"occurred_at":"0000-12-31T23:00:00-01:00"}`,
}
