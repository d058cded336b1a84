package test

import (
	"context"
	"encoding/json"
	"fmt"
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

// metaOf returns an event's metadata.
func metaOf(t testing.TB, e eventstore.RecordedEvent) eventstore.Metadata {
	t.Helper()
	m, err := eventstore.DecodeMetadata(e.Metadata)
	if err != nil {
		t.Fatalf("%s %s@%d: metadata: %v", e.Type, e.Stream, e.Revision, err)
	}
	return m
}

// accessLines returns the access log lines ("http request") of booking
// serve's JSON output whose client_request_id is client.
func (s *server) accessLines(client string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s.logs.String(), "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) == nil && line["msg"] == "http request" && line["client_request_id"] == client {
			out = append(out, line)
		}
	}
	return out
}

// isUUIDv7 reports whether id is a UUIDv7 (a server-assigned request id).
func isUUIDv7(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.Version() == 7 && u.String() == id
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

// TestRequestID_EndToEnd: one order request with a client-chosen, valid
// X-Request-Id. The answer carries exactly that id; the service assigns the
// request its own id (a UUIDv7), and its log lines carry both — the server
// id as request_id, the client's as client_request_id (the access line and
// the commands layer's "intent recorded", logged with the request's
// context); every event the request caused — its intent, the order claim,
// the order stream and the reservation's follow-up, whether appended
// inline or by the process manager — has the server id as correlation_id
// and request_id, the client's id as client_request_id, and a causation
// id; every NATS message of those events carries the server id in
// Booking-Request-Id, next to Nats-Msg-Id. Webhooks are held, so no other
// request records a payment fact of the order. Then the ids the service
// keeps or replaces: none sent, 128 characters of the allowed set kept; 129
// characters, a space, a slash, a quote or a non-ASCII character replaced
// by the server's id; a problem carries the answer's id.
func TestRequestID_EndToEnd(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{Env: map[string]string{"BOOKING_LOG_FORMAT": "json", "BOOKING_LOG_LEVEL": "debug"}}, 2)
	s.pauseWebhooks(t)
	rid := "e2e-order-" + uuid.NewString()
	c := orderCall(tokAlice, newKey(), res, "tok_visa")
	c.Header = map[string]string{"X-Request-Id": rid}
	r := s.doCall(t, c)
	wantStatus(t, r, http.StatusCreated)
	if got := r.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != rid {
		t.Errorf("X-Request-Id = %q, want exactly [%s]", got, rid)
	}
	orderID := r.str("id")
	s.settle(t)

	// Logs: the access line and the commands layer's line of this request.
	var access, recorded map[string]any
	var srv string
	if !eventually(30*time.Second, func() bool {
		if lines := s.accessLines(rid); len(lines) == 1 {
			access = lines[0]
			srv, _ = access["request_id"].(string)
		}
		for _, l := range s.logLines(srv) {
			if l["msg"] == "intent recorded" {
				recorded = l
			}
		}
		return access != nil && recorded != nil
	}) {
		t.Fatalf("log lines with client_request_id %s: access %v, intent recorded %v; want both:\n%s", rid, access, recorded, tail(s.logs.String(), 6000))
	}
	if !isUUIDv7(srv) || access["route"] != "/v1/orders" || access["status"] != 201.0 || access["actor"] != "alice" {
		t.Errorf("access line = %v, want a UUIDv7 request_id, route /v1/orders, status 201, actor alice", access)
	}
	if recorded["operation"] != "POST /v1/orders" || recorded["target_id"] != orderID || recorded["client_request_id"] != rid {
		t.Errorf("intent recorded line = %v, want operation POST /v1/orders, target_id %s, client_request_id %s", recorded, orderID, rid)
	}
	for _, l := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(l, rid) {
			var line map[string]any
			if json.Unmarshal([]byte(l), &line) != nil || line["client_request_id"] != rid || line["request_id"] != srv {
				t.Errorf("a log line names the client's id outside client_request_id, or without the server's request_id: %s", l)
			}
		}
	}

	// Events: everything the order request caused carries its ids.
	caused := map[string]bool{}
	wantTypes := map[string]int{}
	for _, e := range s.readLog(t) {
		m := metaOf(t, e)
		byRequest := e.Stream == "reservation-order-"+res || e.Stream == "order-"+orderID ||
			(e.Stream == "reservation-"+res && e.Type == "ReservationOrdered") ||
			(strings.HasPrefix(e.Stream, "intent-") && m.CorrelationID == srv)
		if m.CausationID == "" {
			t.Errorf("%s %s@%d has no causation_id", e.Type, e.Stream, e.Revision)
		}
		if !byRequest {
			if m.CorrelationID == srv || m.ClientRequestID == rid {
				t.Errorf("%s %s@%d has correlation_id %s, client_request_id %s, but the order request did not cause it",
					e.Type, e.Stream, e.Revision, m.CorrelationID, m.ClientRequestID)
			}
			continue
		}
		wantTypes[e.Type]++
		if m.CorrelationID != srv || m.RequestID != srv || m.ClientRequestID != rid {
			t.Errorf("%s %s@%d: correlation_id, request_id, client_request_id = %q, %q, %q; want %q, %q, %q",
				e.Type, e.Stream, e.Revision, m.CorrelationID, m.RequestID, m.ClientRequestID, srv, srv, rid)
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

	// NATS: each of those events' messages carries the server id next to Nats-Msg-Id.
	js := s.jetStream(t)
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
			if len(got) != 1 || got[0] != srv {
				t.Errorf("NATS message %s (%s): %s = %q, want [%s]", id, m.Subject, notify.HeaderRequestID, got, srv)
			}
		}
		if len(got) == 1 && got[0] == srv {
			withID++
		}
	}
	if withID != len(caused) || len(caused) < 5 {
		t.Errorf("NATS: %d messages carry %s %s, want the %d public events the request caused (at least 5)",
			withID, notify.HeaderRequestID, srv, len(caused))
	}
	s.resumeWebhooks(t, "payment_intent.succeeded")

	// Ids the service keeps or replaces.
	long := strings.Repeat("x", 128)
	for _, c := range []struct {
		name, sent string
		kept       bool
	}{
		{"none sent", "", false},
		{"128 characters of letters, digits and ._:-", long[:120] + "aZ09._:-", true},
		{"129 characters", long + "y", false},
		{"a space", "bad id", false},
		{"a slash", "a/b", false},
		{"a quote", `x"},"level":"error","msg":"forged`, false},
		{"a non-ASCII character", "caf\u00e9", false},
	} {
		call := call{Method: "GET", Path: "/v1/orders/" + orderID, Token: tokAlice}
		if c.sent != "" {
			call.Header = map[string]string{"X-Request-Id": c.sent}
		}
		g := s.doCall(t, call)
		got := g.Header.Values("X-Request-Id")
		if len(got) != 1 {
			t.Errorf("%s: X-Request-Id %q, want exactly one", c.name, got)
			continue
		}
		if c.kept {
			if g.Status != 200 || got[0] != c.sent {
				t.Errorf("%s: %d with X-Request-Id %q, want 200 echoing it", c.name, g.Status, got[0])
			}
			continue
		}
		if g.Status != 200 || !isUUIDv7(got[0]) {
			t.Errorf("%s: %d with X-Request-Id %q, want 200 with the server's UUIDv7", c.name, g.Status, got[0])
		}
	}
	// Problem details label the ids as log lines do: request_id is the
	// server's UUIDv7 (its access line's request_id), client_request_id
	// the client's kept id; a refused id is named nowhere.
	p := s.doCall(t, call{Method: "GET", Path: "/v1/orders/" + uuid.NewString(), Token: tokAlice,
		Header: map[string]string{"X-Request-Id": long + "y"}})
	pid := p.Header.Get("X-Request-Id")
	if p.Status != 404 || p.str("request_id") != pid || !isUUIDv7(pid) || p.get("client_request_id") != nil {
		t.Errorf("GET an unknown order with a 129-character id: %d, request_id %q, client_request_id %v, X-Request-Id %q; want 404 with the server's id in both and no client_request_id",
			p.Status, p.str("request_id"), p.get("client_request_id"), pid)
	}
	kept := s.doCall(t, call{Method: "GET", Path: "/v1/orders/" + uuid.NewString(), Token: tokAlice,
		Header: map[string]string{"X-Request-Id": "e2e-problem-1"}})
	if kept.Status != 404 || kept.Header.Get("X-Request-Id") != "e2e-problem-1" || kept.str("client_request_id") != "e2e-problem-1" {
		t.Errorf("GET an unknown order with X-Request-Id e2e-problem-1: %d, X-Request-Id %q, client_request_id %q; want 404 with e2e-problem-1 in both",
			kept.Status, kept.Header.Get("X-Request-Id"), kept.str("client_request_id"))
	}
	var problemLines []map[string]any
	if !eventually(30*time.Second, func() bool {
		problemLines = s.accessLines("e2e-problem-1")
		return len(problemLines) == 1 && len(s.logLines(pid)) > 0
	}) {
		t.Fatalf("access lines with client_request_id e2e-problem-1: %v, log lines with request_id %s: %v; want one, and some", problemLines, pid, s.logLines(pid))
	}
	if srv, _ := problemLines[0]["request_id"].(string); !isUUIDv7(srv) || kept.str("request_id") != srv {
		t.Errorf("problem of e2e-problem-1: request_id %q, want its access line's server UUIDv7 %q", kept.str("request_id"), srv)
	}
}

// TestRequestID_ForgedAndSharedIDs: a request whose X-Request-Id is a
// forged log record (x"},"level":"error","msg":"forged) is answered with
// the server's id, and the forged text appears nowhere — not in the logs,
// not in any event, not in any NATS message. Alice and Bob send the same
// valid id with their reservations: both answers echo it, the access lines
// carry it as client_request_id with two different server request_ids, and
// each reservation's events carry its own request's server id as
// correlation_id, so the two are told apart.
func TestRequestID_ForgedAndSharedIDs(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{Env: map[string]string{"BOOKING_LOG_FORMAT": "json", "BOOKING_LOG_LEVEL": "debug"}})
	show := s.mustCreateShow(t, 10)
	reserve := func(tok, id string) *resp {
		r := s.doCall(t, call{Method: "POST", Path: "/v1/reservations", Token: tok, Key: keyOf(newKey()),
			Body: map[string]any{"show_id": show, "quantity": 1}, Header: map[string]string{"X-Request-Id": id}})
		wantStatus(t, r, http.StatusCreated)
		return r
	}
	const forged = `x"},"level":"error","msg":"forged`
	f := reserve(tokAlice, forged)
	if got := f.Header.Get("X-Request-Id"); !isUUIDv7(got) {
		t.Errorf("X-Request-Id of a forged id = %q, want the server's UUIDv7", got)
	}
	const shared = "checkout-42"
	ra, rb := reserve(tokAlice, shared), reserve(tokBob, shared)
	if ra.Header.Get("X-Request-Id") != shared || rb.Header.Get("X-Request-Id") != shared {
		t.Errorf("X-Request-Id = %q and %q, want %s for both", ra.Header.Get("X-Request-Id"), rb.Header.Get("X-Request-Id"), shared)
	}
	s.settle(t)

	var lines []map[string]any
	if !eventually(30*time.Second, func() bool { lines = s.accessLines(shared); return len(lines) == 2 }) {
		t.Fatalf("access lines with client_request_id %s: %v, want 2", shared, lines)
	}
	srv := map[string]string{} // actor -> server id
	for _, l := range lines {
		id, _ := l["request_id"].(string)
		actor, _ := l["actor"].(string)
		if !isUUIDv7(id) {
			t.Errorf("access line %v: request_id is not a UUIDv7", l)
		}
		srv[actor] = id
	}
	if srv["alice"] == "" || srv["bob"] == "" || srv["alice"] == srv["bob"] {
		t.Fatalf("server ids of the two requests with id %s: %v, want one each for alice and bob, different", shared, srv)
	}
	if strings.Contains(s.logs.String(), "forged") {
		t.Errorf("the forged id reached the logs:\n%s", tail(s.logs.String(), 4000))
	}
	resOf := map[string]string{srv["alice"]: ra.str("id"), srv["bob"]: rb.str("id")}
	seen := map[string]int{}
	for _, e := range s.readLog(t) {
		if strings.Contains(string(e.Metadata), "forged") || strings.Contains(string(e.Data), "forged") {
			t.Errorf("%s %s@%d carries the forged id: %s", e.Type, e.Stream, e.Revision, e.Metadata)
		}
		m := metaOf(t, e)
		if res, ok := resOf[m.CorrelationID]; ok {
			seen[m.CorrelationID]++
			if m.ClientRequestID != shared || (e.Stream == "reservation-"+res) != (e.Type == "ReservationHeld") {
				t.Errorf("%s %s@%d: correlation %s (reservation %s), client_request_id %q", e.Type, e.Stream, e.Revision, m.CorrelationID, res, m.ClientRequestID)
			}
		}
	}
	for actor, id := range srv {
		if seen[id] != 3 {
			t.Errorf("%s's reservation: %d events with correlation_id %s, want 3 (intent, hold, reservation)", actor, seen[id], id)
		}
	}
	js := s.jetStream(t)
	for id, m := range natsByID(t, js) {
		if strings.Contains(fmt.Sprint(m.Header), "forged") || strings.Contains(string(m.Data), "forged") {
			t.Errorf("NATS message %s carries the forged id: %v", id, m.Header)
		}
	}
}

// TestRequestID_RecoveredOrderKeepsItsRequest: the process dies right after
// an order's claim (order.claimed), which the request sent with its own
// X-Request-Id. After the restart, with no repeat, the process manager and
// the reconciler place and pay the order: every event of the order — the
// claim, the order stream, the reservation's follow-up — keeps the
// correlation id of the request that recorded the intent (its server id,
// not a constant of the job), each has a causation id, and what follows
// from the intent names the client's id (a fact the provider's webhook
// recorded names the webhook's request instead).
func TestRequestID_RecoveredOrderKeepsItsRequest(t *testing.T) {
	t.Parallel()
	const step = "order.claimed"
	s, _, res := mustStartReserved(t, Options{CrashAt: []string{step}, Env: crashEnv(), ExternalSim: true}, 2)
	rid := "recovered-" + uuid.NewString()
	key := newKey()
	order := orderCall(tokAlice, key, res, "tok_visa")
	order.Header = map[string]string{"X-Request-Id": rid}
	s.crashCall(t, order, step)
	id := s.onlyClaimedOrder(t, "after the crash at "+step)
	s.Restart(withoutCrash)
	s.waitRecovered(t, id, crashBound)
	s.settle(t)

	var srv string
	for _, e := range s.readLog(t) {
		if e.Stream == intentStream("alice", "POST /v1/orders", key) && e.Type == "IntentRecorded" {
			srv = metaOf(t, e).RequestID
		}
	}
	if !isUUIDv7(srv) {
		t.Fatalf("IntentRecorded of the order: request_id %q, want the request's server UUIDv7", srv)
	}
	n := 0
	for _, e := range s.readLog(t) {
		if e.Stream != "reservation-order-"+res && e.Stream != "order-"+id && !(e.Stream == "reservation-"+res && e.Type == "ReservationOrdered") {
			continue
		}
		n++
		m := metaOf(t, e)
		// What follows from the intent names its request; a fact a webhook
		// recorded names the webhook (a request without an id of its own),
		// and what follows from it keeps that.
		wantClient := m.ClientRequestID == rid
		switch e.Type {
		case "OrderClaimed", "OrderPlaced", "ReservationOrdered", "PaymentAttemptStarted":
		default:
			wantClient = wantClient || m.ClientRequestID == ""
		}
		if m.CorrelationID != srv || !wantClient || m.CausationID == "" {
			t.Errorf("%s %s@%d: correlation_id %q, client_request_id %q, causation_id %q; want %q, %q and a cause",
				e.Type, e.Stream, e.Revision, m.CorrelationID, m.ClientRequestID, m.CausationID, srv, rid)
		}
	}
	if n < 6 {
		t.Errorf("%d events of the recovered order, want at least 6 (claim, placed, ordered, attempt, success, confirmed)", n)
	}
}

// jetStream connects to the server's NATS (closed when the test ends).
func (s *server) jetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+s.natsAddr, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
