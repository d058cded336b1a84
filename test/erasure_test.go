package test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/retrysafe/booking/projections/notify"
)

// waitErasures waits (up to 60 s) until the key of every order in ids is
// gone, no erasure is left to record, and each order's stream holds exactly
// one PaymentSecretsShredded, projected into rm_orders.secrets_shredded_at;
// it fails the test otherwise.
func (s *server) waitErasures(t testing.TB, ids ...string) {
	t.Helper()
	state := func() (keys, left, recorded, projected int, once bool) {
		once = true
		for _, id := range ids {
			keys += s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = $1`, id)
			n := s.countType(t, "order-"+id, "PaymentSecretsShredded")
			recorded += n
			once = once && n == 1
			projected += s.queryInt(t, `SELECT count(*) FROM rm_orders WHERE id = $1 AND secrets_shredded_at IS NOT NULL`, id)
		}
		return keys, s.queryInt(t, `SELECT count(*) FROM order_key_erasures`), recorded, projected, once
	}
	if !eventually(60*time.Second, func() bool {
		keys, left, _, projected, once := state()
		return keys == 0 && left == 0 && once && projected == len(ids)
	}) {
		keys, left, recorded, projected, _ := state()
		t.Fatalf("erasures of %d orders after 60 s: %d keys left, %d erasures to record, %d PaymentSecretsShredded, %d projected; want 0, 0, one each, all",
			len(ids), keys, left, recorded, projected)
	}
}

// TestErasure_RecordedOnceAlsoAfterAKillBetweenDeleteAndRecord: a confirmed
// and a declined order end; their keys are deleted, which leaves their
// erasures to record. The reconciler, about to record them, is held
// (erasure.recording) and booking serve is SIGKILLed there: the keys are
// gone, and each order's PaymentSecretsShredded is written only where the
// unit that ended the order deleted its key (PostgreSQL: key units, one
// each) and not where the keys were deleted off the requests (KurrentDB:
// none). After the restart the reconciler records each order's erasure
// exactly once (projected, shown in the order's explained timeline,
// published to NATS as booking.v1.order.{id}.payment_secrets_shredded);
// the orders still replay, and the final audit (read models equal a
// replay, every event in NATS once) holds.
func TestErasure_RecordedOnceAlsoAfterAKillBetweenDeleteAndRecord(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{HoldAt: []string{"erasure.recording"}, Env: crashEnv(), ExternalSim: true})
	show := s.mustCreateShow(t, 10)
	key, res := newKey(), s.mustReserve(t, tokAlice, show, 1)
	confirmed := s.mustOrder(t, tokAlice, key, res, "tok_visa").str("id")
	r := s.doCall(t, orderCall(tokBob, newKey(), s.mustReserve(t, tokBob, show, 1), "tok_decline"))
	checkProblem(t, r, http.StatusPaymentRequired, "payment-declined")
	declined := orderIDOf(t, r)
	ids := []string{confirmed, declined}

	// Both keys deleted (within the shredder's delay), both erasures left
	// to record, and the reconciler held right before recording them.
	if !eventually(60*time.Second, func() bool {
		return s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = ANY($1::uuid[])`, ids) == 0 &&
			s.queryInt(t, `SELECT count(*) FROM order_key_erasures WHERE order_id = ANY($1::uuid[])`, ids) == 2
	}) {
		t.Fatalf("after 60 s: %d keys of the ended orders left, %d erasures to record; want 0 and 2",
			s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = ANY($1::uuid[])`, ids),
			s.queryInt(t, `SELECT count(*) FROM order_key_erasures WHERE order_id = ANY($1::uuid[])`, ids))
	}
	s.waitHeld(t, "erasure.recording", 1)
	s.Kill()
	want, why := 2, "recorded by the units that deleted the keys"
	if onKurrentDB() {
		want, why = 0, "keys deleted off the requests, killed before recording"
	}
	if n := s.countType(t, "order-", "PaymentSecretsShredded"); n != want {
		t.Fatalf("event store after the kill: %d PaymentSecretsShredded, want %d (%s)", n, want, why)
	}
	if n := s.queryInt(t, `SELECT count(*) FROM order_key_erasures`); n != 2 {
		t.Fatalf("order_key_erasures after the kill: %d rows, want 2", n)
	}

	s.Restart(func(o *Options) { o.HoldAt = nil })
	s.waitErasures(t, ids...)
	s.settle(t)
	if n := s.countType(t, "order-", "PaymentSecretsShredded"); n != 2 {
		t.Errorf("event store: %d PaymentSecretsShredded, want 2 (one per shredded order)", n)
	}

	// The timeline of the confirmed order's intent shows it.
	items := s.explain(t, tokAlice, key)
	if len(items) != 1 || !hasStep(items[0], "payment_secrets_shredded") {
		t.Errorf("GET /v1/intents?key=%s: %+v, want the order's timeline with payment_secrets_shredded", url.QueryEscape(key), items)
	}
	// Published once per order, under the order's subject.
	js := s.jetStream(t)
	for _, id := range ids {
		subject := "booking.v1.order." + id + ".payment_secrets_shredded"
		found := 0
		if !eventually(30*time.Second, func() bool {
			found = 0
			for _, m := range natsByID(t, js) {
				if m.Subject == subject && m.Header.Get(notify.HeaderEventType) == "PaymentSecretsShredded" {
					found++
				}
			}
			return found == 1
		}) {
			t.Errorf("NATS: %d messages on %s, want 1", found, subject)
		}
	}
	// The ended orders still replay.
	again := s.doCall(t, orderCall(tokAlice, key, res, "tok_visa"))
	if again.Status != http.StatusCreated || !again.replayed() || again.str("id") != confirmed {
		t.Errorf("replay of order %s after its erasure: %s, want 201 replayed", confirmed, again)
	}
}
