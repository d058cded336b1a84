package test

// Secrets at rest and the provider API key: after
// a mixed workload with a SIGKILL in the middle, no payment token appears in
// clear in the events table, the read models, the NATS stream or the logs;
// a shredded order still replays and rebuilds; the provider API key reaches
// the simulator, which refuses requests without it, and is never logged.

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// distinctToken is a simulator token (it behaves as prefix) that no other
// order uses, so a search for it finds exactly this order's.
func distinctToken(prefix string) string { return prefix + "_" + hex.EncodeToString(randomBytes(8)) }

// rawEvents returns the stored bytes (data and metadata) of every event.
func (s *server) rawEvents(t testing.TB) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rows, err := s.db.Query(ctx, `SELECT coalesce(data, ''::bytea) || coalesce(metadata, ''::bytea) FROM events`)
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// natsMessages returns every message of JetStream stream BOOKING: its data
// and its headers, as bytes.
func natsMessages(t testing.TB, js jetstream.JetStream) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, state := bookingStream(ctx, t, js)
	var out [][]byte
	for seq := state.FirstSeq; seq <= state.LastSeq && state.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("NATS: message %d: %v", seq, err)
		}
		var hdr bytes.Buffer
		for k, vs := range m.Header {
			fmt.Fprintf(&hdr, "%s: %s\n", k, strings.Join(vs, ","))
		}
		out = append(out, append(hdr.Bytes(), m.Data...))
	}
	return out
}

// TestSecrets_NoTokenInClearAfterMixedWorkloadAndCrash: every order of a
// mixed workload pays with its own token. One request is SIGKILLed right
// after its order's unit (the claim, with OrderPlaced carrying the token
// sealed and the key table's copy dropped); after the restart the
// reconciler pays it, opening the token with the key in the key table. Then: confirmed,
// declined, cancelled (confirmed then refunded), cancelling (tok_slow), one
// whose payment requires the customer's action (its client secret shown in
// the 202, then cancelled) and a pending order (the provider fails every
// call). Afterwards no token, no client secret (nothing with "_secret_")
// and no payment method id (pm_…) appears in clear in the events' data or
// metadata, the read models, the NATS stream or the output of booking serve
// and the simulator; the keys of ended orders are gone and only the pending
// order's remains; the ended orders still replay (same status,
// Idempotent-Replayed) and a projections rebuild gives their rows back
// unchanged.
func TestSecrets_NoTokenInClearAfterMixedWorkloadAndCrash(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{CrashAt: []string{"order.claimed"}, Env: fastEnv(), ExternalSim: true})
	ctx := context.Background()
	show := s.mustCreateShow(t, 20)
	var tokens []string
	token := func(prefix string) string {
		tok := distinctToken(prefix)
		tokens = append(tokens, tok)
		return tok
	}

	// ---- SIGKILL right after the order claim, then recovery without a repeat.
	crashed := call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
		Body: orderBody(s.mustReserve(t, tokAlice, show, 1), token("tok_visa")), Client: crashClient()}
	if r, err := s.send(ctx, crashed); err == nil {
		t.Fatalf("%s, want a connection error (the process is killed after order.claimed)", r)
	}
	s.WaitExit(10 * time.Second)
	ids := s.claimedOrderIDs(t)
	if len(ids) != 1 {
		t.Fatalf("OrderClaimed %v after the crash, want 1", ids)
	}
	crashedID := ids[0]
	if n := s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = $1 AND held_token IS NULL`, crashedID); n != 1 {
		t.Fatalf("order_keys: %d rows of the crashed order's key with its token dropped, want 1 (the order's unit moved the token to OrderPlaced)", n)
	}
	s.Restart(withoutCrash)
	if !eventually(recoveryBound, func() bool { return s.orderStatus(t, tokAlice, crashedID) == "confirmed" }) {
		t.Fatalf("order %s not confirmed %s after the restart (status %q)", crashedID, recoveryBound, s.orderStatus(t, tokAlice, crashedID))
	}

	// ---- the workload
	type placedOrder struct {
		c      call
		id     string
		status int // first answer's status, which replays repeat
		final  string
	}
	place := func(actor, prefix string, wait string, want int) placedOrder {
		t.Helper()
		c := call{Method: "POST", Path: "/v1/orders", Token: actor, Key: keyOf(newKey()),
			Body: orderBody(s.mustReserve(t, actor, show, 1), token(prefix))}
		if wait != "" {
			c.Header = map[string]string{"Prefer": "wait=" + wait}
		}
		r := s.doCall(t, c)
		wantStatus(t, r, want)
		return placedOrder{c: c, id: orderIDOf(t, r), status: want}
	}
	confirmed := place(tokAlice, "tok_visa", "", http.StatusCreated)
	confirmed.final = "confirmed"
	declined := place(tokBob, "tok_decline", "", http.StatusPaymentRequired)
	declined.final = "failed"
	refunded := place(tokAlice, "tok_visa", "", http.StatusCreated)
	refunded.final = "cancelled"
	if c := s.rbCancel(t, tokAlice, refunded.id); c.Status != http.StatusOK || c.str("status") != "cancelled" {
		t.Fatalf("%s, want 200 cancelled", c)
	}
	cancelling := place(tokBob, "tok_slow", "0", http.StatusAccepted)
	cancelling.final = "cancelled"
	// The cancel must meet the attempt at the provider (tok_slow holds it
	// there 2 s); before the attempt starts, a cancel is final at once (200).
	s.waitInFlight(t, "order-"+cancelling.id+"-1")
	if c := s.rbCancel(t, tokBob, cancelling.id); c.Status != http.StatusAccepted || c.str("status") != "cancelling" {
		t.Errorf("%s, want 202 cancelling", c)
	}
	action := place(tokBob, "tok_authentication_required", "", http.StatusAccepted)
	action.final = "cancelled"
	g := s.do(t, "GET", "/v1/orders/"+action.id, tokBob, "", nil)
	clientSecret := g.str("payment.client_secret")
	if g.str("payment.status") != "requires_action" || !strings.Contains(clientSecret, "_secret_") {
		t.Fatalf("%s, want payment.status requires_action with a client secret", g)
	}
	if c := s.rbCancel(t, tokBob, action.id); c.Status != http.StatusAccepted && c.Status != http.StatusOK {
		t.Errorf("%s, want 202 cancelling (or 200 cancelled)", c)
	}
	pending := place(tokAlice, "tok_error_before_commit", "0", http.StatusAccepted)
	s.expectOpen(pending.id, "the provider fails every call: the order stays pending")
	ended := []placedOrder{confirmed, declined, refunded, cancelling, action}
	owner := map[string]string{confirmed.id: tokAlice, declined.id: tokBob, refunded.id: tokAlice, cancelling.id: tokBob, action.id: tokBob}

	if !eventually(60*time.Second, func() bool {
		for _, o := range ended {
			r := s.do(t, "GET", "/v1/orders/"+o.id, owner[o.id], "", nil)
			if r.str("status") != o.final || r.str("payment.status") == "refund_pending" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the ended orders did not reach their final status (and refunds) within 60 s")
	}
	if st := s.orderStatus(t, tokAlice, pending.id); st != "pending" {
		t.Errorf("order %s (provider failing) is %q, want pending", pending.id, st)
	}
	// Counts: 7 orders; at the simulator tok_visa charged twice net (the
	// crashed order and the confirmed one), the refunded and the
	// cancelling one net 0, one decline, one canceled PaymentIntent (the
	// action never taken), nothing for the pending one.
	if n := s.orders(t); n != 7 {
		t.Errorf("event store: %d orders, want 7", n)
	}
	if !eventually(30*time.Second, func() bool { c := s.charges(t); return c.Net == 2*priceAmount && c.Failed == 2 && c.Waiting == 0 }) {
		t.Errorf("GET /_sim/charges: %s, want net %d, 2 failed (a decline, a cancel), none waiting", s.charges(t), 2*priceAmount)
	}

	// ---- the key table: only the pending order's key, holding no token.
	if !eventually(30*time.Second, func() bool { // an ended order's key goes with the commit that ends it
		return s.queryInt(t, `SELECT count(*) FROM order_keys`) == 1
	}) {
		t.Errorf("order_keys: %d rows, want 1 (the pending order's)", s.queryInt(t, `SELECT count(*) FROM order_keys`))
	}
	if n := s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = $1 AND held_token IS NULL`, pending.id); n != 1 {
		t.Errorf("order_keys: the pending order's key (without a held token) is missing")
	}
	// Each deleted key's erasure is recorded once in its order's stream (and
	// projected) before the read models are compared below.
	s.waitErasures(t, crashedID, confirmed.id, declined.id, refunded.id, cancelling.id)
	for _, o := range append(ended, placedOrder{id: crashedID}) {
		if n := s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = $1`, o.id); n != 0 {
			t.Errorf("order_keys: ended order %s still has its key", o.id)
		}
		// The log still holds the sealed parts, now unreadable.
		if n := s.queryInt(t, `SELECT count(*) FROM events WHERE stream = $1 AND type = 'OrderPlaced'
			AND convert_from(data, 'UTF8')::jsonb->'private' ? 'sealed_payment_token'
			AND (convert_from(metadata, 'UTF8')::jsonb->>'schema_version')::int = 2`, "order-"+o.id); n != 1 {
			t.Errorf("order %s: no OrderPlaced (schema version 2) with a sealed token", o.id)
		}
	}
	if n := s.queryInt(t, `SELECT count(*) FROM events WHERE type = 'IntentRecorded' AND convert_from(data, 'UTF8')::jsonb ? 'private'`); n != 0 {
		t.Errorf("event store: %d IntentRecorded with a private part, want 0", n)
	}
	if n := s.queryInt(t, `SELECT count(*) FROM events WHERE type = 'PaymentAttemptStarted'
		AND convert_from(data, 'UTF8')::jsonb->'private' ? 'request_body'`); n != 0 {
		t.Errorf("event store: %d PaymentAttemptStarted with clear request bytes, want 0", n)
	}

	// ---- no token in clear: events, key table, read models, NATS, logs.
	nc, err := nats.Connect("nats://"+s.natsAddr, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS: connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	published := s.rbPublished(t)
	if !eventually(30*time.Second, func() bool { return rbNATSMsgs(t, js) >= uint64(published) }) {
		t.Errorf("NATS: %d messages, want at least the %d events published so far", rbNATSMsgs(t, js), published)
	}
	// The read models are compared with a rebuild below, so they must be
	// at rest: the 6 ended orders projected and no refund still pending (a
	// cancelled order's key is erased when it ends, before its refund).
	if !eventually(30*time.Second, func() bool {
		return s.queryInt(t, `SELECT count(*) FROM rm_orders WHERE status IN ('confirmed', 'failed', 'cancelled')`) == 6 &&
			s.queryInt(t, `SELECT count(*) FROM rm_orders WHERE refunds_pending > 0 OR refund_pending_since IS NOT NULL`) == 0
	}) {
		t.Errorf("rm_orders: the 6 ended orders are not all projected with their refunds settled")
	}
	var readModels []byte
	for table, rows := range s.rbSnapshot(t) {
		readModels = append(readModels, table...)
		for _, r := range rows {
			readModels = append(readModels, r...)
		}
	}
	keyRows := s.queryText(t, `SELECT encode(wrapped_key || coalesce(held_token, ''::bytea), 'escape') FROM order_keys`)
	places := map[string][][]byte{
		"the events table":           s.rawEvents(t),
		"the key table":              {[]byte(strings.Join(keyRows, "\n"))},
		"the read models":            {readModels},
		"the NATS stream BOOKING":    natsMessages(t, js),
		"the output of the services": {[]byte(s.logs.String())},
	}
	if len(places["the events table"]) < 50 || len(places["the NATS stream BOOKING"]) < 20 {
		t.Fatalf("too little to search: %d events, %d NATS messages", len(places["the events table"]), len(places["the NATS stream BOOKING"]))
	}
	for where, blobs := range places {
		for _, tok := range append(tokens, clientSecret, "_secret_") {
			for _, b := range blobs {
				if bytes.Contains(b, []byte(tok)) {
					t.Errorf("%s holds the secret %s in clear", where, tok)
					break
				}
			}
		}
		for _, b := range blobs {
			if m := paymentMethodID.Find(b); m != nil {
				t.Errorf("%s holds a payment method id in clear: %s", where, m)
				break
			}
		}
	}
	logs := s.logs.String()
	if strings.Contains(logs, s.providerKey) || strings.Contains(logs, s.masterKeys[len("e2e-1:"):]) {
		t.Errorf("the output of the services shows the provider API key or the master key")
	}

	// ---- shredded orders replay and rebuild.
	rowOf := func(id string) []string {
		return s.queryText(t, `SELECT r::text FROM rm_orders r WHERE id = $1`, id)
	}
	before := map[string][]string{}
	for _, o := range ended {
		before[o.id] = rowOf(o.id)
		r := s.doCall(t, o.c)
		want := o.status // the first final outcome fixes the status
		if want == http.StatusAccepted {
			want = http.StatusCreated // answered while pending; cancelled by its owner since
		}
		if r.Status != want {
			t.Errorf("replay of order %s after shredding: %s, want %d", o.id, r, want)
		}
		if orderIDOf(t, r) != o.id || !r.replayed() {
			t.Errorf("replay of order %s after shredding: %s, want the same order with Idempotent-Replayed: true", o.id, r)
		}
		if g := s.do(t, "GET", "/v1/orders/"+o.id, owner[o.id], "", nil); g.Status != http.StatusOK || g.str("status") != o.final {
			t.Errorf("GET order %s after shredding: %s, want 200 %s", o.id, g, o.final)
		}
	}
	if code, out := s.rbRebuild(t); code != 0 {
		t.Fatalf("booking projections rebuild exited %d, want 0:\n%s", code, out)
	}
	for _, o := range ended {
		if got := rowOf(o.id); len(got) != 1 || strings.Join(got, "") != strings.Join(before[o.id], "") {
			t.Errorf("rm_orders row of shredded order %s after the rebuild:\n  %v\nbefore:\n  %v", o.id, got, before[o.id])
		}
	}
	if n := s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id <> $1`, pending.id); n != 0 {
		t.Errorf("order_keys: %d keys of ended orders after the replays and the rebuild, want 0", n)
	}
}

// paymentMethodID matches a Stripe PaymentMethod id or a test token, as
// the simulator's PaymentIntents carry them (pm_…, tok_…).
var paymentMethodID = regexp.MustCompile(`\b(pm|tok)_[A-Za-z0-9]{6,}`)

// TestProviderAPIKey_ReachesSimulatorAndIsNeverLogged: the external
// simulator requires an API key (BOOKING_PROVIDER_SIM_API_KEY). booking
// serve sends BOOKING_STRIPE_SECRET_KEY and its orders are charged; the
// simulator answers 401 with a Stripe-like body to a request without it or
// with another key, and a booking serve with the wrong key charges nothing
// and fails nothing (202 pending, not a decline) until it is restarted with
// the right key, when the reconciler finishes the order: one charge. The
// key appears in no output of either process.
func TestProviderAPIKey_ReachesSimulatorAndIsNeverLogged(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{Env: fastEnv(), ExternalSim: true})
	show := s.mustCreateShow(t, 10)

	r := s.do(t, "POST", "/v1/orders", tokAlice, newKey(), orderBody(s.mustReserve(t, tokAlice, show, 1), "tok_visa"))
	wantStatus(t, r, http.StatusCreated)
	if r.str("status") != "confirmed" {
		t.Fatalf("%s, want confirmed", r)
	}

	for _, auth := range []string{"", "sk_test_not_the_key"} {
		c := call{Method: "GET", Path: s.SimURL + "/v1/payment_intents?limit=1", Token: auth}
		r := s.doCall(t, c)
		if r.Status != http.StatusUnauthorized || r.str("error.type") != "invalid_request_error" || r.str("error.message") == "" ||
			!strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET /v1/payment_intents with key %q: %s (WWW-Authenticate %q), want 401 invalid_request_error with a Bearer challenge",
				auth, r, r.Header.Get("WWW-Authenticate"))
		}
	}
	if c := s.charges(t); c.Succeeded != 1 || c.Failed != 0 {
		t.Fatalf("GET /_sim/charges: %s, want 1 succeeded (refused requests charge nothing)", c)
	}

	// booking serve with the wrong key: the order waits, nothing is charged.
	wrong := "sk_test_wrong_" + hex.EncodeToString(randomBytes(6))
	s.Restart(func(o *Options) {
		o.Env = fastEnv()
		o.Env["BOOKING_STRIPE_SECRET_KEY"] = wrong
	})
	r = s.do(t, "POST", "/v1/orders", tokBob, newKey(), orderBody(s.mustReserve(t, tokBob, show, 1), "tok_visa"))
	wantStatus(t, r, http.StatusAccepted)
	id := orderIDOf(t, r)
	if st := r.str("status"); st != "pending" {
		t.Errorf("%s, want pending (a refused key is not a decline)", r)
	}
	if !strings.Contains(s.logs.String(), "the provider refused the API key") {
		t.Errorf("booking serve did not report the refused API key")
	}
	if c := s.charges(t); c.Succeeded != 1 {
		t.Errorf("GET /_sim/charges: %s, want still 1 succeeded", c)
	}

	// The right key again: the reconciler finishes the order, one charge.
	s.Restart(func(o *Options) { o.Env = fastEnv() })
	if !eventually(recoveryBound, func() bool { return s.orderStatus(t, tokBob, id) == "confirmed" }) {
		t.Fatalf("order %s not confirmed %s after the restart with the right key (status %q)", id, recoveryBound, s.orderStatus(t, tokBob, id))
	}
	if c := s.charges(t); c.Succeeded != 2 || c.Net != 2*priceAmount {
		t.Errorf("GET /_sim/charges: %s, want 2 succeeded, net %d", c, 2*priceAmount)
	}
	logs := s.logs.String()
	for _, k := range []string{s.providerKey, wrong} {
		if strings.Contains(logs, k) {
			t.Errorf("the output of booking serve or the simulator shows an API key")
		}
	}
}
