package test

// The rest of the crash matrix: the process is SIGKILLed right after the
// expiry claim, the cancel's commit point, the payment fence (before the
// provider call) and the record of a decline. After a restart, with no
// client repeat, the background jobs finish every flow; each test then
// counts orders, charges net of refunds at the simulator, seats
// (capacity = available + held + ordered, every claim with its order or its
// release, no intent unfinished) and the events of every type.

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// crashBound is how long a crash test waits for the state it needs: for the
// injected crash to happen, and for the background jobs to finish the flow
// after the restart (payment leases and settle margins of several seconds,
// on a loaded machine).
const crashBound = 60 * time.Second

// wantEvents checks the number of events of every type in the store: each
// type in exact has exactly that many, each type in atLeast at least that
// many (steps a loaded machine may repeat, such as a renewed lease), and
// every other type none. Every order that can send no more has its key
// deleted and its erasure recorded once: unless exact names
// PaymentSecretsShredded, wantEvents waits for those (waitErasures) and
// expects one per such order.
func (s *server) wantEvents(t testing.TB, exact, atLeast map[string]int) {
	t.Helper()
	if _, ok := exact["PaymentSecretsShredded"]; !ok {
		if ended := s.sendingEndedOrders(t); len(ended) > 0 {
			s.waitErasures(t, ended...)
			exact = maps.Clone(exact)
			exact["PaymentSecretsShredded"] = len(ended)
		}
	}
	got := s.typeCounts(t)
	var bad []string
	for typ, n := range exact {
		if got[typ] != n {
			bad = append(bad, fmt.Sprintf("%s %d, want %d", typ, got[typ], n))
		}
	}
	for typ, n := range atLeast {
		if got[typ] < n {
			bad = append(bad, fmt.Sprintf("%s %d, want at least %d", typ, got[typ], n))
		}
	}
	for typ, n := range got {
		if _, ok := exact[typ]; ok {
			continue
		}
		if _, ok := atLeast[typ]; ok {
			continue
		}
		bad = append(bad, fmt.Sprintf("%s %d, want 0", typ, n))
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("event store: %s (all: %v)", strings.Join(bad, "; "), got)
	}
}

// sendingEndedOrders returns the ids of the orders whose stream has an
// event after which the order sends nothing more (sendingEnds): their keys
// are deleted.
func (s *server) sendingEndedOrders(t testing.TB) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, e := range s.readLog(t) {
		id, ok := strings.CutPrefix(e.Stream, "order-")
		if !ok || seen[id] {
			continue
		}
		if slices.Contains(sendingEnds, e.Type) {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// crashCall sends c with a client that never reuses connections and expects
// the process to die before it answers; it then waits for the exit.
func (s *server) crashCall(t testing.TB, c call, step string) {
	t.Helper()
	c.Client = crashClient()
	if r, err := s.send(context.Background(), c); err == nil {
		t.Fatalf("%s, want a connection error (the process is killed after %s)", r, step)
	}
	s.WaitExit(crashBound)
}

// crashEnv is fastEnv with a 30 s intent lease: these tests count every
// event type exactly, and with fastEnv's 1 s lease a request slowed for a
// second on a busy machine (before the crash) would get an IntentResumed
// from recovery. None of them needs a quick intent takeover: each crash
// point is after a commit point, or in a job.
func crashEnv() map[string]string { return fastEnv("BOOKING_INTENT_LEASE", "30s") }

// crashOrder sends alice's order for reservation res paid with pay under a
// fresh key, expecting booking serve to die right after step (crashCall),
// and returns the request (for repeats) and the id of the one order
// claimed.
func (s *server) crashOrder(t testing.TB, res, pay, step string) (call, string) {
	t.Helper()
	order := orderCall(tokAlice, newKey(), res, pay)
	s.crashCall(t, order, step)
	return order, s.onlyClaimedOrder(t, "after the crash at "+step)
}

// mustCrashOrder starts booking serve (fast timers, the simulator outside)
// armed to die right after step, reserves 2 seats of a new show and sends
// alice's order paid with pay (crashOrder). It returns the server, down, the
// show, the reservation, the order request and the id of the one order
// claimed.
func mustCrashOrder(t *testing.T, step, pay string) (s *server, show, res string, order call, id string) {
	t.Helper()
	s, show, res = mustStartReserved(t, Options{CrashAt: []string{step}, Env: crashEnv(), ExternalSim: true}, 2)
	order, id = s.crashOrder(t, res, pay, step)
	return s, show, res, order, id
}

// killWhileHeld sends c (armed hold at step) with a client that never
// reuses connections, waits until it is parked at step, SIGKILLs booking
// serve and stops the test unless c failed with a connection error.
func (s *server) killWhileHeld(t testing.TB, c call, step string) {
	t.Helper()
	c.Client = crashClient()
	done := make(chan error, 1)
	go func() { _, err := s.send(context.Background(), c); done <- err }()
	s.waitHeld(t, step, 1)
	s.Kill()
	if err := <-done; err == nil {
		t.Fatalf("%s %s answered, want a connection error (killed while held at %s)", c.Method, c.Path, step)
	}
}

// TestCrash_KilledAfterExpiryClaimIsFinishedWithoutRepeat: the expiry job
// writes the expiry claim of a 2 s hold and the process dies at once
// (expiry.claimed), before the seats are released. After a restart the
// expiry job and the process manager release the seats and mark the
// reservation expired without any request; an order for it is then 410,
// and its repeat the same, replayed.
func TestCrash_KilledAfterExpiryClaimIsFinishedWithoutRepeat(t *testing.T) {
	t.Parallel()
	env := crashEnv()
	env["BOOKING_RESERVATION_HOLD"] = "2s"
	s, show, res := mustStartReserved(t, Options{CrashAt: []string{"expiry.claimed"}, Env: env, ExternalSim: true}, 2)
	s.WaitExit(crashBound) // no request: the expiry job is due 2 s after the hold
	claim := "reservation-order-" + res
	if got := s.streamTypes(t, claim); strings.Join(got, ",") != "ExpiryClaimed" {
		t.Fatalf("claim stream after the crash: %v, want [ExpiryClaimed]", got)
	}
	t.Logf("at the crash: %d SeatsReleased, %d ReservationExpired", s.countType(t, "show-", "SeatsReleased"),
		s.countType(t, "reservation-", "ReservationExpired"))

	s.Restart(withoutCrash)
	if !eventually(crashBound, func() bool {
		return s.countType(t, "show-", "SeatsReleased") == 1 && s.countType(t, "reservation-", "ReservationExpired") == 1 &&
			s.available(t, show) == 10
	}) {
		t.Fatalf("%s after the restart: %d SeatsReleased, %d ReservationExpired, available %d; want 1, 1, 10", crashBound,
			s.countType(t, "show-", "SeatsReleased"), s.countType(t, "reservation-", "ReservationExpired"), s.available(t, show))
	}
	if r := s.do(t, "GET", "/v1/reservations/"+res, tokAlice, "", nil); r.Status != http.StatusOK || r.str("status") != "expired" {
		t.Errorf("%s, want 200 status expired", r)
	}
	key := newKey()
	r := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	checkProblem(t, r, http.StatusGone, "reservation-expired")
	again := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	checkProblem(t, again, http.StatusGone, "reservation-expired")
	if r.replayed() || !again.replayed() {
		t.Errorf("Idempotent-Replayed: first %v, repeat %v; want false, true", r.replayed(), again.replayed())
	}

	s.settle(t)
	s.checkOrders(t, tokAlice, 0)
	if c := s.checkCharges(t, 0, 0); c.Net != 0 {
		t.Errorf("GET /_sim/charges: net %d, want 0", c.Net)
	}
	s.wantEvents(t, map[string]int{"ShowScheduled": 1, "SeatsHeld": 1, "ReservationHeld": 1, "ExpiryClaimed": 1,
		"SeatsReleased": 1, "ReservationExpired": 1, "IntentRecorded": 3, "IntentRejected": 1}, nil)
	s.checkSeats(t, show)
}

// TestCrash_KilledAfterCancelRecordedIsFinishedWithoutRepeat: the process
// dies right after a cancel's commit point (cancel.recorded), before any of
// its follow-ups. For a confirmed order the refund is sent, recorded and the
// seats released; for an order whose payment outcome is unknown
// (cancelling) the reconciler finds no charge, waits until the last send
// settled and ends the order cancelled. Both without a client repeat; a
// repeat of the cancel then replays 200 cancelled; net charge 0.
func TestCrash_KilledAfterCancelRecordedIsFinishedWithoutRepeat(t *testing.T) {
	t.Parallel()
	t.Run("confirmed", func(t *testing.T) {
		t.Parallel()
		s, show, res := mustStartReserved(t, Options{CrashAt: []string{"cancel.recorded"}, Env: crashEnv(), ExternalSim: true}, 2)
		id := s.mustPlaceOrder(t, newKey(), res, "tok_visa", 10, http.StatusCreated, http.StatusAccepted) // 202 on a slow machine
		s.waitStatus(t, id, crashBound, "confirmed")

		key := newKey()
		cancel := call{Method: "POST", Path: "/v1/orders/" + id + "/cancel", Token: tokAlice, Key: keyOf(key)}
		s.crashCall(t, cancel, "cancel.recorded")
		wantCounts(t, id, s.orderEvents(t, id), map[string]int{"RefundRequested": 1, "OrderCancelled": 1})
		t.Logf("at the crash: order stream %v", typesOf(s.orderEvents(t, id)))

		s.Restart(withoutCrash)
		var m chargeSummary
		if !eventually(crashBound, func() bool {
			m = s.orderMoney(t, id)
			return s.orderStatus(t, tokAlice, id) == "cancelled" && m.Net == 0 &&
				len(ofType(s.orderEvents(t, id), "RefundSucceeded")) == 1 && s.available(t, show) == 10 &&
				s.countType(t, "reservation-", "ReservationReleased") == 1
		}) {
			t.Fatalf("%s after the restart (no repeat): status %q, charges %+v, stream %v, available %d, %d ReservationReleased; want cancelled, net 0, RefundSucceeded, 10, 1",
				crashBound, s.orderStatus(t, tokAlice, id), m, typesOf(s.orderEvents(t, id)), s.available(t, show),
				s.countType(t, "reservation-", "ReservationReleased"))
		}
		again := s.doCall(t, cancel)
		wantStatus(t, again, http.StatusOK)
		if !again.replayed() || again.str("status") != "cancelled" || again.str("id") != id {
			t.Errorf("%s: want order %s cancelled with Idempotent-Replayed: true", again, id)
		}
		if rr := s.do(t, "GET", "/v1/reservations/"+res, tokAlice, "", nil); rr.str("status") != "released" {
			t.Errorf("%s, want status released", rr)
		}

		s.settle(t)
		s.checkOrders(t, tokAlice, 1, id)
		if c := s.checkCharges(t, 1, 0); c.Net != 0 {
			t.Errorf("GET /_sim/charges: net %d, want 0 (the charge refunded)", c.Net)
		}
		if refs := s.simRefunds(t); len(refs) != 1 || refs[0].Amount != 2*priceAmount {
			t.Errorf("simulator: refunds %+v, want exactly one of %d", refs, 2*priceAmount)
		}
		s.checkRefundsRecordedFirst(t, 0)
		s.wantEvents(t, map[string]int{"ShowScheduled": 1, "SeatsHeld": 1, "ReservationHeld": 1, "IntentRecorded": 4,
			"OrderClaimed": 1, "OrderPlaced": 1, "ReservationOrdered": 1, "PaymentAttemptStarted": 1, "PaymentSucceeded": 1,
			"OrderConfirmed": 1, "RefundRequested": 1, "OrderCancelled": 1, "RefundSucceeded": 1, "SeatsReleased": 1,
			"ReservationReleased": 1}, nil)
		s.checkSeats(t, show)
	})

	t.Run("cancelling", func(t *testing.T) {
		t.Parallel()
		s, show, res := mustStartReserved(t, Options{CrashAt: []string{"cancel.recorded"}, Env: crashEnv(), ExternalSim: true}, 2)
		// tok_error_before_commit: the provider answers 500 and charges
		// nothing, so the attempt's outcome stays unknown.
		id := s.mustPlaceOrder(t, newKey(), res, "tok_error_before_commit", 0, http.StatusAccepted)
		if !eventually(crashBound, func() bool { return len(ofType(s.orderEvents(t, id), "PaymentOutcomeUnknown")) > 0 }) {
			t.Fatalf("order-%s: no PaymentOutcomeUnknown within %s (stream %v)", id, crashBound, typesOf(s.orderEvents(t, id)))
		}

		key := newKey()
		cancel := call{Method: "POST", Path: "/v1/orders/" + id + "/cancel", Token: tokAlice, Key: keyOf(key)}
		s.crashCall(t, cancel, "cancel.recorded")
		wantCounts(t, id, s.orderEvents(t, id), map[string]int{"OrderCancelRequested": 1})
		t.Logf("at the crash: order stream %v", typesOf(s.orderEvents(t, id)))

		s.Restart(withoutCrash)
		if !eventually(crashBound, func() bool {
			return s.orderStatus(t, tokAlice, id) == "cancelled" && s.available(t, show) == 10
		}) {
			t.Fatalf("%s after the restart (no repeat): status %q, stream %v, available %d; want cancelled, 10",
				crashBound, s.orderStatus(t, tokAlice, id), typesOf(s.orderEvents(t, id)), s.available(t, show))
		}
		again := s.doCall(t, cancel)
		wantStatus(t, again, http.StatusOK)
		if !again.replayed() || again.str("status") != "cancelled" {
			t.Errorf("%s: want cancelled with Idempotent-Replayed: true", again)
		}

		s.settle(t)
		s.checkOrders(t, tokAlice, 1, id)
		if c := s.checkCharges(t, 0, 0); c.Net != 0 {
			t.Errorf("GET /_sim/charges: net %d, want 0", c.Net)
		}
		wantNoSecondAttempt(t, id, s.orderEvents(t, id))
		s.wantEvents(t, map[string]int{"ShowScheduled": 1, "SeatsHeld": 1, "ReservationHeld": 1, "IntentRecorded": 4,
			"OrderClaimed": 1, "OrderPlaced": 1, "ReservationOrdered": 1, "OrderCancelRequested": 1, "OrderCancelled": 1,
			"SeatsReleased": 1, "ReservationReleased": 1},
			map[string]int{"PaymentAttemptStarted": 1, "PaymentOutcomeUnknown": 1})
		s.checkSeats(t, show)
	})
}

// TestCrash_KilledAfterPaymentFenceIsFinishedWithoutRepeat: the process
// dies after it checked its payment lease and before the provider call
// (payment.fenced): nothing was charged. After a restart the reconciler
// waits for the dead executor's lease, finds no charge, takes the lease over
// and sends the same attempt (same key, same bytes): one charge, the order
// confirmed without a client repeat, and a repeat replays 201.
func TestCrash_KilledAfterPaymentFenceIsFinishedWithoutRepeat(t *testing.T) {
	t.Parallel()
	s, show, _, order, id := mustCrashOrder(t, "payment.fenced", "tok_visa")
	wantCounts(t, id, s.orderEvents(t, id), map[string]int{"PaymentAttemptStarted": 1, "PaymentSucceeded": 0})
	if c := s.charges(t); len(c.All) != 0 {
		t.Fatalf("GET /_sim/charges after the crash: %+v, want none (killed before the provider call)", c.All)
	}

	s.Restart(withoutCrash)
	s.waitRecovered(t, id, crashBound)
	s.checkReplayedOrder(t, order, id)
	c := s.checkPaidOnce(t, id)
	if c.Net != 2*priceAmount {
		t.Errorf("GET /_sim/charges: net %d, want %d", c.Net, 2*priceAmount)
	}
	if len(c.All) == 1 && c.All[0].IdempotencyKey != "order-"+id+"-1" {
		t.Errorf("GET /_sim/charges: key %q, want order-%s-1 (the same attempt)", c.All[0].IdempotencyKey, id)
	}
	evs := s.orderEvents(t, id)
	wantNoSecondAttempt(t, id, evs)
	s.wantEvents(t, map[string]int{"ShowScheduled": 1, "SeatsHeld": 1, "ReservationHeld": 1, "IntentRecorded": 3,
		"OrderClaimed": 1, "OrderPlaced": 1, "ReservationOrdered": 1, "PaymentSucceeded": 1, "OrderConfirmed": 1},
		// The dead executor's lease, then at least one takeover.
		map[string]int{"PaymentAttemptStarted": 2})
	s.wantAvailable(t, show, 8)
	s.checkSeats(t, show)
}

// TestCrash_KilledAfterDeclineRecordedIsFinishedWithoutRepeat: the process
// dies right after it recorded a decline (payment.recorded with
// tok_decline), before the seats were released. After a restart the process
// manager releases them without a client repeat; a repeat replays 402, a new
// key gets 409 naming the failed order; one failed charge, net 0.
func TestCrash_KilledAfterDeclineRecordedIsFinishedWithoutRepeat(t *testing.T) {
	t.Parallel()
	s, show, res, order, id := mustCrashOrder(t, "payment.recorded", "tok_decline")
	wantCounts(t, id, s.orderEvents(t, id), map[string]int{"PaymentFailed": 1, "OrderFailed": 1})
	t.Logf("at the crash: %d SeatsReleased", s.countType(t, "show-", "SeatsReleased"))

	s.Restart(withoutCrash)
	if !eventually(crashBound, func() bool {
		return s.available(t, show) == 10 && s.countType(t, "reservation-", "ReservationReleased") == 1
	}) {
		t.Fatalf("%s after the restart (no repeat): available %d, %d ReservationReleased; want 10, 1",
			crashBound, s.available(t, show), s.countType(t, "reservation-", "ReservationReleased"))
	}
	g := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
	if g.str("status") != "failed" || g.str("failure_reason") != "payment_declined" {
		t.Errorf("%s, want status failed, failure_reason payment_declined", g)
	}
	r := s.doCall(t, order)
	checkProblem(t, r, http.StatusPaymentRequired, "payment-declined")
	if !r.replayed() || orderIDOf(t, r) != id {
		t.Errorf("%s: want order %s with Idempotent-Replayed: true", r, id)
	}
	other := s.do(t, "POST", "/v1/orders", tokAlice, newKey(), orderBody(res, "tok_visa"))
	if checkProblem(t, other, http.StatusConflict, "reservation-already-ordered") && other.str("order_id") != id {
		t.Errorf("%s: want order_id %s", other, id)
	}

	s.settle(t)
	s.checkOrders(t, tokAlice, 1, id)
	if c := s.checkCharges(t, 0, 1); c.Net != 0 {
		t.Errorf("GET /_sim/charges: net %d, want 0", c.Net)
	}
	s.wantEvents(t, map[string]int{"ShowScheduled": 1, "SeatsHeld": 1, "ReservationHeld": 1, "IntentRecorded": 4,
		"IntentRejected": 1, "OrderClaimed": 1, "OrderPlaced": 1, "ReservationOrdered": 1, "PaymentAttemptStarted": 1,
		"PaymentFailed": 1, "OrderFailed": 1, "SeatsReleased": 1, "ReservationReleased": 1}, nil)
	s.checkSeats(t, show)
}

// TestCrash_KilledAfterTheTokenIsSealedLeavesNoKey: booking serve is
// SIGKILLed right after an order's payment token was sealed under a new
// data key, before the unit that records the order's intent with its key
// row (order.token-held). On PostgreSQL that unit is one transaction, so
// the crash leaves nothing: no key row, no intent, no claim. After a
// restart, a repeat of the request places and confirms an order with a key
// of its own, which the order's end deletes. (Where the key row is a
// statement of its own, with events on KurrentDB, the reconciler deletes
// the key of an order that can never be placed within a minute:
// commands' TestShredUnplaced.)
func TestCrash_KilledAfterTheTokenIsSealedLeavesNoKey(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{CrashAt: []string{"order.token-held"}, Env: fastEnv(), ExternalSim: true}, 2)
	order := orderCall(tokAlice, newKey(), res, "tok_visa")
	intents := s.countType(t, "intent-", "IntentRecorded") // the show's and the reservation's
	s.crashCall(t, order, "order.token-held")
	if n := s.queryInt(t, `SELECT count(*) FROM order_keys`); n != 0 {
		t.Fatalf("order_keys: %d rows after the crash, want 0 (the key row commits with the intent)", n)
	}
	if ids := s.claimedOrderIDs(t); len(ids) != 0 {
		t.Fatalf("OrderClaimed %v after the crash, want none", ids)
	}
	s.wantCount(t, "intent-", "IntentRecorded", intents, "(the crashed request's intent was never recorded)")
	s.Restart(withoutCrash)

	r := s.doCall(t, order)
	wantStatus(t, r, http.StatusCreated)
	if got := r.str("status"); got != "confirmed" || r.replayed() {
		t.Fatalf("%s, want the repeat's order confirmed, not replayed (nothing was recorded before)", r)
	}
	s.checkPaidOnce(t, r.str("id"))
	if !eventually(crashBound, func() bool { return s.queryInt(t, `SELECT count(*) FROM order_keys`) == 0 }) {
		t.Errorf("order_keys: %d rows after the repeat's order confirmed, want 0 (its key deleted at its end)",
			s.queryInt(t, `SELECT count(*) FROM order_keys`))
	}
}
