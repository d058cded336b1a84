package test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands"
)

// recoveryBound is how long the tests give background jobs to finish
// interrupted work after a restart.
const recoveryBound = 60 * time.Second

// crashClient never reuses connections and waits long enough for a crash.
func crashClient() *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// intentStream is the intent stream of (actor, operation, key).
func intentStream(actor, op, key string) string { return commands.IntentStream(actor, op, key) }

// waitRecovered waits up to d, with no repeat from the client, until order
// id is confirmed, the simulator holds one succeeded charge and the
// reservation is marked ordered; it stops the test otherwise.
func (s *server) waitRecovered(t testing.TB, id string, d time.Duration) {
	t.Helper()
	var st string
	var c chargeSummary
	ordered := -1
	if !eventually(d, func() bool {
		st, c = s.orderStatus(t, tokAlice, id), s.charges(t)
		if st != "confirmed" || c.Succeeded != 1 {
			return false
		}
		ordered = s.countType(t, "reservation-", "ReservationOrdered")
		return ordered == 1
	}) {
		t.Fatalf("%s after the restart (no repeat): order %s status %q, charges %s, %d ReservationOrdered (-1: not counted), stream %v; want confirmed, 1 succeeded, 1",
			d, id, st, c, ordered, typesOf(s.orderEvents(t, id)))
	}
}

// orderStatus answers GET /v1/orders/{id}'s status.
func (s *server) orderStatus(t testing.TB, token, id string) string {
	t.Helper()
	return s.do(t, "GET", "/v1/orders/"+id, token, "", nil).str("status")
}

// TestRecovery_KilledAfterEachStepIsFinishedWithoutRepeat: the process is
// SIGKILLed right after each step of the order flow and of the reservation
// flow; after a restart, with no client repeat, recovery, the process
// manager and the reconciler finish every intent within the bound, a later
// repeat replays that result, there is never a second order or charge, and
// per show capacity = available + held + ordered. For payment.sent the
// simulator holds its webhooks: a webhook recording the outcome before the
// send's answer reaches that step would let the request answer before the
// kill, and leave the outcome to the webhook instead of the reconciler.
func TestRecovery_KilledAfterEachStepIsFinishedWithoutRepeat(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"order.claimed", "order.placed", "payment.sent", "payment.recorded"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			s, show, res := mustStartReserved(t, Options{CrashAt: []string{step}, Env: fastEnv(), ExternalSim: true}, 2)
			if step == "payment.sent" {
				s.pauseWebhooks(t)
			}
			order, id := s.crashOrder(t, res, "tok_visa", step)

			s.Restart(withoutCrash)
			start := time.Now()
			s.waitRecovered(t, id, recoveryBound)
			t.Logf("crash at %s: order confirmed %s after the restart without a repeat", step, time.Since(start).Round(100*time.Millisecond))
			s.checkNoUnfinishedIntents(t, 30*time.Second)

			s.checkReplayedOrder(t, order, id)
			c := s.checkPaidOnce(t, id)
			if c.Net != 2*priceAmount {
				t.Errorf("GET /_sim/charges: net %d, want %d", c.Net, 2*priceAmount)
			}
			s.wantCount(t, "order-", "OrderConfirmed", 1)
			s.wantCount(t, "intent-", "IntentRecorded", 3, "(show, reservation, order)")
			s.wantCount(t, "intent-", "IntentRejected", 0)
			s.wantAvailable(t, show, 8)
			s.checkCapacity(t, show)
		})
	}

	t.Run("reservation.held", func(t *testing.T) {
		t.Parallel()
		s := mustStart(t, Options{CrashAt: []string{"reservation.held"}, Env: fastEnv(), ExternalSim: true})
		// The show is created before the crash point matters (shows have no step).
		show := s.mustCreateShow(t, 10)
		key := newKey()
		reserve := call{Method: "POST", Path: "/v1/reservations", Token: tokAlice, Key: keyOf(key),
			Body: map[string]any{"show_id": show, "quantity": 3}, Client: crashClient()}
		if r, err := s.send(context.Background(), reserve); err == nil {
			t.Fatalf("%s, want a connection error (the process is killed after reservation.held)", r)
		}
		s.WaitExit(60 * time.Second)
		if n := s.countType(t, "show-", "SeatsHeld"); n != 1 {
			t.Fatalf("event store after the crash: %d SeatsHeld, want 1 (the commit point)", n)
		}
		resID, _ := s.eventData(t, "show-", "SeatsHeld")[0]["reservation_id"].(string)

		s.Restart(withoutCrash)
		if !eventually(recoveryBound, func() bool { return s.streamEventCount(t, "reservation-"+resID) > 0 }) {
			t.Fatalf("%s after the restart: stream reservation-%s does not exist", recoveryBound, resID)
		}
		s.checkNoUnfinishedIntents(t, 30*time.Second)
		reserve.Client = nil
		r := s.doCall(t, reserve)
		wantStatus(t, r, http.StatusCreated)
		if r.str("id") != resID || !r.replayed() || r.str("status") != "held" || int(r.num("quantity")) != 3 {
			t.Errorf("%s: want held reservation %s (quantity 3) with Idempotent-Replayed: true", r, resID)
		}
		s.settle(t)
		s.wantCount(t, "reservation-", "ReservationHeld", 1)
		s.wantCount(t, "show-", "SeatsHeld", 1)
		s.wantAvailable(t, show, 7)
		if n := s.orders(t); n != 0 {
			t.Errorf("event store: %d orders, want 0", n)
		}
		s.checkCharges(t, 0, 0)
		s.checkCapacity(t, show)
	})
}

// TestRecovery_KilledBeforeCommitPointIsFinishedWithoutRepeat: the
// executor dies right before the commit point (the request is parked at the
// hold point order.claiming or reservation.holding, then the process is
// SIGKILLed).
// An order's intent is recorded in the unit that claims the order, and a
// reservation's in the unit that holds its seats, so a kill before it
// leaves nothing: no intent, no claim or hold, no key; recovery has nothing
// to finish, and after a restart the repeat is served as a new request.
func TestRecovery_KilledBeforeCommitPointIsFinishedWithoutRepeat(t *testing.T) {
	t.Parallel()
	t.Run("order", func(t *testing.T) {
		t.Parallel()
		s, show, res := mustStartReserved(t, Options{Env: fastEnv(), ExternalSim: true}, 2)
		key := newKey()
		stream := intentStream("alice", commands.OpPlaceOrder, key)
		s.armHold(t, "order.claiming")
		s.killWhileHeld(t, orderCall(tokAlice, key, res, "tok_visa"), "order.claiming")
		if n := s.streamEventCount(t, "reservation-order-"+res); n != 0 {
			t.Fatalf("claim stream has %d events after the kill, want 0 (killed before the commit point)", n)
		}
		if got := s.streamTypes(t, stream); len(got) != 0 {
			t.Fatalf("intent stream after the kill: %v, want none (the intent commits with its claim)", got)
		}
		if n := s.queryInt(t, `SELECT count(*) FROM order_keys`); n != 0 {
			t.Fatalf("order_keys: %d rows after the kill, want 0 (the key commits with the claim)", n)
		}

		s.Restart()
		r := s.doCall(t, orderCall(tokAlice, key, res, "tok_visa"))
		wantStatus(t, r, http.StatusCreated)
		if r.str("status") != "confirmed" || r.replayed() {
			t.Fatalf("%s, want the repeat's order confirmed, not replayed (nothing was recorded before)", r)
		}
		if got := s.streamTypes(t, stream); len(got) == 0 || got[0] != "IntentRecorded" {
			t.Errorf("intent stream: %v, want IntentRecorded first", got)
		}
		ids := s.claimedOrderIDs(t)
		if len(ids) != 1 || ids[0] != r.str("id") {
			t.Fatalf("OrderClaimed %v, want exactly the answered order %s", ids, r.str("id"))
		}
		s.checkReplayedOrder(t, orderCall(tokAlice, key, res, "tok_visa"), ids[0])
		s.checkPaidOnce(t, ids[0])
		s.checkNoUnfinishedIntents(t, 30*time.Second)
		s.checkCapacity(t, show)
	})

	t.Run("reservation", func(t *testing.T) {
		t.Parallel()
		s := mustStart(t, Options{Env: fastEnv(), ExternalSim: true})
		show := s.mustCreateShow(t, 10)
		key := newKey()
		stream := intentStream("alice", commands.OpReserveSeats, key)
		s.armHold(t, "reservation.holding")
		body := map[string]any{"show_id": show, "quantity": 4}
		reserve := call{Method: "POST", Path: "/v1/reservations", Token: tokAlice, Key: keyOf(key), Body: body}
		s.killWhileHeld(t, reserve, "reservation.holding")
		if n := s.countType(t, "show-", "SeatsHeld"); n != 0 {
			t.Fatalf("%d SeatsHeld after the kill, want 0 (killed before the commit point)", n)
		}
		if got := s.streamTypes(t, stream); len(got) != 0 {
			t.Fatalf("intent stream after the kill: %v, want none (the intent commits with its hold)", got)
		}

		s.Restart()
		r := s.do(t, "POST", "/v1/reservations", tokAlice, key, body)
		wantStatus(t, r, http.StatusCreated)
		if r.replayed() || r.str("status") != "held" {
			t.Errorf("%s: want a held reservation, not replayed (nothing was recorded before)", r)
		}
		if got := s.streamTypes(t, stream); len(got) == 0 || got[0] != "IntentRecorded" {
			t.Errorf("intent stream: %v, want IntentRecorded first", got)
		}
		s.settle(t)
		s.wantCount(t, "show-", "SeatsHeld", 1)
		s.wantAvailable(t, show, 6)
		s.checkNoUnfinishedIntents(t, 30*time.Second)
		s.checkCapacity(t, show)
	})
}
