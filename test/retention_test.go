package test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands"
)

// TestRetention_KeyAfterExpiryIsNewIntentStillRefusedSecondOrder: with a
// 30 s retention (short enough to wait for, long enough that the repeat
// inside it is inside it on a busy machine), an ordered reservation's key reused after the purge starts
// a new intent, which the uniqueness stream still refuses (409
// reservation-already-ordered naming the caller's order); one order, one
// charge; the old intent's events are gone.
func TestRetention_KeyAfterExpiryIsNewIntentStillRefusedSecondOrder(t *testing.T) {
	t.Parallel()
	env := fastEnv()
	env["BOOKING_INTENT_RETENTION"] = "30s"
	s, show, res := mustStartReserved(t, Options{Env: env}, 2)
	key := newKey()
	first := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	wantStatus(t, first, http.StatusCreated)
	stream := intentStream("alice", commands.OpPlaceOrder, key)
	if got := s.streamTypes(t, stream); len(got) == 0 || got[0] != "IntentRecorded" {
		t.Fatalf("intent stream %s: %v, want it to start with IntentRecorded", stream, got)
	}
	oldEvents := s.streamEventCount(t, stream)
	// An intent still inside retention is replayed.
	if r := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa")); r.Status != http.StatusCreated || !r.replayed() {
		t.Errorf("%s: want a replay inside retention", r)
	}

	// Wait for the purge (retention 30 s, purge every 1 s).
	if !eventually(120*time.Second, func() bool { return s.streamEventCount(t, stream) == 0 }) {
		t.Fatalf("intent stream %s still has %d events 120 s after it was recorded (retention 30 s, recovery interval 1 s)",
			stream, s.streamEventCount(t, stream))
	}
	t.Logf("intent stream purged (%d events removed)", oldEvents)

	r := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	checkProblem(t, r, http.StatusConflict, "reservation-already-ordered")
	if r.replayed() {
		t.Errorf("%s: Idempotent-Replayed after the intent expired; want a new intent", r.Req)
	}
	if got := r.str("order_id"); got != first.str("id") {
		t.Errorf("%s: order_id = %q, want the caller's order %s", r, got, first.str("id"))
	}
	if got := s.streamTypes(t, stream); strings.Join(got, ",") != "IntentRecorded,IntentRejected" {
		t.Errorf("intent stream %s after the reuse: %v, want only the new intent [IntentRecorded IntentRejected]", stream, got)
	}
	again := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	checkProblem(t, again, http.StatusConflict, "reservation-already-ordered")
	if !again.replayed() {
		t.Errorf("%s: want the new intent's refusal replayed", again.Req)
	}
	s.settle(t)
	s.checkOrders(t, tokAlice, 1, first.str("id"))
	s.checkCharges(t, 1, 0)
	if st := s.orderStatus(t, tokAlice, first.str("id")); st != "confirmed" {
		t.Errorf("order %s: status %q, want confirmed", first.str("id"), st)
	}
	s.checkCapacity(t, show)
}

// TestExpiry_HoldExpiresWithoutRequestThenOrderIs410: the expiry job claims
// an expired hold and releases its seats without any request; an order for
// it is 410 reservation-expired, and its repeat the same, replayed. (The job
// is held right before its claim, so the seats are still held when the test
// looks, however long that takes.)
func TestExpiry_HoldExpiresWithoutRequestThenOrderIs410(t *testing.T) {
	t.Parallel()
	env := fastEnv()
	env["BOOKING_RESERVATION_HOLD"] = "2s"
	s, show, res := mustStartReserved(t, Options{Env: env, HoldAt: []string{"expiry.claiming"}}, 2)
	claim := "reservation-order-" + res
	s.waitHeld(t, "expiry.claiming", 1)
	if got := s.available(t, show); got != 8 {
		t.Errorf("GET /v1/shows/%s: available = %d before the expiry claimed the hold, want 8", show, got)
	}
	if got := s.streamTypes(t, claim); len(got) != 0 {
		t.Errorf("claim stream %v while the expiry job is held before its claim, want none", got)
	}
	s.releaseHold(t, "expiry.claiming")
	// The follow-ups of the claim: the seats go back, then the reservation
	// is marked expired.
	if !eventually(30*time.Second, func() bool {
		return strings.Join(s.streamTypes(t, claim), ",") == "ExpiryClaimed" && s.countType(t, "show-", "SeatsReleased") == 1 &&
			s.countType(t, "reservation-", "ReservationExpired") == 1
	}) {
		t.Fatalf("30 s after the expiry claim: claim stream %v, %d SeatsReleased, %d ReservationExpired; want [ExpiryClaimed], 1, 1",
			s.streamTypes(t, claim), s.countType(t, "show-", "SeatsReleased"), s.countType(t, "reservation-", "ReservationExpired"))
	}
	if got := s.available(t, show); got != 10 {
		t.Errorf("GET /v1/shows/%s: available = %d after the expiry, want 10", show, got)
	}
	s.wantCount(t, "reservation-", "ReservationExpired", 1)
	key := newKey()
	r := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	checkProblem(t, r, http.StatusGone, "reservation-expired")
	if r.replayed() {
		t.Errorf("%s: Idempotent-Replayed on the first request", r.Req)
	}
	again := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	checkProblem(t, again, http.StatusGone, "reservation-expired")
	if !again.replayed() {
		t.Errorf("%s: want Idempotent-Replayed: true", again.Req)
	}
	s.settle(t)
	if got := s.streamTypes(t, claim); strings.Join(got, ",") != "ExpiryClaimed" {
		t.Errorf("claim stream %v, want [ExpiryClaimed]", got)
	}
	s.checkExpiriesEnd(t, show, 0, 1)
}

// checkExpiriesEnd is the end of an expiry scenario, once settled: alice's
// orders (each id in orderIDs among them) with one succeeded charge each
// and no failed one, released SeatsReleased (one per expired hold), no
// unfinished intent, and the show's seat account balanced.
func (s *server) checkExpiriesEnd(t testing.TB, show string, orders, released int, orderIDs ...string) {
	t.Helper()
	s.checkOrders(t, tokAlice, orders, orderIDs...)
	s.checkCharges(t, orders, 0)
	s.wantCount(t, "show-", "SeatsReleased", released, "(one per expired hold)")
	s.checkNoUnfinishedIntents(t, 30*time.Second)
	s.checkCapacity(t, show)
}

// TestExpiry_RaceAtExpiresAt: at a hold's expires_at, two keys order the
// same reservation while the expiry job is due: exactly one claim wins
// (one order, or the expiry), the losers get 409/410, and capacity =
// available + held + ordered. Several rounds on one server.
func TestExpiry_RaceAtExpiresAt(t *testing.T) {
	t.Parallel()
	env := fastEnv()
	env["BOOKING_RESERVATION_HOLD"] = "2s"
	s := mustStart(t, Options{Env: env, ExternalSim: true})
	show := s.mustCreateShow(t, 20)
	wantOrders := 0
	var orderIDs []string
	for round := range 4 {
		r := s.do(t, "POST", "/v1/reservations", tokAlice, newKey(), map[string]any{"show_id": show, "quantity": 2})
		wantStatus(t, r, http.StatusCreated)
		res := r.str("id")
		exp, err := time.Parse(time.RFC3339Nano, r.str("expires_at"))
		if err != nil {
			t.Fatalf("%s: expires_at: %v", r, err)
		}
		// Aim around expires_at: before, at, and just after it.
		offset := []time.Duration{-150 * time.Millisecond, -30 * time.Millisecond, 0, 40 * time.Millisecond}[round]
		time.Sleep(time.Until(exp.Add(offset)))
		// Prefer: wait=10: the winner's payment is final in the answer
		// even on a busy machine.
		wait := map[string]string{"Prefer": "wait=10"}
		calls := []call{orderCall(tokAlice, newKey(), res, "tok_visa"), orderCall(tokAlice, newKey(), res, "tok_visa")}
		for i := range calls {
			calls[i].Header = wait
		}
		answers := s.burstCalls(t, calls)
		s.settle(t)
		claim := s.streamTypes(t, "reservation-order-"+res)
		if len(claim) != 1 {
			t.Fatalf("round %d: claim stream %v, want exactly one claim", round, claim)
		}
		statuses := []int{answers[0].Status, answers[1].Status}
		t.Logf("round %d (offset %s): claim %s, answers %v", round, offset, claim[0], statuses)
		switch claim[0] {
		case "OrderClaimed":
			wantOrders++
			won := 0
			var winner string
			for _, a := range answers {
				switch a.Status {
				case http.StatusCreated:
					won++
					winner = a.str("id")
					if a.str("status") != "confirmed" {
						t.Errorf("round %d: %s, want confirmed", round, a)
					}
				case http.StatusConflict:
					checkProblem(t, a, http.StatusConflict, "reservation-already-ordered")
				default:
					t.Errorf("round %d: %s, want 201 or 409 (an order claimed the reservation)", round, a)
				}
			}
			if won != 1 {
				t.Errorf("round %d: %d answers 201, want exactly 1 (%v)", round, won, statuses)
			}
			for _, a := range answers {
				if a.Status == http.StatusConflict && a.str("order_id") != winner {
					t.Errorf("round %d: %s: order_id, want the winner %s", round, a, winner)
				}
			}
			orderIDs = append(orderIDs, winner)
			if n := s.streamEventCount(t, "reservation-"+res); n == 0 {
				t.Errorf("round %d: no reservation stream", round)
			}
		case "ExpiryClaimed":
			for _, a := range answers {
				checkProblem(t, a, http.StatusGone, "reservation-expired")
			}
		default:
			t.Fatalf("round %d: claim stream %v", round, claim)
		}
		s.checkCapacity(t, show)
	}
	s.settle(t)
	// Every hold is either ordered or released by now.
	b := s.seatBook(t, show)
	if b.Held != 0 || b.Ordered != 2*wantOrders {
		t.Errorf("show %s: held %d, ordered %d; want 0 and %d", show, b.Held, b.Ordered, 2*wantOrders)
	}
	s.checkExpiriesEnd(t, show, wantOrders, 4-wantOrders, orderIDs...)
}

// TestExpiry_ShortHoldIsNotBlockedByALongerHoldBeforeIt: after a deploy that
// shortens BOOKING_RESERVATION_HOLD, a short hold recorded after a long one
// still expires at its own expires_at (the expiry job schedules by due time,
// not in log order).
func TestExpiry_ShortHoldIsNotBlockedByALongerHoldBeforeIt(t *testing.T) {
	t.Parallel()
	env := fastEnv()
	env["BOOKING_RESERVATION_HOLD"] = "10m"
	s := mustStart(t, Options{Env: env})
	show := s.mustCreateShow(t, 4)
	long := s.mustReserve(t, tokAlice, show, 2)
	s.Restart(func(o *Options) {
		e := fastEnv()
		e["BOOKING_RESERVATION_HOLD"] = "2s"
		o.Env = e
		o.HoldAt = []string{"expiry.claiming"} // the seats stay held until the test looked
	})
	short := s.mustReserve(t, tokBob, show, 2)
	s.waitHeld(t, "expiry.claiming", 1)
	if got := s.available(t, show); got != 0 {
		t.Fatalf("GET /v1/shows/%s: available = %d, want 0", show, got)
	}
	if got := s.streamTypes(t, "reservation-order-"+short); len(got) != 0 {
		t.Fatalf("claim stream of the short hold %v while the expiry job is held before its claim, want none", got)
	}
	s.releaseHold(t, "expiry.claiming")
	if !eventually(30*time.Second, func() bool { return s.available(t, show) == 2 }) {
		t.Fatalf("30 s after the short hold was claimed: available = %d, want 2 (claim of the short hold: %v)",
			s.available(t, show), s.streamTypes(t, "reservation-order-"+short))
	}
	if got := s.streamTypes(t, "reservation-order-"+long); len(got) != 0 {
		t.Errorf("the 10 min hold was claimed early: %v", got)
	}
}
