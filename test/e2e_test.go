package test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkOrders checks that the event store holds exactly want orders (one
// OrderClaimed and one OrderPlaced each), that the API agrees (GET
// /v1/orders/{id} finds each one for token's actor, and every id in answered
// is one of them), and returns their ids.
func (s *server) checkOrders(t testing.TB, token string, want int, answered ...string) []string {
	t.Helper()
	ids := s.claimedOrderIDs(t)
	if len(ids) != want {
		t.Errorf("event store: %d OrderClaimed %v, want %d", len(ids), ids, want)
	}
	if n := s.orders(t); n != want {
		t.Errorf("event store: %d OrderPlaced, want %d", n, want)
	}
	for _, id := range ids {
		r := s.do(t, "GET", "/v1/orders/"+id, token, "", nil)
		if r.Status != http.StatusOK || r.str("id") != id {
			t.Errorf("%s, want 200 with id %s", r, id)
		}
	}
	for _, id := range answered {
		if !slices.Contains(ids, id) {
			t.Errorf("API answered order %s, which the event store does not hold (orders %v)", id, ids)
		}
	}
	return ids
}

// checkCharges checks the simulator's charge counts.
func (s *server) checkCharges(t testing.TB, succeeded, failed int) chargeSummary {
	t.Helper()
	c := s.charges(t)
	if c.Succeeded != succeeded || c.Failed != failed {
		t.Errorf("GET /_sim/charges: %s, want %d succeeded, %d failed (%+v)", c, succeeded, failed, c.All)
	}
	return c
}

// checkPaidOnce waits until the service settled, then checks that the log
// holds exactly one order, alice's, among which every id in answered, and
// the simulator one succeeded charge and no failed one; it returns the
// charges.
func (s *server) checkPaidOnce(t testing.TB, answered ...string) chargeSummary {
	t.Helper()
	s.settle(t)
	s.checkOrders(t, tokAlice, 1, answered...)
	return s.checkCharges(t, 1, 0)
}

// TestOrder_ConfirmedWithOneTicketPerSeat: a show, a reservation and an
// order paid with tok_visa end confirmed with one ticket per seat, one
// order and one charge.
func TestOrder_ConfirmedWithOneTicketPerSeat(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{}, 3)
	s.wantAvailable(t, show, 7, "after holding 3 of 10")

	r := s.mustOrder(t, tokAlice, newKey(), res, "tok_visa")
	id := r.str("id")
	if r.str("status") != "confirmed" || r.str("reservation_id") != res {
		t.Errorf("%s: want status confirmed for reservation %s", r, res)
	}
	if tickets, _ := r.get("tickets").([]any); len(tickets) != 3 {
		t.Errorf("%s: %d tickets, want 3 (the quantity)", r, len(tickets))
	}
	if r.num("amount.amount") != 3*priceAmount || r.str("amount.currency") != priceCurrency {
		t.Errorf("%s: amount, want %d %s", r, 3*priceAmount, priceCurrency)
	}
	if r.replayed() {
		t.Errorf("%s: Idempotent-Replayed set on the first request", r.Req)
	}
	if loc := r.Header.Get("Location"); loc != "/v1/orders/"+id {
		t.Errorf("%s: Location = %q, want /v1/orders/%s", r.Req, loc, id)
	}

	g := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
	wantStatus(t, g, http.StatusOK)
	if g.str("status") != "confirmed" || g.str("payment.status") != "succeeded" {
		t.Errorf("%s: want status confirmed, payment succeeded", g)
	}
	s.wantReservation(t, res, "ordered")
	s.wantAvailable(t, show, 7, "after ordering 3 of 10")

	c := s.checkPaidOnce(t, id)
	s.wantCount(t, "order-", "OrderConfirmed", 1)
	s.wantCount(t, "reservation-", "ReservationOrdered", 1)
	for stream, want := range map[string][]string{
		"reservation-order-" + res: {"OrderClaimed"},
		"reservation-" + res:       {"ReservationHeld", "ReservationOrdered"},
	} {
		if got := s.streamTypes(t, stream); !slices.Equal(got, want) {
			t.Errorf("event store: stream %s = %v, want %v", stream, got, want)
		}
	}
	// Settled, the order's key is gone and its erasure recorded last.
	s.settle(t)
	if got := s.streamTypes(t, "order-"+id); len(got) < 3 || got[0] != "OrderPlaced" || got[len(got)-2] != "OrderConfirmed" ||
		got[len(got)-1] != "PaymentSecretsShredded" || count(got, "PaymentSucceeded") != 1 {
		t.Errorf("event store: stream order-%s = %v, want OrderPlaced first, OrderConfirmed then PaymentSecretsShredded last, one PaymentSucceeded", id, got)
	}
	if c.Net != 3*priceAmount {
		t.Errorf("GET /_sim/charges: net %d, want %d", c.Net, 3*priceAmount)
	}
	if len(c.All) == 1 && c.All[0].Metadata["order_id"] != id {
		t.Errorf("GET /_sim/charges: charge metadata %v, want order_id %s", c.All[0].Metadata, id)
	}
}

// TestOrder_RepeatReturnsSameOrder: repeating the order request answers the
// same order, marked replayed, with no second order or charge.
func TestOrder_RepeatReturnsSameOrder(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{}, 2)
	key := newKey()
	first := s.mustOrder(t, tokAlice, key, res, "tok_visa")
	before := s.settle(t)

	for i := range 3 {
		r := s.mustOrder(t, tokAlice, key, res, "tok_visa")
		if r.str("id") != first.str("id") {
			t.Errorf("repeat %d: %s, want order id %s", i+1, r, first.str("id"))
		}
		if !r.replayed() {
			t.Errorf("repeat %d: %s: Idempotent-Replayed = %q, want true", i+1, r.Req, r.Header.Get("Idempotent-Replayed"))
		}
		if r.str("status") != "confirmed" {
			t.Errorf("repeat %d: %s, want status confirmed", i+1, r)
		}
	}
	s.checkNothingAppended(t, before, "the repeats")
	s.checkPaidOnce(t, first.str("id"))
}

// TestOrder_TwentyConcurrentIdenticalRequestsMakeOneOrder: twenty identical
// order requests sent at once make one order and one charge; every success
// names that order and nothing is a 5xx.
func TestOrder_TwentyConcurrentIdenticalRequestsMakeOneOrder(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{}, 2)
	answers := s.burst(t, 20, orderCall(tokAlice, newKey(), res, "tok_visa"))
	s.checkPaidOnce(t, checkIdenticalAnswers(t, answers)...)
}

// TestOrder_ConcurrentNewKeysForOneReservationMakeOneOrder: ten order
// requests for one reservation, each under its own key, sent at once, make
// one order and one charge; every other request is 409
// reservation-already-ordered naming that order (the caller owns it).
func TestOrder_ConcurrentNewKeysForOneReservationMakeOneOrder(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{}, 2)
	calls := make([]call, 10)
	for i := range calls {
		// Prefer: wait=10: the winner's payment is final in its answer even
		// on a busy machine.
		calls[i] = orderCall(tokAlice, newKey(), res, "tok_visa")
		calls[i].Header = map[string]string{"Prefer": "wait=10"}
	}
	answers := s.burstCalls(t, calls)
	var winner string
	var lost []*resp
	for i, r := range answers {
		switch r.Status {
		case http.StatusCreated:
			if winner != "" {
				t.Errorf("answer %d: %s: a second order (first %s)", i, r, winner)
			}
			winner = r.str("id")
		case http.StatusConflict:
			checkProblem(t, r, http.StatusConflict, "reservation-already-ordered")
			lost = append(lost, r)
		default:
			t.Errorf("answer %d: %s, want 201 or 409 reservation-already-ordered", i, r)
		}
	}
	if winner == "" {
		t.Fatalf("no request made the order")
	}
	for _, r := range lost {
		if r.str("order_id") != winner {
			t.Errorf("%s: order_id = %q, want the caller's order %s", r, r.str("order_id"), winner)
		}
	}
	s.checkPaidOnce(t, winner)
}

// burst sends n copies of c at once and returns every answer; a transport
// error fails the test.
func (s *server) burst(t testing.TB, n int, c call) []*resp {
	t.Helper()
	calls := make([]call, n)
	for i := range calls {
		calls[i] = c
	}
	return s.burstCalls(t, calls)
}

// burstCalls sends every call at once (released together) and returns the
// answers in the same order; a transport error fails the test.
func (s *server) burstCalls(t testing.TB, calls []call) []*resp {
	t.Helper()
	out, errs := s.sendAll(calls)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d (%s %s): %v", i, calls[i].Method, calls[i].Path, err)
		}
	}
	return out
}

// sendAll sends every call at once (released together) and returns the
// answers and transport errors in the same order (safe from any goroutine).
func (s *server) sendAll(calls []call) ([]*resp, []error) {
	out := make([]*resp, len(calls))
	errs := make([]error, len(calls))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = s.send(context.Background(), c)
		}()
	}
	close(start)
	wg.Wait()
	return out, errs
}

// checkIdenticalAnswers checks the answers to copies of one order request:
// successes (201, or 202 while pending) all name the same order and exactly
// one is not a replay; the only other acceptable answer is 409
// idempotency-key-in-use with Retry-After. It returns the order ids seen.
func checkIdenticalAnswers(t testing.TB, answers []*resp) []string {
	t.Helper()
	var id string
	fresh, ok, inUse := 0, 0, 0
	for i, r := range answers {
		switch r.Status {
		case http.StatusCreated, http.StatusAccepted:
			ok++
			if id == "" {
				id = r.str("id")
			}
			if r.str("id") == "" || r.str("id") != id {
				t.Errorf("answer %d: %s, want order id %s like the others", i, r, id)
			}
			if !r.replayed() {
				fresh++
			}
			if r.Header.Get("Location") != "/v1/orders/"+r.str("id") {
				t.Errorf("answer %d: %s: Location = %q, want /v1/orders/%s", i, r, r.Header.Get("Location"), r.str("id"))
			}
			if ra := r.Header.Get("Retry-After"); (r.Status == http.StatusAccepted) != (ra != "") {
				t.Errorf("answer %d: %s: Retry-After = %q; want it on a 202 (pending) and only then", i, r, ra)
			}
		case http.StatusConflict:
			inUse++
			checkProblem(t, r, http.StatusConflict, "idempotency-key-in-use")
			if r.Header.Get("Retry-After") == "" {
				t.Errorf("answer %d: %s: 409 idempotency-key-in-use without Retry-After", i, r)
			}
		default:
			t.Errorf("answer %d: %s, want 201/202, or 409 idempotency-key-in-use", i, r)
		}
	}
	if ok == 0 {
		t.Fatalf("no request of %d succeeded (%d in use)", len(answers), inUse)
	}
	if fresh != 1 {
		t.Errorf("%d successful answers lack Idempotent-Replayed: true, want exactly 1 (the request that made the order)", fresh)
	}
	t.Logf("%d answers: %d successes, %d in use", len(answers), ok, inUse)
	return []string{id}
}

// TestOrder_SameKeyDifferentBodyIsRefused: reusing an order's key with
// another body is 422 idempotency-key-reused naming the differing fields
// (never their values) and changes nothing.
func TestOrder_SameKeyDifferentBodyIsRefused(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{}, 2)
	other := s.mustReserve(t, tokAlice, show, 1)
	key := newKey()
	first := s.mustOrder(t, tokAlice, key, res, "tok_visa")
	before := s.settle(t)

	cases := []struct {
		name       string
		body       map[string]any
		wantFields []string // each differing field must be one of these or below one
		secrets    []string // values of the first request the answer must not show
	}{
		{"a different payment token", orderBody(res, "tok_decline"), []string{"payment"}, []string{"tok_visa"}},
		{"a different reservation", orderBody(other, "tok_visa"), []string{"reservation_id"}, []string{res, "tok_visa"}},
	}
	for _, tc := range cases {
		r := s.do(t, "POST", "/v1/orders", tokAlice, key, tc.body)
		checkProblem(t, r, http.StatusUnprocessableEntity, "idempotency-key-reused")
		fields := problemFields(r)
		if len(fields) == 0 {
			t.Errorf("%s: %s: the problem lists no differing fields", tc.name, r)
		}
		for _, f := range fields {
			if !slices.ContainsFunc(tc.wantFields, func(w string) bool { return f == w || strings.HasPrefix(f, w+".") }) {
				t.Errorf("%s: %s: differing field %q, want only %v", tc.name, r, f, tc.wantFields)
			}
		}
		for _, sec := range tc.secrets {
			if strings.Contains(string(r.Body), sec) {
				t.Errorf("%s: %s: the problem shows %q, a value of the first request", tc.name, r, sec)
			}
		}
		if r.Header.Get("Retry-After") != "" {
			t.Errorf("%s: %s: Retry-After on a 422, which is not retryable", tc.name, r.Req)
		}
	}
	s.checkNothingAppended(t, before, "the refused requests")
	s.checkPaidOnce(t, first.str("id"))
	s.wantReservation(t, other, "held") // the other reservation is still held
}

// problemFields returns the problem's "fields" member.
func problemFields(r *resp) []string {
	raw, _ := r.get("fields").([]any)
	var out []string
	for _, f := range raw {
		if s, ok := f.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// TestOrder_NewKeyForOrderedReservationIsConflict: a second order for an
// ordered reservation, under a fresh key, is 409
// reservation-already-ordered naming the caller's order, answered the same
// to its repeats; still one order.
func TestOrder_NewKeyForOrderedReservationIsConflict(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{}, 2)
	first := s.mustOrder(t, tokAlice, newKey(), res, "tok_visa")

	key := newKey()
	r := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	checkProblem(t, r, http.StatusConflict, "reservation-already-ordered")
	if got := r.str("order_id"); got != first.str("id") {
		t.Errorf("%s: order_id = %q, want the caller's order %s", r, got, first.str("id"))
	}
	if r.replayed() {
		t.Errorf("%s: Idempotent-Replayed on the first request with this key", r.Req)
	}
	if r.Header.Get("Retry-After") != "" {
		t.Errorf("%s: Retry-After on a definitive 409", r.Req)
	}
	again := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
	checkProblem(t, again, http.StatusConflict, "reservation-already-ordered")
	if !again.replayed() || again.str("order_id") != first.str("id") {
		t.Errorf("%s: want the same refusal, with order_id %s and Idempotent-Replayed: true", again, first.str("id"))
	}
	// A different token under yet another key is refused the same way.
	third := s.do(t, "POST", "/v1/orders", tokAlice, newKey(), orderBody(res, "tok_decline"))
	checkProblem(t, third, http.StatusConflict, "reservation-already-ordered")
	s.checkPaidOnce(t, first.str("id"))
}

// TestOrder_DeclinedPaymentFailsOrderAndReleasesSeats: tok_decline is 402
// payment-declined; the order is failed, its seats are back, the provider
// holds one failed charge and no successful one.
func TestOrder_DeclinedPaymentFailsOrderAndReleasesSeats(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{}, 4)
	key := newKey()
	r := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_decline"))
	checkProblem(t, r, http.StatusPaymentRequired, "payment-declined")
	id := r.str("order_id")
	if id == "" {
		t.Fatalf("%s: the problem does not name the failed order (order_id)", r)
	}
	if strings.Contains(string(r.Body), "tok_decline") {
		t.Errorf("%s: the answer shows the payment token", r)
	}

	s.checkFailedOrder(t, id, show, res, 10) // all 10 seats available again

	again := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_decline"))
	checkProblem(t, again, http.StatusPaymentRequired, "payment-declined")
	if !again.replayed() || again.str("order_id") != id {
		t.Errorf("%s: want the same 402 for order %s with Idempotent-Replayed: true", again, id)
	}

	s.settle(t)
	s.checkOrders(t, tokAlice, 1, id)
	s.wantCount(t, "order-", "PaymentFailed", 1)
	s.wantCount(t, "order-", "OrderFailed", 1)
	s.wantCount(t, "order-", "OrderConfirmed", 0)
	s.wantCount(t, "show-", "SeatsReleased", 1)
	c := s.checkCharges(t, 0, 1)
	if c.Net != 0 {
		t.Errorf("GET /_sim/charges: net %d, want 0", c.Net)
	}
}

// TestOrder_UnknownTokenIsRefusedAsInvalid: a token the provider does not
// know (400 invalid_request_error resource_missing) is 402 payment-declined
// saying that the provider refused the token as invalid; one charge
// attempt, nothing charged, the order failed with its seats released, and
// the repeat answers the same.
func TestOrder_UnknownTokenIsRefusedAsInvalid(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{}, 4)
	key := newKey()
	const detail = "the payment provider refused the payment token as invalid (resource_missing: it knows no such token); nothing was charged; the order failed and its seats were released"
	r := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_bogus"))
	checkProblem(t, r, http.StatusPaymentRequired, "payment-declined")
	id := r.str("order_id")
	if id == "" {
		t.Fatalf("%s: the problem does not name the failed order (order_id)", r)
	}
	if r.str("detail") != detail {
		t.Errorf("%s: detail %q, want %q", r, r.str("detail"), detail)
	}
	s.checkFailedOrder(t, id, show, res, 10)

	again := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_bogus"))
	checkProblem(t, again, http.StatusPaymentRequired, "payment-declined")
	if !again.replayed() || again.str("order_id") != id || again.str("detail") != detail {
		t.Errorf("%s: want the same 402 for order %s with Idempotent-Replayed: true", again, id)
	}

	s.settle(t)
	s.checkOrders(t, tokAlice, 1, id)
	s.wantCount(t, "order-", "PaymentAttemptStarted", 1)
	s.wantCount(t, "order-", "PaymentFailed", 1)
	s.wantCount(t, "order-", "OrderFailed", 1)
	s.wantCount(t, "show-", "SeatsReleased", 1)
	s.checkCharges(t, 0, 0)
}

// TestOrder_KilledAfterClaimIsFinishedWithoutRepeat: the process is killed
// right after the order's unit (its commit point: the claim, with the order
// placed, the reservation marked ordered and attempt 1 leased, nothing
// sent); after a restart, with no repeat from the client, the order is paid
// within a bound, once its payment lease has passed; a later repeat answers
// that same order.
func TestOrder_KilledAfterClaimIsFinishedWithoutRepeat(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{CrashAt: []string{"order.claimed"}, Env: fastEnv()}, 2)
	order, id := s.crashOrder(t, res, "tok_visa", "order.claimed")
	if n := s.orders(t); n != 1 {
		t.Fatalf("event store after the crash: %d OrderPlaced, want 1 (committed with the claim)", n)
	}
	if types := typesOf(s.orderEvents(t, id)); !slices.Equal(types, []string{"OrderPlaced", "PaymentAttemptStarted"}) {
		t.Fatalf("order-%s after the crash: %v, want [OrderPlaced PaymentAttemptStarted] (the claim's unit, nothing sent)", id, types)
	}

	s.Restart(withoutCrash)
	s.waitRecovered(t, id, 60*time.Second) // placed, ordered, paid and confirmed

	s.checkReplayedOrder(t, order, id)
	s.checkPaidOnce(t, id)
	s.wantAvailable(t, show, 8)
}

// TestOrder_RepeatAfterRestartIsReplayed: intents live in the event store,
// not in process memory: after a SIGKILL and a restart, a repeat of a
// confirmed order is a replay, and the provider (its own process here) saw
// one charge.
func TestOrder_RepeatAfterRestartIsReplayed(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{ExternalSim: true}, 2)
	key := newKey()
	first := s.mustOrder(t, tokAlice, key, res, "tok_visa")
	before := s.settle(t)

	s.Kill()
	s.Restart()
	s.checkReplayedOrder(t, orderCall(tokAlice, key, res, "tok_visa"), first.str("id"))
	changed := s.doCall(t, orderCall(tokAlice, key, res, "tok_decline"))
	checkProblem(t, changed, http.StatusUnprocessableEntity, "idempotency-key-reused")
	s.checkNothingAppended(t, before, "the restart and repeats")
	s.checkPaidOnce(t, first.str("id"))
}

// TestBadInput_IsRefusedAndRecordsNothing: invalid keys, bodies and
// credentials are refused with the exact status and a problem document, and
// append nothing.
func TestBadInput_IsRefusedAndRecordsNothing(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{}, 2)
	okOrder := orderBody(res, "tok_visa")
	okReservation := map[string]any{"show_id": show, "quantity": 2}

	cases := []struct {
		name   string
		c      call
		status int
		code   string // "" accepts any code
	}{
		{"a missing Idempotency-Key", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Body: okOrder}, 400, "idempotency-key-invalid"},
		{"an empty Idempotency-Key", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(""), Body: okOrder}, 400, "idempotency-key-invalid"},
		{"a blank Idempotency-Key", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf("   "), Body: okOrder}, 400, "idempotency-key-invalid"},
		{"a quoted blank Idempotency-Key", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(`"   "`), Body: okOrder}, 400, "idempotency-key-invalid"},
		{"a quoted empty Idempotency-Key", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(`""`), Body: okOrder}, 400, "idempotency-key-invalid"},
		{"a 256-character Idempotency-Key", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(strings.Repeat("k", 256)), Body: okOrder}, 400, "idempotency-key-invalid"},
		{"a non-ASCII Idempotency-Key", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf("clé-1"), Body: okOrder}, 400, "idempotency-key-invalid"},
		{"an unterminated quoted Idempotency-Key", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(`"abc`), Body: okOrder}, 400, "idempotency-key-invalid"},
		{"a missing Idempotency-Key on a reservation", call{Method: "POST", Path: "/v1/reservations", Token: tokAlice, Body: okReservation}, 400, "idempotency-key-invalid"},
		{"a missing Idempotency-Key on a show", call{Method: "POST", Path: "/v1/shows", Token: tokAdmin, Body: showBody("Concert", 10)}, 400, "idempotency-key-invalid"},
		{"an unknown field", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
			Body: map[string]any{"reservation_id": res, "payment": map[string]any{"token": "tok_visa"}, "coupon": "FREE"}}, 400, ""},
		{"an unknown nested field", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
			Body: map[string]any{"reservation_id": res, "payment": map[string]any{"token": "tok_visa", "cvc": "123"}}}, 400, ""},
		{"a string quantity", call{Method: "POST", Path: "/v1/reservations", Token: tokAlice, Key: keyOf(newKey()),
			Body: `{"show_id":"` + show + `","quantity":"2"}`}, 400, ""},
		{"a non-integral quantity", call{Method: "POST", Path: "/v1/reservations", Token: tokAlice, Key: keyOf(newKey()),
			Body: `{"show_id":"` + show + `","quantity":2.5}`}, 400, ""},
		{"a zero quantity", call{Method: "POST", Path: "/v1/reservations", Token: tokAlice, Key: keyOf(newKey()),
			Body: `{"show_id":"` + show + `","quantity":0}`}, 400, ""},
		{"malformed JSON", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
			Body: `{"reservation_id":"` + res + `",`}, 400, ""},
		{"a JSON array body", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()), Body: `[]`}, 400, ""},
		{"a missing payment token", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
			Body: map[string]any{"reservation_id": res}}, 400, ""},
		{"a reservation id that is not a UUID", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
			Body: orderBody("res-1", "tok_visa")}, 400, ""},
		{"a text/plain body", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()), Body: `{}`,
			Header: map[string]string{"Content-Type": "text/plain"}}, 415, "unsupported-media-type"},
		{"a body over 64 KiB", call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
			Body: `{"reservation_id":"` + res + `"` + strings.Repeat(" ", 64<<10) + `}`}, 413, "body-too-large"},
		{"no bearer token", call{Method: "POST", Path: "/v1/orders", Key: keyOf(newKey()), Body: okOrder}, 401, "unauthorized"},
		{"an unknown bearer token", call{Method: "POST", Path: "/v1/orders", Token: "tok-mallory", Key: keyOf(newKey()), Body: okOrder}, 401, "unauthorized"},
		{"a Basic authorization", call{Method: "POST", Path: "/v1/orders", Key: keyOf(newKey()), Body: okOrder,
			Header: map[string]string{"Authorization": "Basic YWxpY2U6dG9rLWFsaWNl"}}, 401, "unauthorized"},
		{"no bearer token on a GET", call{Method: "GET", Path: "/v1/reservations/" + res}, 401, "unauthorized"},
		{"a non-admin creating a show", call{Method: "POST", Path: "/v1/shows", Token: tokBob, Key: keyOf(newKey()), Body: showBody("Concert", 10)}, 403, "forbidden"},
	}
	before := s.settle(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.doCall(t, tc.c)
			checkProblem(t, r, tc.status, tc.code)
			if tc.status == http.StatusUnauthorized && r.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s: 401 without WWW-Authenticate", r.Req)
			}
			if r.Header.Get("Retry-After") != "" {
				t.Errorf("%s: Retry-After on a %d, which is not retryable", r.Req, r.Status)
			}
			s.checkNoNewEvents(t, &before, r.String())
		})
	}

	t.Run("a key refused for its body is not used up", func(t *testing.T) {
		key := newKey()
		bad := s.do(t, "POST", "/v1/reservations", tokAlice, key, `{"show_id":"`+show+`","quantity":2.5}`)
		checkProblem(t, bad, http.StatusBadRequest, "")
		good := s.do(t, "POST", "/v1/reservations", tokAlice, key, okReservation)
		wantStatus(t, good, http.StatusCreated)
		if good.replayed() {
			t.Errorf("%s: Idempotent-Replayed after a refused first use of the key", good.Req)
		}
	})
	s.checkOrders(t, tokAlice, 0)
	s.checkCharges(t, 0, 0)
	s.wantCount(t, "show-", "ShowScheduled", 1)
}

// TestOrders_ListShowsEachOwnOrderOnce: GET /v1/orders (read model) counts
// the caller's orders: each once, none of another actor's.
func TestOrders_ListShowsEachOwnOrderOnce(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{}, 1)
	key := newKey()
	o := s.mustOrder(t, tokAlice, key, res, "tok_visa")
	s.mustOrder(t, tokAlice, key, res, "tok_visa")
	s.mustOrder(t, tokBob, newKey(), s.mustReserve(t, tokBob, show, 1), "tok_visa")

	var r *resp
	var ids []string
	ok := eventually(30*time.Second, func() bool {
		r = s.do(t, "GET", "/v1/orders", tokAlice, "", nil)
		ids = listIDs(r)
		return r.Status == http.StatusOK && len(ids) >= 1
	})
	if !ok {
		t.Fatalf("%s, want 200 listing alice's order within 30 s", r)
	}
	if len(ids) != 1 || ids[0] != o.str("id") {
		t.Errorf("%s: orders %v, want exactly [%s]", r, ids, o.str("id"))
	}
	if r.Header.Get("Booking-Position") == "" {
		t.Errorf("%s: no Booking-Position header (read-model freshness)", r.Req)
	}
	s.wantCount(t, "order-", "OrderPlaced", 2, "(alice's and bob's)")
}

// listIDs returns the ids of a list answer: a JSON array under "data",
// "orders" or "items".
func listIDs(r *resp) []string {
	var items []any
	for _, k := range []string{"data", "orders", "items"} {
		if v, ok := r.get(k).([]any); ok {
			items = v
			break
		}
	}
	var out []string
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			if id, ok := m["id"].(string); ok {
				out = append(out, id)
			}
		}
	}
	return out
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
