package test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"
)

// HTTP server limits and raw storage: a body trickled past the read timeout,
// bodies that are not UTF-8, and strings kept byte for byte as sent.

// slowBody is the outcome of sendSlowly.
type slowBody struct {
	res     *http.Response
	body    []byte
	err     error         // reading the answer failed (the connection closed without one)
	sent    int           // body bytes written before the answer arrived
	elapsed time.Duration // from the dial to the answer
	closed  bool          // the server closed the connection after the answer
}

// sendSlowly sends a POST whose headers go at once and whose body then
// trickles at one byte a second (Content-Length announces all of it), over a
// raw loopback TCP connection. It stops writing as soon as the answer
// arrives, and reports the answer and whether the server then closed.
func (s *server) sendSlowly(t *testing.T, path, token, key, body string) slowBody {
	t.Helper()
	start := time.Now() // the server's read deadline runs from the connection's first read
	conn, err := net.DialTimeout("tcp", s.httpAddr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", s.httpAddr, err)
	}
	defer conn.Close()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, s.httpAddr, token, key, len(body))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("write headers: %v", err)
	}
	type answer struct {
		res  *http.Response
		body []byte
		err  error
		at   time.Time
	}
	answered := make(chan answer, 1)
	br := bufio.NewReader(conn)
	go func() {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			answered <- answer{err: err, at: time.Now()}
			return
		}
		b, err := io.ReadAll(res.Body)
		answered <- answer{res: res, body: b, err: err, at: time.Now()}
	}()
	out := slowBody{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	var a answer
wait:
	for out.sent < len(body) {
		if _, err := conn.Write([]byte{body[out.sent]}); err != nil {
			break // the server closed: its answer (if any) is read below
		}
		out.sent++
		select {
		case a = <-answered:
			break wait
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no answer 60 s after the headers, %d of %d body bytes sent", out.sent, len(body))
		}
	}
	if a.at.IsZero() {
		select {
		case a = <-answered:
		case <-time.After(60 * time.Second):
			t.Fatalf("no answer and no close 60 s after the headers")
		}
	}
	out.res, out.body, out.err, out.elapsed = a.res, a.body, a.err, a.at.Sub(start)
	if out.res != nil {
		// The server must close the connection (it cannot know where the body
		// it stopped reading ends): a read sees EOF or a reset, not a hang.
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := br.ReadByte()
		var ne net.Error
		out.closed = err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	return out
}

// TestSlowBody_IsCutOffWith408AndRecordsNothing: a body trickled at one
// byte a second is cut off by BOOKING_HTTP_READ_TIMEOUT (2 s here) although
// bytes keep arriving: 408 request-timeout as problem+json, the connection
// closed, nothing stored, and the key not used up — the same key with a
// whole body is a new intent.
func TestSlowBody_IsCutOffWith408AndRecordsNothing(t *testing.T) {
	t.Parallel()
	const readTimeout = 2 * time.Second
	s := mustStart(t, Options{Env: map[string]string{"BOOKING_HTTP_READ_TIMEOUT": readTimeout.String()}})
	show := s.mustCreateShow(t, 10)
	before := s.settle(t)
	key := newKey()
	body := fmt.Sprintf(`{"show_id":%q,"quantity":2}`, show)

	got := s.sendSlowly(t, "/v1/reservations", tokAlice, key, body)
	if got.err != nil || got.res == nil {
		t.Fatalf("slow body: no answer (%v) after %d of %d bytes, want 408", got.err, got.sent, len(body))
	}
	r := &resp{Req: "POST /v1/reservations (body at 1 byte/s)", Status: got.res.StatusCode, Header: got.res.Header, Body: got.body}
	_ = json.Unmarshal(got.body, &r.JSON)
	checkProblem(t, r, http.StatusRequestTimeout, "request-timeout")
	if got.sent < 2 || got.sent >= len(body) {
		t.Errorf("the answer came after %d of %d body bytes, want a body still trickling (at least 2 bytes, not all)", got.sent, len(body))
	}
	if got.elapsed < readTimeout {
		t.Errorf("the answer came %v after the dial, want at least the read timeout %v", got.elapsed, readTimeout)
	}
	if !got.res.Close || !got.closed {
		t.Errorf("%s: Connection: close %v, closed %v; want the connection closed after the 408", r.Req, got.res.Close, got.closed)
	}
	s.checkNoNewEvents(t, &before, "the cut-off body")

	again := s.do(t, "POST", "/v1/reservations", tokAlice, key, body)
	wantStatus(t, again, http.StatusCreated)
	if again.replayed() {
		t.Errorf("%s: Idempotent-Replayed after a cut-off first use of the key, want a new intent", again.Req)
	}
	s.wantCount(t, "reservation-", "ReservationHeld", 1)
	s.wantCount(t, "intent-", "IntentRecorded", 2, "(the show's and the reservation's)")
}

// TestInvalidUTF8_Is400AndRecordsNothing: a body that is not valid UTF-8
// anywhere — raw bytes or an escaped lone surrogate, in a value or a member
// name — is 400 invalid-utf8 and records nothing; two different invalid
// bodies under one key are each refused (neither replays the other), and
// the key then still takes a valid body as a new intent.
func TestInvalidUTF8_Is400AndRecordsNothing(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{}, 1)
	starts := showStartsAt()
	showJSON := func(name string) string {
		return `{"name":"` + name + `","starts_at":"` + starts + `","capacity":10,"price":{"amount":4500,"currency":"EUR"}}`
	}
	showKey := newKey()
	cases := []struct {
		name       string
		path, tok  string
		key        string
		body       string
		wantFields bool
	}{
		{"a raw invalid byte in a show name", "/v1/shows", tokAdmin, showKey, showJSON("Caf\xe9"), false},
		{"another raw invalid byte in a show name, same key", "/v1/shows", tokAdmin, showKey, showJSON("Caf\xff"), false},
		{"an escaped lone high surrogate in a show name, same key", "/v1/shows", tokAdmin, showKey, showJSON(`Caf\ud800`), false},
		{"an escaped lone low surrogate in a show name", "/v1/shows", tokAdmin, newKey(), showJSON(`\uDC00 Concert`), false},
		{"an encoded surrogate (CESU-8) in a show name", "/v1/shows", tokAdmin, newKey(), showJSON("\xed\xa0\x80"), false},
		{"a lone surrogate in a show id", "/v1/reservations", tokAlice, newKey(), `{"show_id":"\ud83d","quantity":1}`, false},
		{"an invalid byte in a member name", "/v1/reservations", tokAlice, newKey(), `{"show_id":"` + show + `","quanti` + "\xc3" + `ty":1}`, false},
		{"an invalid byte in a payment token", "/v1/orders", tokAlice, newKey(), `{"reservation_id":"` + res + `","payment":{"token":"tok_visa` + "\x80" + `"}}`, false},
		{"a high surrogate followed by another high one", "/v1/orders", tokAlice, newKey(), `{"reservation_id":"` + res + `","payment":{"token":"\ud800\ud800"}}`, false},
	}
	before := s.settle(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(t, "POST", tc.path, tc.tok, tc.key, tc.body)
			checkProblem(t, r, http.StatusBadRequest, "invalid-utf8")
			if r.replayed() {
				t.Errorf("%s: Idempotent-Replayed on a refused body", r.Req)
			}
			s.checkNoNewEvents(t, &before, r.String())
		})
	}
	s.wantCount(t, "show-", "ShowScheduled", 1, "(the fixture's)")
	s.wantCount(t, "order-", "OrderPlaced", 0)
	s.checkCharges(t, 0, 0)

	// The key refused three times is not used up.
	good := s.do(t, "POST", "/v1/shows", tokAdmin, showKey, showJSON("Café"))
	wantStatus(t, good, http.StatusCreated)
	if good.replayed() || good.str("name") != "Café" {
		t.Errorf("%s: want a new show named Café, not a replay", good)
	}
	// A valid surrogate pair is a character like any other.
	pair := s.do(t, "POST", "/v1/shows", tokAdmin, newKey(), showJSON(`Concert \ud83c\udfb5`))
	wantStatus(t, pair, http.StatusCreated)
	if pair.str("name") != "Concert \U0001F3B5" {
		t.Errorf("%s: name %q, want %q", pair, pair.str("name"), "Concert \U0001F3B5")
	}
}

// TestRawStorage_StringsAsSentValuesAsValues: a show name sent in NFD is
// stored in the intent's command and in ShowScheduled, and shown by GET and
// the list, byte for byte in NFD; the capacity sent as 1e2 is stored as 100
// and the start sent with an offset as the same instant in UTC. The same key
// with the name in NFC is a replay of the show as first sent (not 422),
// with nothing appended; another name is 422.
func TestRawStorage_StringsAsSentValuesAsValues(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	const nfdSent = "Cafe\u0301 Tacuba A\u030a" // sent in NFD: e + U+0301, A + U+030A
	const nfc = "Caf\u00e9 Tacuba \u00c5"       // its NFC form
	starts := time.Now().UTC().Add(40 * 24 * time.Hour).Truncate(time.Second)
	startsOffset := starts.In(time.FixedZone("", -5*3600)).Format(time.RFC3339)
	body := func(name string) string {
		return `{"name":"` + name + `","starts_at":"` + startsOffset + `","capacity":1e2,"price":{"amount":4.5e3,"currency":"EUR"}}`
	}
	key := newKey()
	first := s.do(t, "POST", "/v1/shows", tokAdmin, key, body(nfdSent))
	wantStatus(t, first, http.StatusCreated)
	id := first.str("id")
	if first.str("name") != nfdSent {
		t.Errorf("%s: name %q (% x), want the NFD bytes as sent %q (% x)", first.Req, first.str("name"), first.str("name"), nfdSent, nfdSent)
	}
	if first.str("starts_at") != starts.Format(time.RFC3339) || int(first.num("capacity")) != 100 || int(first.num("price.amount")) != 4500 {
		t.Errorf("%s: starts_at %q capacity %v amount %v, want %q (UTC), 100, 4500", first, first.str("starts_at"),
			first.get("capacity"), first.get("price.amount"), starts.Format(time.RFC3339))
	}

	g := s.do(t, "GET", "/v1/shows/"+id, tokAlice, "", nil)
	wantStatus(t, g, http.StatusOK)
	if g.str("name") != nfdSent || g.str("starts_at") != starts.Format(time.RFC3339) {
		t.Errorf("%s: name %q starts_at %q, want %q and %q", g, g.str("name"), g.str("starts_at"), nfdSent, starts.Format(time.RFC3339))
	}

	evs := s.eventData(t, "show-"+id, "ShowScheduled")
	if len(evs) != 1 {
		t.Fatalf("event store: %d ShowScheduled of show %s, want 1", len(evs), id)
	}
	if evs[0]["name"] != nfdSent || evs[0]["capacity"] != float64(100) || evs[0]["starts_at"] != starts.Format(time.RFC3339) {
		t.Errorf("ShowScheduled = %v, want name %q (NFD bytes), capacity 100, starts_at %q", evs[0], nfdSent, starts.Format(time.RFC3339))
	}
	var intentName []string
	for _, in := range s.eventData(t, "intent-", "IntentRecorded") {
		if in["operation"] == "POST /v1/shows" && in["target_id"] == id {
			cmd, _ := in["command"].(map[string]any)
			name, _ := cmd["name"].(string)
			intentName = append(intentName, name)
			if cmd["capacity"] != float64(100) || cmd["starts_at"] != starts.Format(time.RFC3339) {
				t.Errorf("IntentRecorded command = %v, want capacity 100 and starts_at %q (UTC)", cmd, starts.Format(time.RFC3339))
			}
		}
	}
	if !slices.Equal(intentName, []string{nfdSent}) {
		t.Errorf("IntentRecorded command names %q, want exactly [%q] (as sent)", intentName, nfdSent)
	}

	var listed string
	if !eventually(15*time.Second, func() bool {
		l := s.do(t, "GET", "/v1/shows", tokAlice, "", nil)
		items, _ := l.get("items").([]any)
		for _, it := range items {
			if m, _ := it.(map[string]any); m["id"] == id {
				listed, _ = m["name"].(string)
				return true
			}
		}
		return false
	}) {
		t.Fatalf("GET /v1/shows did not list show %s within 15 s", id)
	}
	if listed != nfdSent {
		t.Errorf("GET /v1/shows: name %q, want the NFD bytes %q", listed, nfdSent)
	}

	before := s.settle(t)
	again := s.do(t, "POST", "/v1/shows", tokAdmin, key, body(nfc))
	wantStatus(t, again, http.StatusCreated)
	if !again.replayed() || again.str("id") != id || again.str("name") != nfdSent {
		t.Errorf("%s: want a replay (Idempotent-Replayed) of show %s named as first sent, %q", again, id, nfdSent)
	}
	other := s.do(t, "POST", "/v1/shows", tokAdmin, key, body("Cafe Tacuba \u00c5"))
	checkProblem(t, other, http.StatusUnprocessableEntity, "idempotency-key-reused")
	if !slices.Equal(problemFields(other), []string{"name"}) {
		t.Errorf("%s: differing fields %v, want [name]", other, problemFields(other))
	}
	if n := s.totalEvents(t); n != before {
		t.Errorf("event store: %d events after the replay and the 422, want %d", n, before)
	}
	s.wantCount(t, "show-", "ShowScheduled", 1)

	// A name PostgreSQL text cannot hold (U+0000) would stop the shows read
	// model at its event: refused, nothing stored.
	nul := s.do(t, "POST", "/v1/shows", tokAdmin, newKey(), body(`Concert\u0000`))
	checkProblem(t, nul, http.StatusBadRequest, "invalid-request")
	if n := s.totalEvents(t); n != before {
		t.Errorf("event store: %d events after a name with U+0000, want %d", n, before)
	}
}
