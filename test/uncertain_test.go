package test

// An uncertain commit: the answer of an append is lost after the server
// committed it (a proxy between booking serve and PostgreSQL withholds the
// server's answer up to its ReadyForQuery and then drops the connection).
// The service repeats the same append (same event ids, same expected
// revision) to learn what committed and goes on; only when the repeats lose
// their answers too does it answer 503, which stores nothing, and a repeat
// of the request resolves to what committed.

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/booking/commands"
)

// uncertainStep is an append whose answer a test cuts.
type uncertainStep struct {
	name   string // sub-test name
	prefix string // stream name prefix
	typ    string // event type in the batch
}

var uncertainSteps = []uncertainStep{
	{"intent record", "intent-", "IntentRecorded"},
	{"order claim", "reservation-order-", "OrderClaimed"},
	// The first attempt's lease, in the order's unit with the claim.
	{"payment attempt", "order-", "PaymentAttemptStarted"},
}

// uncertainEnv sets an intent lease long enough that no takeover happens
// even on a slow machine and a frequent reconciler, and leaves the payment
// lease at its default 30 s so that a send never needs a renewed lease.
func uncertainEnv() map[string]string {
	return map[string]string{
		"BOOKING_INTENT_LEASE":      "30s",
		"BOOKING_RECOVERY_INTERVAL": "1s",
	}
}

// checkCuts waits until the proxy has cut n answers (a payment attempt is
// appended after the answer to the request), then checks that it cut exactly
// n, each of an append to a stream of step that the server committed.
func (s *server) checkCuts(t testing.TB, step uncertainStep, n int) {
	t.Helper()
	var cuts []cutAnswer
	eventually(crashBound, func() bool { cuts = s.pgProxy.cutAnswers(); return len(cuts) >= n })
	if len(cuts) != n || s.pgProxy.armed() != 0 {
		t.Fatalf("pg proxy: cut %d answers %+v, want %d", len(cuts), cuts, n)
	}
	for _, c := range cuts {
		if !strings.HasPrefix(c.Stream, step.prefix) || !slices.Contains(c.Types, step.typ) || !c.Committed {
			t.Errorf("pg proxy: cut %+v, want a committed append of %s to %s…", c, step.typ, step.prefix)
		}
	}
}

// unknownAppends returns booking_append_unknown_outcomes_total{result}.
func (s *server) unknownAppends(t testing.TB, result string) float64 {
	t.Helper()
	return s.metric(t, s.URL, `booking_append_unknown_outcomes_total{result="`+result+`"}`)
}

// TestUncertainCommit_LostAnswerIsLearnedByRepeatingTheAppend: the answer
// of the intent record, of the order claim and of the payment attempt's
// lease is lost after the commit. The service repeats the append, learns
// that it committed and goes on: the first request answers 201 confirmed,
// a repeat with the same key 201 replayed; one order, one charge, each event
// once (no takeover, no second lease), nothing transient stored.
func TestUncertainCommit_LostAnswerIsLearnedByRepeatingTheAppend(t *testing.T) {
	t.Parallel()
	for _, step := range uncertainSteps {
		t.Run(step.name, func(t *testing.T) {
			t.Parallel()
			s, show, res := mustStartReserved(t, Options{PGProxy: true, Env: uncertainEnv()}, 2)
			key := newKey()

			s.pgProxy.cutNext(step.prefix, step.typ, 1)
			r := s.placeOrderWait(t, key, res, "tok_visa", 10)
			wantStatus(t, r, http.StatusCreated)
			id := orderIDOf(t, r)
			if r.replayed() || r.str("status") != "confirmed" {
				t.Errorf("%s: want confirmed, not replayed", r)
			}
			s.checkCuts(t, step, 1)
			again := s.placeOrderWait(t, key, res, "tok_visa", 10)
			wantStatus(t, again, http.StatusCreated)
			if !again.replayed() || again.str("id") != id || again.str("status") != "confirmed" {
				t.Errorf("%s: want confirmed order %s with Idempotent-Replayed: true", again, id)
			}

			s.settle(t)
			s.checkOrders(t, tokAlice, 1, id)
			if c := s.checkCharges(t, 1, 0); c.Net != 2*priceAmount {
				t.Errorf("GET /_sim/charges: net %d, want %d", c.Net, 2*priceAmount)
			}
			if got := s.streamTypes(t, intentStream("alice", commands.OpPlaceOrder, key)); !slices.Equal(got, []string{"IntentRecorded"}) {
				t.Errorf("intent stream: %v, want [IntentRecorded] (the request stayed its executor)", got)
			}
			s.wantEvents(t, map[string]int{"ShowScheduled": 1, "SeatsHeld": 1, "ReservationHeld": 1, "IntentRecorded": 3,
				"OrderClaimed": 1, "OrderPlaced": 1, "ReservationOrdered": 1, "PaymentAttemptStarted": 1,
				"PaymentSucceeded": 1, "OrderConfirmed": 1}, nil)
			if n := s.unknownAppends(t, "resolved"); n != 1 {
				t.Errorf(`GET /metrics: booking_append_unknown_outcomes_total{result="resolved"} = %v, want 1`, n)
			}
			s.wantAvailable(t, show, 8)
			s.checkSeats(t, show)
		})
	}
}

// TestUncertainCommit_AnswerLostOnEveryRepeatIs503ThenRepeatResolves: the
// answers of the append and of all its repeats are lost (the first try
// committed; the repeats found it and wrote nothing). The outcome stays
// unknown to the request: the order's unit (its intent record, its claim,
// and with it the order placed and the first payment attempt's lease),
// whichever of its events the cut matches, answers 503 with Retry-After. Nothing transient is
// stored, and a repeat of the request with the same key resolves to what
// committed: 201 replayed, one order, one charge.
func TestUncertainCommit_AnswerLostOnEveryRepeatIs503ThenRepeatResolves(t *testing.T) {
	t.Parallel()
	const cuts = 4 // the first try and its three repeats
	for _, step := range uncertainSteps {
		t.Run(step.name, func(t *testing.T) {
			t.Parallel()
			s, show, res := mustStartReserved(t, Options{PGProxy: true, Env: uncertainEnv()}, 2)
			key := newKey()
			stream := intentStream("alice", commands.OpPlaceOrder, key)

			s.pgProxy.cutNext(step.prefix, step.typ, cuts)
			r := s.placeOrderWait(t, key, res, "tok_visa", 0)
			// The first attempt's lease commits in the order's unit, with the
			// claim: its answer lost is the claim's.
			if checkProblem(t, r, http.StatusServiceUnavailable, "unavailable") && r.Header.Get("Retry-After") == "" {
				t.Errorf("%s: no Retry-After", r)
			}
			s.checkCuts(t, step, cuts)
			var unresolved float64
			if !eventually(crashBound, func() bool { unresolved = s.unknownAppends(t, "unresolved"); return unresolved == 1 }) {
				t.Errorf(`GET /metrics: booking_append_unknown_outcomes_total{result="unresolved"} = %v, want 1`, unresolved)
			}
			if n := s.unknownAppends(t, "resolved"); n != 0 {
				t.Errorf(`GET /metrics: booking_append_unknown_outcomes_total{result="resolved"} = %v, want 0`, n)
			}
			s.wantCount(t, "intent-", "IntentRejected", 0, "(a 503 is never stored)")

			// The client repeats with the same key until it gets an outcome
			// (409 idempotency-key-in-use while the dead request's intent
			// lease runs; 202 while the payment is pending).
			var again *resp
			if !eventually(crashBound, func() bool {
				again = s.placeOrderWait(t, key, res, "tok_visa", 10)
				return again.Status != http.StatusConflict && again.Status != http.StatusAccepted
			}) {
				t.Fatalf("%s after %s, want an outcome", again, crashBound)
			}
			wantStatus(t, again, http.StatusCreated)
			id := orderIDOf(t, again)
			if !again.replayed() || again.str("status") != "confirmed" {
				t.Errorf("%s: want confirmed with Idempotent-Replayed: true", again)
			}

			s.settle(t)
			s.checkOrders(t, tokAlice, 1, id)
			if c := s.checkCharges(t, 1, 0); c.Net != 2*priceAmount {
				t.Errorf("GET /_sim/charges: net %d, want %d", c.Net, 2*priceAmount)
			}
			exact := map[string]int{"ShowScheduled": 1, "SeatsHeld": 1, "ReservationHeld": 1, "IntentRecorded": 3,
				"OrderClaimed": 1, "OrderPlaced": 1, "ReservationOrdered": 1, "PaymentAttemptStarted": 1,
				"PaymentSucceeded": 1, "OrderConfirmed": 1}
			// The intent record is in the order's unit with the claim, so
			// every cut is past the commit point: nobody takes over.
			if types := s.streamTypes(t, stream); !slices.Equal(types, []string{"IntentRecorded"}) {
				t.Errorf("intent stream: %v, want [IntentRecorded] (past the commit point nobody takes over)", types)
			}
			s.wantEvents(t, exact, nil)
			s.wantAvailable(t, show, 8)
			s.checkSeats(t, show)
			t.Logf("first answer %d; the repeat answered %d replayed", r.Status, again.Status)
		})
	}
}
