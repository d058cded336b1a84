package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// samples returns every sample of GET /metrics (the admin listener's) by
// series, as exposed (`name{label="value",...}`).
func (s *server) samples(t testing.TB) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, l := range strings.Split(s.scrape(t, s.AdminURL), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("GET /metrics: sample %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

// funnelCounters are the name prefixes of the funnel's counters, whose
// every series a step must leave unchanged unless it names it. The
// webhook and erasure counters move on their own (a provider notice, the
// reconciler's erasure pass): their steps check them with checkSeries.
var funnelCounters = []string{
	"booking_idempotency_fingerprint_conflicts_total", "booking_idempotency_replays_total",
	"booking_idempotency_in_use_total", "booking_redundant_effects_total",
	"booking_retry_budget_exceeded_total", "booking_payment_reconciliations_total",
	"booking_intents_total", "booking_intent_refusals_total",
}

// checkProviderCreates checks that booking_provider_calls_total for
// create_payment moved by exactly want[result] for each result named. The
// other operations move on their own (the reconciler lists and refunds),
// but only an order creates a PaymentIntent.
func checkProviderCreates(t testing.TB, step string, before, after map[string]float64, want map[string]float64) {
	t.Helper()
	for result, d := range want {
		name := fmt.Sprintf(`booking_provider_calls_total{operation="create_payment",result=%q}`, result)
		if _, ok := after[name]; !ok {
			t.Errorf("%s: %s is not exported", step, name)
			continue
		}
		if got := after[name] - before[name]; got != d {
			t.Errorf("%s: %s moved by %v, want %v", step, name, got, d)
		}
	}
}

// checkSeries compares two scrapes for the series of one metric name:
// every series in want changed by exactly its value, every other one not
// at all.
func checkSeries(t testing.TB, step, name string, before, after map[string]float64, want map[string]float64) {
	t.Helper()
	found := false
	for series, v := range after {
		if series != name && !strings.HasPrefix(series, name+"{") {
			continue
		}
		found = true
		if d := v - before[series]; d != want[series] {
			t.Errorf("%s: %s changed by %v, want %v", step, series, d, want[series])
		}
	}
	if !found {
		t.Errorf("%s: GET /metrics has no %s", step, name)
	}
}

// signedNotice posts body to the webhook route signed with the simulator's
// webhook secret (an external simulator's) and returns the answer.
func (s *server) signedNotice(t testing.TB, body []byte) *resp {
	t.Helper()
	return s.postWebhook(t, body, signWebhook(body, time.Now(), []byte(webhookSecret)))
}

// checkDeltas compares two scrapes: every series in want changed by exactly
// its value, every series in atLeast by at least its value, and every other
// funnel counter series not at all. step names the step in messages.
func checkDeltas(t testing.TB, step string, before, after map[string]float64, want, atLeast map[string]float64) {
	t.Helper()
	var names []string
	for series := range after {
		for _, p := range funnelCounters {
			if strings.HasPrefix(series, p) {
				names = append(names, series)
			}
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatalf("%s: GET /metrics has none of the funnel counters", step)
	}
	for series := range want {
		if _, ok := after[series]; !ok {
			t.Errorf("%s: GET /metrics has no %s", step, series)
		}
	}
	for _, series := range names {
		d := after[series] - before[series]
		if min, ok := atLeast[series]; ok {
			if d < min {
				t.Errorf("%s: %s changed by %v, want at least %v", step, series, d, min)
			}
			continue
		}
		if d != want[series] {
			t.Errorf("%s: %s changed by %v, want %v", step, series, d, want[series])
		}
	}
}

// waitGauge polls GET /metrics (up to 60 s) until the unlabelled gauge name
// satisfies ok, and returns its value then.
func (s *server) waitGauge(t testing.TB, name, what string, ok func(v float64) bool) float64 {
	t.Helper()
	var v float64
	var present bool
	if !eventually(60*time.Second, func() bool {
		v, present = s.gauge(t, name)
		return present && ok(v)
	}) {
		t.Fatalf("GET /metrics: %s = %v (present %t) for 60 s, want %s", name, v, present, what)
	}
	return v
}

// TestMetrics_FunnelDeltas drives each event of the idempotency and
// payment funnel once through the real binary and checks, from scrapes of
// /metrics before and after, the exact change of its metric and that no
// other funnel counter moved:
//
//   - an order request held before its commit point: its intent commits
//     with the claim, so booking_intents_pending stays 0 and intents
//     {created} does not move while it is held; its repeat finds it in
//     flight in the process, waits BOOKING_IN_USE_WAIT and is answered 409,
//     +1 in_use and +1 replays; released, intents{created} +1 and the gauge
//     is 0;
//   - the finished order repeated: +1 replays; with another card: 422, +1
//     fingerprint conflicts;
//   - an actor over its retry budget: one 429, +1 retry budget exceeded;
//   - a provider slower than BOOKING_PROVIDER_TIMEOUT (simulator latency,
//     webhooks held): the outcome is unknown, booking_payment_unknown_outcomes
//     is 1 and the oldest unknown age above 0 while it lasts; the latency
//     removed, the reconciler finds the PaymentIntent in its list: +1
//     reconciliations{found_succeeded} (list_failed and lease_renewed
//     meanwhile, as often as the pace makes them), both gauges back to 0;
//   - a charge made at the provider after the order failed, whose refund
//     the provider refuses with 500s for a while: +1 redundant effects,
//     booking_refunds_pending 1 while refused (reconciliations
//     {refund_pending} at least +1: one per try); the faults cleared, the
//     refund is recorded: +1 reconciliations{refund_recorded}, refunds
//     pending back to 0.
func TestMetrics_FunnelDeltas(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{ExternalSim: true, Env: fastEnv(
		"BOOKING_IN_USE_WAIT", "1s", "BOOKING_INTENT_LEASE", "30s",
		"BOOKING_RETRY_BUDGET_RATE", "1", "BOOKING_RETRY_BUDGET_BURST", "10")})
	show := s.mustCreateShow(t, 10)
	const op = `{operation="POST /v1/orders"}`
	inUse := "booking_idempotency_in_use_total" + op
	replays := "booking_idempotency_replays_total" + op
	conflicts := "booking_idempotency_fingerprint_conflicts_total" + op
	intents := func(result string) string {
		return fmt.Sprintf(`booking_intents_total{operation="POST /v1/orders",result=%q}`, result)
	}
	refusals := func(code string) string { return fmt.Sprintf(`booking_intent_refusals_total{code=%q}`, code) }
	webhooks := func(result string) string { return fmt.Sprintf(`booking_webhooks_total{result=%q}`, result) }
	erasures := func(result string) string { return fmt.Sprintf(`booking_erasures_total{result=%q}`, result) }
	recon := func(result string) string {
		return fmt.Sprintf("booking_payment_reconciliations_total{result=%q}", result)
	}
	s.waitGauge(t, "booking_intents_pending", "0 after the setup", func(v float64) bool { return v == 0 })

	// ---- in use, pending intents
	res := s.mustReserve(t, tokAlice, show, 2)
	before := s.samples(t)
	s.armHold(t, "order.claiming")
	c := orderCall(tokAlice, newKey(), res, "tok_visa")
	first := s.sendTimed(t, c)
	s.waitHeld(t, "order.claiming", 1)
	if v, present := s.gauge(t, "booking_intents_pending"); !present || v != 0 {
		t.Errorf("booking_intents_pending = %v (present %t) while the order is held, want 0 (its intent commits with its claim)", v, present)
	}
	checkProblem(t, s.doCall(t, c), http.StatusConflict, "idempotency-key-in-use")
	held := s.samples(t)
	checkDeltas(t, "a repeat while held", before, held, map[string]float64{inUse: 1, replays: 1,
		intents("replayed"): 1, intents("waited"): 1, intents("in_use"): 1}, nil)
	s.releaseHold(t, "order.claiming")
	f := <-first
	if f.r == nil {
		t.FailNow()
	}
	wantStatus(t, f.r, http.StatusCreated)
	if d := s.samples(t)[intents("created")] - held[intents("created")]; d != 1 {
		t.Errorf("%s changed by %v once the held order was answered, want 1", intents("created"), d)
	}
	s.waitGauge(t, "booking_intents_pending", "0 once the order is confirmed", func(v float64) bool { return v == 0 })
	checkProviderCreates(t, "a confirmed order", before, s.samples(t), map[string]float64{"ok": 1, "declined": 0})

	// ---- replay, fingerprint conflict
	before = s.samples(t)
	s.checkReplayedOrder(t, c, f.r.str("id"))
	checkDeltas(t, "a replay", before, s.samples(t), map[string]float64{replays: 1, intents("replayed"): 1}, nil)
	before = s.samples(t)
	checkProblem(t, s.doCall(t, orderCall(tokAlice, *c.Key, res, "tok_decline")), http.StatusUnprocessableEntity, "idempotency-key-reused")
	checkDeltas(t, "a changed body", before, s.samples(t), map[string]float64{conflicts: 1,
		intents("refused"): 1, refusals("idempotency-key-reused"): 1}, nil)
	before = s.samples(t)
	checkProblem(t, s.doCall(t, orderCall(tokAlice, newKey(), res, "tok_visa")), http.StatusConflict, "reservation-already-ordered")
	checkDeltas(t, "a fresh key for the ordered reservation", before, s.samples(t), map[string]float64{
		intents("created"): 1, intents("refused"): 1, refusals("reservation-already-ordered"): 1}, nil)

	// ---- retry budget: bob's POSTs until the first 429 (burst 10, 1/s)
	before = s.samples(t)
	limited := 0
	for i := 0; i < 200 && limited == 0; i++ {
		r := s.doCall(t, call{Method: "POST", Path: "/v1/reservations", Token: tokBob, Body: map[string]any{}})
		switch r.Status {
		case http.StatusTooManyRequests:
			limited++
		case http.StatusBadRequest: // no Idempotency-Key: refused, but counted against the budget
		default:
			t.Fatalf("%s, want 400 (no key) or 429", r)
		}
	}
	if limited != 1 {
		t.Fatalf("200 POSTs of bob at a budget of 10 + 1/s: no 429")
	}
	checkDeltas(t, "a 429", before, s.samples(t), map[string]float64{"booking_retry_budget_exceeded_total": 1}, nil)

	// ---- unknown outcome while the provider is slower than its timeout (2 s)
	s.pauseWebhooks(t) // only the reconciler learns the outcome
	res2 := s.mustReserve(t, tokAlice, show, 2)
	before = s.samples(t)
	s.simFaults(t, map[string]any{"latency_ms": 3000})
	r2 := s.doCall(t, call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()), Body: orderBody(res2, "tok_visa"),
		Header: map[string]string{"Prefer": "wait=0"}})
	wantStatus(t, r2, http.StatusAccepted)
	id2 := r2.str("id")
	if !eventually(60*time.Second, func() bool { m := s.orderMoney(t, id2); return m.Succeeded == 1 }) {
		t.Fatalf("simulator: no charge of order %s committed within 60 s", id2)
	}
	s.waitGauge(t, "booking_payment_unknown_outcomes", "1 while the provider times out", func(v float64) bool { return v == 1 })
	age := s.waitGauge(t, "booking_payment_oldest_unknown_outcome_age_seconds", "above 0 while the provider times out",
		func(v float64) bool { return v > 0 })
	if st := s.orderStatus(t, tokAlice, id2); st != "pending" {
		t.Errorf("order %s is %q while the provider times out, want pending", id2, st)
	}
	s.simFaults(t, map[string]any{"latency_ms": 0})
	s.waitStatus(t, id2, 60*time.Second, "confirmed")
	s.waitGauge(t, "booking_payment_unknown_outcomes", "0 once reconciled", func(v float64) bool { return v == 0 })
	s.waitGauge(t, "booking_payment_oldest_unknown_outcome_age_seconds", "0 once reconciled", func(v float64) bool { return v == 0 })
	checkDeltas(t, fmt.Sprintf("an unknown outcome (oldest age seen %vs) reconciled", age), before, s.samples(t),
		// While the provider is slower than the timeout its list fails too,
		// and the attempt's own lease is renewed for the same-key resends:
		// how often depends on the machine's pace.
		map[string]float64{recon("found_succeeded"): 1, intents("created"): 1}, map[string]float64{recon("list_failed"): 0, recon("lease_renewed"): 0})

	// ---- redundant effect, refunds pending
	res3 := s.mustReserve(t, tokAlice, show, 2)
	beforeDecline := s.samples(t)
	r3 := s.doCall(t, orderCall(tokAlice, newKey(), res3, "tok_decline"))
	checkProblem(t, r3, http.StatusPaymentRequired, "payment-declined")
	checkProviderCreates(t, "a declined order", beforeDecline, s.samples(t), map[string]float64{"ok": 0, "declined": 1})
	id3 := orderIDOf(t, r3)
	before = s.samples(t)
	late := s.simMakePayment(t, "tok_visa", id3, 1, 2*priceAmount, nil)
	s.simFaults(t, map[string]any{"error_before_commit": 1000000}) // every refund POST: 500, nothing done
	s.simFaults(t, map[string]any{"webhooks_paused": false})       // the late charge's notice arrives
	s.waitGauge(t, "booking_refunds_pending", "1 while the provider refuses the refund", func(v float64) bool { return v == 1 })
	mid := s.samples(t)
	checkDeltas(t, "a charge after failure, its refund refused", before, mid,
		map[string]float64{"booking_redundant_effects_total": 1}, map[string]float64{recon("refund_pending"): 1})
	wantStatus(t, s.simDo(t, "DELETE", "/_sim/faults", nil, nil), http.StatusOK)
	s.waitGauge(t, "booking_refunds_pending", "0 once the refund is recorded", func(v float64) bool { return v == 0 })
	checkDeltas(t, "the refund sent", mid, s.samples(t), map[string]float64{recon("refund_recorded"): 1},
		map[string]float64{recon("refund_pending"): 0})
	if m := s.orderMoney(t, id3); m.Net != 0 {
		t.Errorf("simulator: order %s charges %+v (late charge %s), want net 0", id3, m, late)
	}
	s.settle(t)
	s.waitWebhooksDelivered(t)
	s.waitGauge(t, "booking_intents_pending", "0 at the end", func(v float64) bool { return v == 0 })

	// ---- webhooks by result, each notice posted by the test (the
	// simulator's own held from here on)
	s.pauseWebhooks(t)
	notice := func(step string, body []byte, status int, result string) {
		t.Helper()
		before := s.samples(t)
		r := s.signedNotice(t, body)
		wantStatus(t, r, status)
		checkSeries(t, step, "booking_webhooks_total", before, s.samples(t), map[string]float64{webhooks(result): 1})
	}
	before = s.samples(t)
	wantStatus(t, s.doCall(t, call{Method: "POST", Path: "/v1/provider/webhooks", Body: []byte(`{"id":"evt_x"}`),
		Header: map[string]string{"Stripe-Signature": "t=1,v1=00"}}), http.StatusBadRequest)
	checkSeries(t, "a bad signature", "booking_webhooks_total", before, s.samples(t), map[string]float64{webhooks("bad_signature"): 1})
	notice("a body that is no event", []byte("not json"), http.StatusBadRequest, "invalid")
	// The simulator's events: the one it delivered for the first order,
	// and those of the PaymentIntents made below (held, never delivered).
	eventOf := func(typ, paymentID string) []byte {
		t.Helper()
		for _, e := range s.simEvents(t) {
			if e.Type == typ && e.Data.Object.ID == paymentID {
				return e.raw
			}
		}
		t.Fatalf("GET /_sim/events: no %s of %s", typ, paymentID)
		return nil
	}
	paid := s.orderMoney(t, f.r.str("id"))
	if len(paid.All) != 1 {
		t.Fatalf("simulator: order %s payments %+v, want one", f.r.str("id"), paid)
	}
	delivered := eventOf("payment_intent.succeeded", paid.All[0].ID)
	var other map[string]any // the same event, as another kind of object's under another id
	if err := json.Unmarshal(delivered, &other); err != nil {
		t.Fatal(err)
	}
	other["id"], other["type"] = "evt_e2e_customer", "customer.created"
	otherBody, err := json.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	notice("an event of another kind", otherBody, http.StatusNoContent, "ignored")
	notice("a notice delivered before", delivered, http.StatusNoContent, "duplicate")
	stray := s.simMakePayment(t, "tok_decline", uuid.NewString(), 1, priceAmount, nil)
	notice("a payment of no order", eventOf("payment_intent.payment_failed", stray), http.StatusNotFound, "unknown_order")
	extra := s.simMakePayment(t, "tok_visa", f.r.str("id"), 1, 2*priceAmount, nil)
	before = s.samples(t)
	notice("a second payment of a confirmed order", eventOf("payment_intent.succeeded", extra), http.StatusNoContent, "accepted")
	if !eventually(60*time.Second, func() bool { return s.orderMoney(t, f.r.str("id")).Net == 2*priceAmount }) {
		t.Errorf("simulator: order %s charges %+v, want the second charge refunded", f.r.str("id"), s.orderMoney(t, f.r.str("id")))
	}
	checkDeltas(t, "a second charge of a confirmed order", before, s.samples(t), map[string]float64{
		"booking_redundant_effects_total": 1, recon("refund_recorded"): 1}, map[string]float64{recon("refund_pending"): 0})

	// ---- erasures: the keys of the ended orders (and of the refused
	// order, which never existed) are deleted and recorded by the
	// reconciler; the event store's clock is PostgreSQL's
	if !eventually(60*time.Second, func() bool {
		return s.queryInt(t, `SELECT count(*) FROM order_keys`) == 0 && s.queryInt(t, `SELECT count(*) FROM order_key_erasures`) == 0
	}) {
		t.Fatalf("after 60 s: %d order keys, %d erasures to record; want none", s.queryInt(t, `SELECT count(*) FROM order_keys`),
			s.queryInt(t, `SELECT count(*) FROM order_key_erasures`))
	}
	end := s.samples(t)
	if shredded := s.countType(t, "order-", "PaymentSecretsShredded"); shredded != 3 || end[erasures("recorded")] != 3 || end[erasures("no_order")] != 1 {
		t.Errorf("erasures: %d PaymentSecretsShredded, booking_erasures_total recorded %v, no_order %v; want 3 (the ended orders), 3, 1 (the refused order)",
			shredded, end[erasures("recorded")], end[erasures("no_order")])
	}
	if skew, ok := end["booking_event_store_clock_skew_seconds"]; !ok || skew < -1 || skew > 1 {
		t.Errorf("booking_event_store_clock_skew_seconds = %v (present %t), want about 0 on PostgreSQL", skew, ok)
	}
}
