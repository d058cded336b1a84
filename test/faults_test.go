package test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFaultPoints_HoldParksUntilReleased: with BOOKING_TEST_HOLD_AT an order
// request parks right before its commit point (order.claiming): nothing is
// claimed and no answer comes while it is parked; the release lets it finish
// (201, one order, one charge) and disarms the step, so the next order passes
// without parking. Unknown steps are 404 at run time and fail the start.
func TestFaultPoints_HoldParksUntilReleased(t *testing.T) {
	t.Parallel()
	// An intent lease far longer than the park, so recovery does not take
	// the parked intent over (its job would park there too) however slow
	// the machine.
	s, show, res := mustStartReserved(t, Options{HoldAt: []string{"order.claiming"}, Env: map[string]string{"BOOKING_INTENT_LEASE": "300s"}}, 2)
	done := make(chan *resp, 1)
	go func() {
		r, err := s.send(context.Background(), call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
			Body: orderBody(res, "tok_visa"), Header: map[string]string{"Prefer": "wait=10"}})
		if err != nil {
			t.Errorf("POST /v1/orders: %v", err)
		}
		done <- r
	}()
	if parked := s.waitHeld(t, "order.claiming", 1); parked != 1 {
		t.Fatalf("hold order.claiming: %d parked, want 1", parked)
	}
	if n := s.streamEventCount(t, "reservation-order-"+res); n != 0 {
		t.Errorf("claim stream has %d events while the request is held before the commit point, want 0", n)
	}
	select {
	case r := <-done:
		t.Fatalf("%v: answered while held at order.claiming", r)
	default:
	}
	if arrived := s.releaseHold(t, "order.claiming"); arrived != 1 {
		t.Errorf("DELETE /_test/holds/order.claiming: %d arrived, want 1", arrived)
	}
	r := <-done
	if r == nil {
		t.FailNow()
	}
	wantStatus(t, r, http.StatusCreated)
	if r.str("status") != "confirmed" {
		t.Errorf("%s, want status confirmed", r)
	}

	// Released means disarmed: the next order does not park.
	res2 := s.mustReserve(t, tokAlice, show, 1)
	r2 := s.doCall(t, call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
		Body: orderBody(res2, "tok_visa"), Header: map[string]string{"Prefer": "wait=10"}})
	wantStatus(t, r2, http.StatusCreated)
	if st := s.holdCall(t, "GET", "order.claiming", ""); st.Armed || st.Parked != 0 || st.Arrived != 1 {
		t.Errorf("hold order.claiming after the release: %+v, want disarmed, none parked, 1 arrival in all", st)
	}
	s.settle(t)
	s.checkOrders(t, tokAlice, 2, r.str("id"), r2.str("id"))
	s.checkCharges(t, 2, 0)

	for _, m := range []string{"GET", "PUT", "DELETE"} {
		if u := s.doCall(t, call{Method: m, Path: "/_test/holds/no.such.step"}); u.Status != http.StatusNotFound {
			t.Errorf("%s: want 404 for an unknown step", u)
		}
	}

	// An unknown step in BOOKING_TEST_HOLD_AT fails the start and names the
	// variable (another process on the same database, on free ports).
	env := append(s.env(), "BOOKING_TEST_HOLD_AT=order.claiming,no.such.step",
		"BOOKING_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(freePort(t)), "BOOKING_PROVIDER_SIM_ADDR=127.0.0.1:"+strconv.Itoa(freePort(t)),
		"BOOKING_NATS_ADDR=127.0.0.1:"+strconv.Itoa(freePort(t)), "BOOKING_ADMIN_ADDR=", "BOOKING_DATA_DIR="+t.TempDir())
	// It must refuse to start: still running after 60 s fails the test.
	p, out := runProc(t, "booking serve with BOOKING_TEST_HOLD_AT=no.such.step", []string{"serve"}, env, 60*time.Second)
	if p.exitCode() == 0 || !strings.Contains(out.String(), "BOOKING_TEST_HOLD_AT") || !strings.Contains(out.String(), "no.such.step") {
		t.Errorf("booking serve with an unknown hold step: exit %d, output %q; want a failure naming BOOKING_TEST_HOLD_AT and the step",
			p.exitCode(), out.String())
	}
}
