package test

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Dev mode: the provider simulator runs inside booking serve and keeps its
// charges, refunds and idempotency keys in BOOKING_DATA_DIR/provider-sim, so
// it restarts with the service without forgetting what it charged.

// gauge returns the value of an unlabelled metric of GET /metrics and
// whether the line is there at all.
func (s *server) gauge(t testing.TB, name string) (float64, bool) {
	t.Helper()
	for _, l := range strings.Split(s.scrape(t, s.AdminURL), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("GET /metrics: %q: %v", l, err)
			}
			return f, true
		}
	}
	return 0, false
}

// refundGauges are the refund backlog metrics, as GET /metrics shows them.
type refundGauges struct {
	Pending, OldestAge, InReview, NeedsReview float64
}

// refundGauges returns the refund gauges of one scrape that has all four.
// The state collector leaves out a gauge whose query missed its budget (a
// busy machine), so a scrape without them is scraped again, for up to a
// minute.
func (s *server) refundGauges(t testing.TB) refundGauges {
	t.Helper()
	var g refundGauges
	var missing string
	names := []struct {
		name string
		v    *float64
	}{
		{"booking_refunds_pending", &g.Pending}, {"booking_refund_oldest_pending_age_seconds", &g.OldestAge},
		{"booking_refunds_in_review", &g.InReview}, {"booking_orders_needs_review", &g.NeedsReview},
	}
	complete := func() bool {
		values := map[string]float64{}
		for _, l := range strings.Split(s.scrape(t, s.AdminURL), "\n") {
			if name, v, ok := strings.Cut(l, " "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					values[name] = f
				}
			}
		}
		for _, m := range names {
			v, ok := values[m.name]
			if !ok {
				missing = m.name
				return false
			}
			*m.v = v
		}
		return true
	}
	if !eventually(time.Minute, complete) {
		t.Fatalf("GET /metrics has no %s for a minute", missing)
	}
	return g
}

// mustConfirmedOrder orders 2 seats of a new show of 10 for alice with
// tok_visa and returns the order and show ids, once the order is confirmed
// and settled.
func (s *server) mustConfirmedOrder(t *testing.T) (orderID, showID string) {
	t.Helper()
	show := s.mustCreateShow(t, 10)
	res := s.mustReserve(t, tokAlice, show, 2)
	r := s.do(t, "POST", "/v1/orders", tokAlice, newKey(), orderBody(res, "tok_visa"))
	wantStatus(t, r, http.StatusCreated)
	if r.str("status") != "confirmed" {
		t.Fatalf("%s, want status confirmed", r)
	}
	s.settle(t)
	if c := s.checkCharges(t, 1, 0); c.Net != 2*priceAmount {
		t.Fatalf("GET /_sim/charges before the restart: net %d, want %d", c.Net, 2*priceAmount)
	}
	return r.str("id"), show
}

// TestDevRestart_CancelAfterARestartIsRefunded: in dev mode an order is
// confirmed, booking serve (and its simulator) is SIGKILLed and started
// again, and the order is cancelled: the simulator still knows the charge,
// the refund succeeds, the order is cancelled and the net charge is 0. On the
// way the refund is held back at the simulator (every refund call fails
// before it commits), and /metrics shows exactly one pending refund with a
// positive age, then none once the faults are lifted.
func TestDevRestart_CancelAfterARestartIsRefunded(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{Env: fastEnv()})
	id, show := s.mustConfirmedOrder(t)

	s.Kill()
	s.Restart()
	if c := s.checkCharges(t, 1, 0); c.Net != 2*priceAmount || c.All[0].Metadata["order_id"] != id {
		t.Fatalf("GET /_sim/charges after the restart: %s, metadata %v; want the charge of order %s, net %d",
			c, c.All[0].Metadata, id, 2*priceAmount)
	}
	if g := s.refundGauges(t); g != (refundGauges{}) {
		t.Errorf("GET /metrics before the cancel: %+v, want all 0", g)
	}

	s.simFaults(t, map[string]any{"error_before_commit": 1000000})
	c := s.do(t, "POST", "/v1/orders/"+id+"/cancel", tokAlice, newKey(), nil)
	wantStatus(t, c, http.StatusOK)
	if c.str("status") != "cancelled" || c.str("payment.status") != "refund_pending" {
		t.Fatalf("%s, want status cancelled with payment refund_pending (the simulator fails every refund)", c)
	}
	var g refundGauges
	if !eventually(20*time.Second, func() bool {
		g = s.refundGauges(t)
		return g.Pending == 1 && g.OldestAge > 0
	}) {
		t.Fatalf("GET /metrics while the refund is held: %+v, want 1 pending with an age above 0", g)
	}
	if g.InReview != 0 || g.NeedsReview != 0 {
		t.Errorf("GET /metrics while the refund is held: %+v, want nothing in review", g)
	}

	wantStatus(t, s.simDo(t, "DELETE", "/_sim/faults", nil, nil), http.StatusOK)
	var o *resp
	if !eventually(20*time.Second, func() bool {
		o = s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
		return o.str("payment.status") == "refunded"
	}) {
		t.Fatalf("20 s after the faults were lifted: %s, want payment refunded (the reconciler retries the refund)", o)
	}
	if o.str("status") != "cancelled" {
		t.Errorf("%s, want status cancelled", o)
	}
	s.settle(t)
	if c := s.checkCharges(t, 1, 0); c.Net != 0 || c.All[0].RefundedAmount != 2*priceAmount {
		t.Errorf("GET /_sim/charges: %s, refunded %d; want the one charge refunded in full, net 0", c, c.All[0].RefundedAmount)
	}
	evs := s.orderEvents(t, id)
	wantCounts(t, id, evs, map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "RefundRequested": 1, "OrderCancelled": 1,
		"RefundSucceeded": 1, "RefundRefused": 0, "OrderNeedsReview": 0})
	if !eventually(20*time.Second, func() bool { g = s.refundGauges(t); return g == refundGauges{} }) {
		t.Errorf("GET /metrics after the refund: %+v, want all 0", g)
	}
	if got := s.available(t, show); got != 10 {
		t.Errorf("available seats after the cancel = %d, want 10", got)
	}
}

// TestDevRestart_RefundOfAChargeTheProviderForgotEndsInReview: in dev mode
// an order is confirmed, booking serve is stopped, the simulator's state
// file is deleted (a provider that lost the charge), and the order is
// cancelled after the restart. The provider answers "No such charge"; the
// refund is refused once and not retried, and the order ends in
// needs_review. /metrics shows exactly 0 pending refunds, 1 refund in
// review, 1 order in review. A repeat of the cancel answers the same 200.
func TestDevRestart_RefundOfAChargeTheProviderForgotEndsInReview(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{Env: fastEnv()})
	id, show := s.mustConfirmedOrder(t)
	s.expectOpen(id, "the provider refuses the refund: the order ends in review")

	s.Stop()
	state := filepath.Join(s.dataDir, "provider-sim", "state.journal")
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("the simulator's state file: %v", err)
	}
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	s.checkCharges(t, 0, 0)

	key := newKey()
	c := s.do(t, "POST", "/v1/orders/"+id+"/cancel", tokAlice, key, nil)
	wantStatus(t, c, http.StatusOK)
	var o *resp
	if !eventually(20*time.Second, func() bool {
		o = s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
		return o.str("status") == "needs_review"
	}) {
		t.Fatalf("20 s after the cancel: %s, want status needs_review", o)
	}
	var g refundGauges
	want := refundGauges{Pending: 0, OldestAge: 0, InReview: 1, NeedsReview: 1}
	if !eventually(20*time.Second, func() bool { g = s.refundGauges(t); return g == want }) {
		t.Fatalf("GET /metrics: %+v, want %+v", g, want)
	}
	for _, result := range []string{"refund_refused", "needs_review"} {
		line := `booking_payment_reconciliations_total{result="` + result + `"}`
		if n := s.metric(t, s.URL, line); n != 1 {
			t.Errorf("GET /metrics: %s = %v, want 1", line, n)
		}
	}

	settled := s.settle(t)
	evs := s.orderEvents(t, id)
	wantCounts(t, id, evs, map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "RefundRequested": 1, "OrderCancelled": 1,
		"RefundSucceeded": 0, "RefundRefused": 1, "OrderNeedsReview": 1})
	if r := ofType(evs, "RefundRefused"); len(r) == 1 && (r[0].str("code") != "resource_missing" || r[0].str("charge_id") == "") {
		t.Errorf("RefundRefused = %v, want code resource_missing and the charge id", r[0].Data)
	}
	if c := s.checkCharges(t, 0, 0); c.Net != 0 {
		t.Errorf("GET /_sim/charges: %s, want none", c)
	}

	again := s.do(t, "POST", "/v1/orders/"+id+"/cancel", tokAlice, key, nil)
	wantStatus(t, again, http.StatusOK)
	if !again.replayed() || again.str("status") != "needs_review" {
		t.Errorf("%s: want a replay showing status needs_review", again)
	}
	if n := s.totalEvents(t); n != settled {
		t.Errorf("event store: %d events after the repeat, want %d (nothing new)", n, settled)
	}
	if got := s.available(t, show); got != 10 {
		t.Errorf("available seats after the cancel = %d, want 10", got)
	}
}
