package test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOrder_FiftyConcurrentRepeatsAndAChangedBodyMakeOneOrder: fifty
// identical order requests at once, and the same key with another body sent
// while they are in flight, make one order and one charge; the changed body
// is 422 (which takes precedence over in-use) and nothing is a 5xx.
func TestOrder_FiftyConcurrentRepeatsAndAChangedBodyMakeOneOrder(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{}, 2)
	key := newKey()
	same := make([]call, 50)
	for i := range same {
		same[i] = orderCall(tokAlice, key, res, "tok_visa")
	}
	changed := orderCall(tokAlice, key, res, "tok_decline")
	intentsBefore := s.countType(t, "intent-", "IntentRecorded")

	var answers []*resp
	var errs []error
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		answers, errs = s.sendAll(same)
	}()
	// The changed body goes as soon as the intent exists, so it is decided
	// against the identical requests' fingerprint (not raced to record it).
	if !eventually(30*time.Second, func() bool { return s.countType(t, "intent-", "IntentRecorded") > intentsBefore }) {
		t.Fatalf("no IntentRecorded within 30 s of sending 50 order requests")
	}
	odd, oddErr := s.send(context.Background(), changed)
	<-sent
	for i, err := range errs {
		if err != nil {
			t.Fatalf("identical request %d: %v", i, err)
		}
	}
	if oddErr != nil {
		t.Fatalf("changed request: %v", oddErr)
	}
	checkProblem(t, odd, http.StatusUnprocessableEntity, "idempotency-key-reused")
	if f := problemFields(odd); !slices.Equal(f, []string{"payment"}) && !slices.Equal(f, []string{"payment.token"}) {
		t.Errorf("%s: differing fields %v, want [payment] (or [payment.token])", odd, f)
	}
	s.checkPaidOnce(t, checkIdenticalAnswers(t, answers)...)
}

// TestOrder_ResponseLostAfterCommitRepeatGetsSameOrder: a client gives up
// before the answer of a committed order arrives, then repeats: it gets the
// same order, and there is one charge.
func TestOrder_ResponseLostAfterCommitRepeatGetsSameOrder(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{}, 2)
	first := orderCall(tokAlice, newKey(), res, "tok_slow")
	first.Header = map[string]string{"Prefer": "wait=2"}
	// The client gives up once the order is committed: the first request is
	// held at payment.fenced (order claimed, attempt fenced, provider not yet
	// called) and its connection is closed there. A fixed client timeout
	// would not do: on a busy machine it can expire before the intent is
	// even recorded, and the repeat then becomes the executor itself.
	s.armHold(t, "payment.fenced")
	ctx, giveUp := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := s.send(ctx, first)
		gaveUp <- err
	}()
	s.waitHeld(t, "payment.fenced", 1)
	giveUp()
	if err := <-gaveUp; err == nil {
		t.Fatalf("the first request answered while held at payment.fenced, want the client to give up")
	}
	if ids := s.claimedOrderIDs(t); len(ids) != 1 {
		t.Fatalf("order claims before the repeat: %v, want exactly 1", ids)
	}
	s.releaseHold(t, "payment.fenced")

	repeat := first
	repeat.Client = nil
	repeat.Header = map[string]string{"Prefer": "wait=5"}
	// On a busy machine the repeat may find the first request still before
	// its commit point (409 in use) or the payment still pending (202):
	// repeat, as a client would, until the outcome is final.
	var r *resp
	if !eventually(60*time.Second, func() bool {
		r = s.doCall(t, repeat)
		return !retryable(r) && r.Status != http.StatusAccepted
	}) {
		t.Fatalf("%s: no final answer to the repeat within 60 s", r)
	}
	wantStatus(t, r, http.StatusCreated)
	if !r.replayed() || r.str("status") != "confirmed" {
		t.Errorf("%s: want status confirmed with Idempotent-Replayed: true", r)
	}
	if got := r.Header.Get("Preference-Applied"); got != "wait=5" {
		t.Errorf("%s: Preference-Applied = %q, want wait=5", r.Req, got)
	}
	s.checkPaidOnce(t, r.str("id"))
	again := s.doCall(t, repeat)
	wantStatus(t, again, http.StatusCreated)
	if again.str("id") != r.str("id") {
		t.Errorf("%s, want order %s", again, r.str("id"))
	}
}

// TestOrder_PendingIs202UntilTheOutcomeIsFinal: with Prefer: wait=0 a
// slow payment is answered 202 with Location and Retry-After, and so are
// repeats while it is pending; once the outcome is final a repeat answers
// 201 without Retry-After. One order, one charge.
func TestOrder_PendingIs202UntilTheOutcomeIsFinal(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{}, 2)
	c := orderCall(tokAlice, newKey(), res, "tok_slow")
	c.Header = map[string]string{"Prefer": "wait=0"}
	// The payment's outcome is held unrecorded (payment.sent) until both
	// pending answers are in, however slow the machine.
	s.armHold(t, "payment.sent")
	for i, wantReplay := range []bool{false, true} {
		r := s.doCall(t, c)
		wantStatus(t, r, http.StatusAccepted)
		if r.replayed() != wantReplay || r.str("status") != "pending" {
			t.Errorf("request %d: %s: want status pending, Idempotent-Replayed %v", i+1, r, wantReplay)
		}
		if r.Header.Get("Location") != "/v1/orders/"+r.str("id") || r.Header.Get("Retry-After") == "" {
			t.Errorf("request %d: %s: want Location /v1/orders/%s and Retry-After, got %q and %q", i+1, r, r.str("id"),
				r.Header.Get("Location"), r.Header.Get("Retry-After"))
		}
		if got := r.Header.Get("Preference-Applied"); got != "wait=0" {
			t.Errorf("request %d: %s: Preference-Applied = %q, want wait=0", i+1, r.Req, got)
		}
	}
	s.releaseHold(t, "payment.sent")
	var r *resp
	if !eventually(30*time.Second, func() bool {
		r = s.doCall(t, c)
		return r.Status != http.StatusAccepted
	}) {
		t.Fatalf("%s: still pending 30 s after the payment was let go (tok_slow takes 2 s)", r)
	}
	wantStatus(t, r, http.StatusCreated)
	if !r.replayed() || r.str("status") != "confirmed" || r.Header.Get("Retry-After") != "" {
		t.Errorf("%s: want status confirmed, Idempotent-Replayed: true and no Retry-After", r)
	}
	s.checkPaidOnce(t, r.str("id"))
}

// fingerprintCase is a repeat of a first request under the same key.
type fingerprintCase struct {
	name   string
	body   string
	status int    // 201: replay of the first request's resource
	code   string // problem code for other statuses ("" any)
	fields []string
}

// runFingerprintCases sends base under key, then every case under the same
// key, checking each answer; it returns the id of the base's resource.
func (s *server) runFingerprintCases(t *testing.T, path, token, key, base string, cases []fingerprintCase) string {
	t.Helper()
	first := s.do(t, "POST", path, token, key, base)
	wantStatus(t, first, http.StatusCreated)
	id := first.str("id")
	before := s.settle(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(t, "POST", path, token, key, tc.body)
			switch tc.status {
			case http.StatusCreated:
				wantStatus(t, r, http.StatusCreated)
				if r.str("id") != id || !r.replayed() {
					t.Errorf("%s: want a replay of %s (Idempotent-Replayed: true)", r, id)
				}
			default:
				checkProblem(t, r, tc.status, tc.code)
				if tc.fields != nil && !slices.Equal(problemFields(r), tc.fields) {
					t.Errorf("%s: differing fields %v, want %v", r, problemFields(r), tc.fields)
				}
			}
			s.checkNoNewEvents(t, &before, r.Req)
		})
	}
	return id
}

// TestFingerprint_EquivalentBodiesAreOneIntent: the canonical fingerprint
// ignores property order and whitespace, compares numbers by value and
// strings after NFC; a string, non-integral or out-of-range integer is 400
// and a different value is 422.
func TestFingerprint_EquivalentBodiesAreOneIntent(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	show := s.mustCreateShow(t, 50)

	t.Run("reservations", func(t *testing.T) {
		q := func(quantity string) string { return `{"show_id":"` + show + `","quantity":` + quantity + `}` }
		s.runFingerprintCases(t, "/v1/reservations", tokAlice, newKey(), q("2"), []fingerprintCase{
			{name: "reordered properties are the same intent", body: `{"quantity":2,"show_id":"` + show + `"}`, status: 201},
			{name: "other whitespace is the same intent", body: "{\n  \"show_id\" : \"" + show + "\",\t\"quantity\" :\r\n 2 }\n", status: 201},
			{name: "2.0 is the same intent as 2", body: q("2.0"), status: 201},
			{name: "2e0 is the same intent as 2", body: q("2e0"), status: 201},
			{name: "20e-1 is the same intent as 2", body: q("20e-1"), status: 201},
			{name: "a string quantity is 400", body: q(`"2"`), status: 400},
			{name: "quantity 2.5 is 400", body: q("2.5"), status: 400},
			{name: "quantity 2^53 is 400", body: q("9007199254740992"), status: 400},
			{name: "quantity -2^53 is 400", body: q("-9007199254740992"), status: 400},
			{name: "a different quantity is 422", body: q("3"), status: 422, code: "idempotency-key-reused", fields: []string{"quantity"}},
		})
		s.wantCount(t, "reservation-", "ReservationHeld", 1)
		s.wantAvailable(t, show, 48)
	})

	t.Run("shows", func(t *testing.T) {
		startsAt := time.Now().UTC().Add(40 * 24 * time.Hour).Truncate(time.Second)
		body := func(name, starts, capacity, amount string) string {
			return `{"name":"` + name + `","starts_at":"` + starts + `","capacity":` + capacity +
				`,"price":{"amount":` + amount + `,"currency":"EUR"}}`
		}
		utc := startsAt.Format(time.RFC3339)
		nfc, nfd := "Caf\u00e9", "Cafe\u0301"
		id := s.runFingerprintCases(t, "/v1/shows", tokAdmin, newKey(), body(nfc, utc, "100", "4500"), []fingerprintCase{
			{name: "an NFD name is the same intent as its NFC form", body: body(nfd, utc, "100", "4500"), status: 201},
			{name: "reordered properties and whitespace are the same intent",
				body: `{ "price" : { "currency" : "EUR", "amount" : 4500 },` + "\n" + `"capacity":100, "starts_at":"` + utc + `", "name":"` + nfc + `" }`, status: 201},
			{name: "capacity 1e2 is the same intent as 100", body: body(nfc, utc, "1e2", "4500"), status: 201},
			{name: "capacity 100.0 is the same intent as 100", body: body(nfc, utc, "100.0", "4500"), status: 201},
			{name: "amount 4.5e3 is the same intent as 4500", body: body(nfc, utc, "100", "4.5e3"), status: 201},
			{name: "the same instant in another offset is the same intent",
				body: body(nfc, startsAt.In(time.FixedZone("", 2*3600)).Format(time.RFC3339), "100", "4500"), status: 201},
			{name: "a string capacity is 400", body: body(nfc, utc, `"100"`, "4500"), status: 400},
			{name: "capacity 100.5 is 400", body: body(nfc, utc, "100.5", "4500"), status: 400},
			{name: "amount 2^53 is 400", body: body(nfc, utc, "100", "9007199254740992"), status: 400},
			{name: "a different capacity is 422", body: body(nfc, utc, "101", "4500"), status: 422, code: "idempotency-key-reused", fields: []string{"capacity"}},
			{name: "a different name is 422", body: body("Cafe", utc, "100", "4500"), status: 422, code: "idempotency-key-reused", fields: []string{"name"}},
		})
		g := s.do(t, "GET", "/v1/shows/"+id, tokAlice, "", nil)
		wantStatus(t, g, http.StatusOK)
		if g.str("name") != nfc {
			t.Errorf("%s: name %q, want the NFC form %q", g, g.str("name"), nfc)
		}
		s.wantCount(t, "show-", "ShowScheduled", 2, "(the fixture's and this one)")
	})
}

// TestIdempotencyKey_Rules: a quoted sf-string and the bare key are one
// key; keys are case-sensitive and never truncated; each actor's keys are
// its own.
func TestIdempotencyKey_Rules(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	show := s.mustCreateShow(t, 100)
	body := map[string]any{"show_id": show, "quantity": 1}
	reserve := func(t *testing.T, token, key string, b any) *resp {
		t.Helper()
		return s.do(t, "POST", "/v1/reservations", token, key, b)
	}
	held := func(t *testing.T) int { t.Helper(); return s.countType(t, "reservation-", "ReservationHeld") }

	t.Run("a quoted key and the bare key are the same key", func(t *testing.T) {
		k := newKey()
		q := reserve(t, tokAlice, `"`+k+`"`, body)
		wantStatus(t, q, http.StatusCreated)
		b := reserve(t, tokAlice, k, body)
		wantStatus(t, b, http.StatusCreated)
		if b.str("id") != q.str("id") || !b.replayed() {
			t.Errorf("%s: want a replay of %s", b, q.str("id"))
		}
		// An escaped quote inside the sf-string is the bare character.
		k2 := newKey() + `"x`
		q2 := reserve(t, tokAlice, `"`+strings.ReplaceAll(k2, `"`, `\"`)+`"`, body)
		wantStatus(t, q2, http.StatusCreated)
		b2 := reserve(t, tokAlice, k2, body)
		wantStatus(t, b2, http.StatusCreated)
		if b2.str("id") != q2.str("id") || !b2.replayed() {
			t.Errorf("%s: want a replay of %s", b2, q2.str("id"))
		}
	})

	t.Run("keys are case-sensitive", func(t *testing.T) {
		k := "abc-" + newKey()
		n0 := held(t)
		lower := reserve(t, tokAlice, k, body)
		wantStatus(t, lower, http.StatusCreated)
		upper := reserve(t, tokAlice, strings.ToUpper(k), body)
		wantStatus(t, upper, http.StatusCreated)
		if upper.str("id") == lower.str("id") || upper.replayed() {
			t.Errorf("%s: want a new reservation, not %s", upper, lower.str("id"))
		}
		if n := held(t) - n0; n != 2 {
			t.Errorf("event store: %d new ReservationHeld, want 2", n)
		}
	})

	t.Run("keys are never truncated", func(t *testing.T) {
		base := newKey()
		k1 := base + strings.Repeat("a", 255-len(base)-1) + "1"
		k2 := base + strings.Repeat("a", 255-len(base)-1) + "2"
		a := reserve(t, tokAlice, k1, body)
		wantStatus(t, a, http.StatusCreated)
		b := reserve(t, tokAlice, k2, body)
		wantStatus(t, b, http.StatusCreated)
		if a.str("id") == b.str("id") || b.replayed() {
			t.Errorf("%s: 255-character keys differing in their last character share a reservation", b)
		}
		again := reserve(t, tokAlice, k1, body)
		wantStatus(t, again, http.StatusCreated)
		if again.str("id") != a.str("id") || !again.replayed() {
			t.Errorf("%s: want a replay of %s", again, a.str("id"))
		}
	})

	t.Run("the same key on two operations is two intents", func(t *testing.T) {
		k := newKey()
		r := reserve(t, tokAlice, k, body)
		wantStatus(t, r, http.StatusCreated)
		o := s.mustOrder(t, tokAlice, k, r.str("id"), "tok_visa")
		if o.replayed() || o.str("status") != "confirmed" {
			t.Errorf("%s: want a new confirmed order", o)
		}
	})

	t.Run("the same key of two actors is two independent intents", func(t *testing.T) {
		k := newKey()
		n0 := held(t)
		a := reserve(t, tokAlice, k, body)
		wantStatus(t, a, http.StatusCreated)
		// bob's body differs: his intent is not compared with alice's.
		bobBody := map[string]any{"show_id": show, "quantity": 3}
		b := reserve(t, tokBob, k, bobBody)
		wantStatus(t, b, http.StatusCreated)
		if b.str("id") == a.str("id") || b.replayed() {
			t.Errorf("%s: want bob's own new reservation, not alice's %s", b, a.str("id"))
		}
		if strings.Contains(string(b.Body), a.str("id")) {
			t.Errorf("%s: bob's answer reveals alice's reservation %s", b, a.str("id"))
		}
		b2 := reserve(t, tokBob, k, bobBody)
		wantStatus(t, b2, http.StatusCreated)
		if b2.str("id") != b.str("id") || !b2.replayed() {
			t.Errorf("%s: want a replay of bob's %s", b2, b.str("id"))
		}
		a2 := reserve(t, tokAlice, k, body)
		wantStatus(t, a2, http.StatusCreated)
		if a2.str("id") != a.str("id") || !a2.replayed() || a2.num("quantity") != 1 {
			t.Errorf("%s: want a replay of alice's %s (quantity 1)", a2, a.str("id"))
		}
		if n := held(t) - n0; n != 2 {
			t.Errorf("event store: %d new ReservationHeld, want 2", n)
		}
		for _, c := range []struct{ token, id string }{{tokBob, a.str("id")}, {tokAlice, b.str("id")}} {
			r := s.do(t, "GET", "/v1/reservations/"+c.id, c.token, "", nil)
			checkProblem(t, r, http.StatusNotFound, "reservation-not-found")
		}
	})
}

// TestIsolation_OtherActorsResourcesAreNotFound: another actor's
// reservation and order are 404, exactly like ids that do not exist, for
// reads and for writes; a write probe records nothing, not even an intent,
// and leaves its key unused.
func TestIsolation_OtherActorsResourcesAreNotFound(t *testing.T) {
	t.Parallel()
	s, show, ordered := mustStartReserved(t, Options{}, 2)
	order := s.mustOrder(t, tokAlice, newKey(), ordered, "tok_visa").str("id")
	unordered := s.mustReserve(t, tokAlice, show, 1)
	unknown := "01900000-0000-7000-8000-000000000000"
	s.settle(t)
	before := s.loggedEvents(t)

	// check compares bob's answer about alice's id with the answer about an
	// unknown id: same status, code and detail, and nothing of alice's but
	// the id bob sent himself.
	check := func(t *testing.T, r, like *resp, sent string) {
		t.Helper()
		if !checkProblem(t, r, http.StatusNotFound, like.str("code")) {
			return
		}
		if r.str("detail") != like.str("detail") {
			t.Errorf("%s: detail differs from the answer for an unknown id (%q)", r, like.str("detail"))
		}
		for _, secret := range []string{order, ordered, unordered, "alice"} {
			if secret != sent && strings.Contains(string(r.Body), secret) {
				t.Errorf("%s: bob's answer reveals %q", r, secret)
			}
		}
	}
	cases := []struct {
		name     string
		c        func(id string) call
		mine     string
		wantCode string
	}{
		{"bob reading alice's reservation is 404", func(id string) call { return call{Method: "GET", Path: "/v1/reservations/" + id, Token: tokBob} },
			ordered, "reservation-not-found"},
		{"bob reading alice's order is 404", func(id string) call { return call{Method: "GET", Path: "/v1/orders/" + id, Token: tokBob} },
			order, "order-not-found"},
		{"bob ordering alice's unordered reservation is 404", func(id string) call {
			return orderCall(tokBob, newKey(), id, "tok_visa")
		}, unordered, "reservation-not-found"},
		{"bob ordering alice's ordered reservation is 404", func(id string) call {
			return orderCall(tokBob, newKey(), id, "tok_visa")
		}, ordered, "reservation-not-found"},
		{"bob cancelling alice's order is 404", func(id string) call {
			return call{Method: "POST", Path: "/v1/orders/" + id + "/cancel", Token: tokBob, Key: keyOf(newKey())}
		}, order, "order-not-found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			like := s.doCall(t, tc.c(unknown))
			checkProblem(t, like, http.StatusNotFound, tc.wantCode)
			check(t, s.doCall(t, tc.c(tc.mine)), like, tc.mine)
		})
	}
	// 100 cancel probes of alice's order, each under a key of its own.
	probeKeys := make([]string, 100)
	for i := range probeKeys {
		probeKeys[i] = newKey()
		r := s.do(t, "POST", "/v1/orders/"+order+"/cancel", tokBob, probeKeys[i], nil)
		checkProblem(t, r, http.StatusNotFound, "order-not-found")
	}
	reserveKey := newKey()
	r := s.do(t, "POST", "/v1/reservations", tokBob, reserveKey, map[string]any{"show_id": unknown, "quantity": 1})
	checkProblem(t, r, http.StatusNotFound, "show-not-found")
	// Bob's refused writes record nothing at all.
	if n := s.loggedEvents(t); n != before {
		t.Errorf("event store: %d events after bob's refused writes, want %d (nothing recorded)", n, before)
	}
	s.checkPaidOnce(t, order)
	for _, c := range []struct{ path, field, want string }{
		{"/v1/orders/" + order, "status", "confirmed"},
		{"/v1/reservations/" + ordered, "status", "ordered"},
		{"/v1/reservations/" + unordered, "status", "held"},
	} {
		r := s.do(t, "GET", c.path, tokAlice, "", nil)
		if r.Status != http.StatusOK || r.str(c.field) != c.want {
			t.Errorf("%s, want 200 with %s %s", r, c.field, c.want)
		}
	}
	// A probe's key is not used up: under it, bob reserves and cancels
	// his own (a used key with another body would be 422).
	r = s.do(t, "POST", "/v1/reservations", tokBob, reserveKey, map[string]any{"show_id": show, "quantity": 1})
	if r.Status != http.StatusCreated {
		t.Fatalf("%s, want 201: a key only a probe used is unused", r)
	}
	mine := s.mustOrder(t, tokBob, newKey(), r.str("id"), "tok_visa").str("id")
	if r := s.do(t, "POST", "/v1/orders/"+mine+"/cancel", tokBob, probeKeys[0], nil); r.Status != http.StatusOK || r.str("status") != "cancelled" {
		t.Errorf("%s, want 200 cancelled: a key only a probe used is unused", r)
	}
}

// loggedEvents returns the number of events in the log, intents included.
func (s *server) loggedEvents(t testing.TB) int {
	t.Helper()
	s.settle(t)
	if s.eventStore != "" { // KurrentDB: count in the log read through the store
		return len(s.readLog(t))
	}
	return s.queryInt(t, `SELECT count(*) FROM events`)
}
