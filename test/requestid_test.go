package test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/projections/notify"
)

// logLines returns the JSON lines of booking serve's output whose
// request_id is id.
func (s *server) logLines(id string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s.logs.String(), "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) == nil && line["request_id"] == id {
			out = append(out, line)
		}
	}
	return out
}

// correlationOf returns the correlation_id of an event's metadata.
func correlationOf(t testing.TB, e eventstore.RecordedEvent) string {
	t.Helper()
	m, err := eventstore.DecodeMetadata(e.Metadata)
	if err != nil {
		t.Fatalf("%s %s@%d: metadata: %v", e.Type, e.Stream, e.Revision, err)
	}
	return m.CorrelationID
}

// natsByID returns the messages of stream BOOKING by Nats-Msg-Id.
func natsByID(t testing.TB, js jetstream.JetStream) map[string]*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, state := bookingStream(ctx, t, js)
	out := map[string]*jetstream.RawStreamMsg{}
	for seq := state.FirstSeq; seq <= state.LastSeq && state.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("NATS: message %d: %v", seq, err)
		}
		out[m.Header.Get(notify.HeaderMsgID)] = m
	}
	return out
}

// TestRequestID_EndToEnd: one order request with a client-chosen
// X-Request-Id. The answer echoes it; its log lines carry it as request_id
// (the access line and the commands layer's "intent recorded", logged with
// the request's context); every event the request caused — its intent, the
// order claim, the order stream and the reservation's follow-up, whether
// appended inline or by the process manager — has it as correlation_id; and
// every NATS message of those events carries it in Booking-Request-Id, next
// to Nats-Msg-Id. Webhooks are held, so no other request records a payment
// fact of the order. A request without an id gets a new UUIDv7; an id of
// 129 characters, or one with a space or a non-ASCII character, is replaced
// by a new UUIDv7; 128 visible ASCII characters are accepted as they are.
func TestRequestID_EndToEnd(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{Env: map[string]string{"BOOKING_LOG_FORMAT": "json", "BOOKING_LOG_LEVEL": "debug"}}, 2)
	s.pauseWebhooks(t)
	rid := "e2e-order-" + uuid.NewString()
	c := orderCall(tokAlice, newKey(), res, "tok_visa")
	c.Header = map[string]string{"X-Request-Id": rid}
	r := s.doCall(t, c)
	wantStatus(t, r, http.StatusCreated)
	if got := r.Header.Get("X-Request-Id"); got != rid {
		t.Errorf("X-Request-Id = %q, want %q", got, rid)
	}
	orderID := r.str("id")
	s.settle(t)

	// Logs: the access line and the commands layer's line of this request.
	var access, recorded map[string]any
	if !eventually(30*time.Second, func() bool {
		for _, l := range s.logLines(rid) {
			switch l["msg"] {
			case "http request":
				access = l
			case "intent recorded":
				recorded = l
			}
		}
		return access != nil && recorded != nil
	}) {
		t.Fatalf("log lines with request_id %s: access %v, intent recorded %v; want both:\n%s", rid, access, recorded, tail(s.logs.String(), 6000))
	}
	if access["route"] != "/v1/orders" || access["status"] != 201.0 || access["actor"] != "alice" {
		t.Errorf("access line = %v, want route /v1/orders, status 201, actor alice", access)
	}
	if recorded["operation"] != "POST /v1/orders" || recorded["target_id"] != orderID {
		t.Errorf("intent recorded line = %v, want operation POST /v1/orders, target_id %s", recorded, orderID)
	}
	for _, l := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(l, rid) {
			var line map[string]any
			if json.Unmarshal([]byte(l), &line) != nil || line["request_id"] != rid {
				t.Errorf("a log line names the request id outside request_id: %s", l)
			}
		}
	}

	// Events: everything the order request caused carries its id.
	caused := map[string]bool{}
	wantTypes := map[string]int{}
	for _, e := range s.readLog(t) {
		byRequest := e.Stream == "reservation-order-"+res || e.Stream == "order-"+orderID ||
			(e.Stream == "reservation-"+res && e.Type == "ReservationOrdered") ||
			(strings.HasPrefix(e.Stream, "intent-") && correlationOf(t, e) == rid)
		if !byRequest {
			if got := correlationOf(t, e); got == rid {
				t.Errorf("%s %s@%d has correlation_id %s, but the order request did not cause it", e.Type, e.Stream, e.Revision, got)
			}
			continue
		}
		wantTypes[e.Type]++
		if got := correlationOf(t, e); got != rid {
			t.Errorf("%s %s@%d: correlation_id = %q, want %q", e.Type, e.Stream, e.Revision, got, rid)
		}
		if _, public, _ := notify.Subject(e.Stream, e.Type); public {
			caused[e.ID] = true
		}
	}
	for _, typ := range []string{"IntentRecorded", "OrderClaimed", "OrderPlaced", "ReservationOrdered", "PaymentAttemptStarted", "OrderConfirmed"} {
		if wantTypes[typ] != 1 {
			t.Errorf("events caused by the order request: %d %s, want 1 (%v)", wantTypes[typ], typ, wantTypes)
		}
	}

	// NATS: each of those events' messages carries the id next to Nats-Msg-Id.
	nc, err := nats.Connect("nats://"+s.natsAddr, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS: connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var msgs map[string]*jetstream.RawStreamMsg
	if !eventually(30*time.Second, func() bool {
		msgs = natsByID(t, js)
		for id := range caused {
			if msgs[id] == nil {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("NATS: not every one of the %d public events of the order request was published within 30 s", len(caused))
	}
	withID := 0
	for id, m := range msgs {
		got := m.Header.Values(notify.HeaderRequestID)
		if caused[id] {
			if len(got) != 1 || got[0] != rid {
				t.Errorf("NATS message %s (%s): %s = %q, want [%s]", id, m.Subject, notify.HeaderRequestID, got, rid)
			}
		}
		if len(got) == 1 && got[0] == rid {
			withID++
		}
	}
	if withID != len(caused) || len(caused) < 5 {
		t.Errorf("NATS: %d messages carry %s %s, want the %d public events the request caused (at least 5)",
			withID, notify.HeaderRequestID, rid, len(caused))
	}
	s.resumeWebhooks(t, "payment_intent.succeeded")

	// Ids the service makes or refuses.
	long := strings.Repeat("x", 128)
	for _, c := range []struct {
		name, sent string
		kept       bool
	}{
		{"none sent", "", false},
		{"128 visible ASCII characters", long, true},
		{"129 characters", long + "y", false},
		{"a space", "bad id", false},
		{"a non-ASCII character", "caf\u00e9", false},
	} {
		call := call{Method: "GET", Path: "/v1/orders/" + orderID, Token: tokAlice}
		if c.sent != "" {
			call.Header = map[string]string{"X-Request-Id": c.sent}
		}
		g := s.doCall(t, call)
		got := g.Header.Get("X-Request-Id")
		if c.kept {
			if g.Status != 200 || got != c.sent {
				t.Errorf("%s: %d with X-Request-Id %q, want 200 echoing it", c.name, g.Status, got)
			}
			continue
		}
		if u, err := uuid.Parse(got); g.Status != 200 || err != nil || u.Version() != 7 {
			t.Errorf("%s: %d with X-Request-Id %q, want 200 with a new UUIDv7", c.name, g.Status, got)
		}
	}
	// A refused id is not echoed in problem details either.
	p := s.doCall(t, call{Method: "GET", Path: "/v1/orders/" + uuid.NewString(), Token: tokAlice,
		Header: map[string]string{"X-Request-Id": long + "y"}})
	if pid := p.Header.Get("X-Request-Id"); p.Status != 404 || p.str("request_id") != pid || pid == long+"y" {
		t.Errorf("GET an unknown order with a 129-character id: %d, request_id %q, X-Request-Id %q; want 404 with one new id in both",
			p.Status, p.str("request_id"), pid)
	}
}
