package providersim_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stripe/stripe-go/v84"

	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

func TestSimChargesListsEveryPaymentIntentWithExactFields(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	pi := s.mustCreate(t, "k1", "o1", "1", providersim.TokenVisa)
	_, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k2", "o2", "1", providersim.TokenDecline))
	declined := stripeErr(t, err).PaymentIntent
	if _, err := s.sc.V1Refunds.Create(ctxT(t), refundParams("r1", pi.ID, 100)); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Charges []map[string]any `json:"charges"`
	}
	if status := s.control(t, http.MethodGet, "/_sim/charges", "", &raw); status != http.StatusOK || len(raw.Charges) != 2 {
		t.Fatalf("GET /_sim/charges = %d with %d charges, want 200 with 2", status, len(raw.Charges))
	}
	keys := slices.Sorted(maps.Keys(raw.Charges[0]))
	if want := []string{"amount", "currency", "id", "idempotency_key", "metadata", "refunded_amount", "status"}; !slices.Equal(keys, want) {
		t.Fatalf("GET /_sim/charges fields = %v, want %v", keys, want)
	}
	var typed struct {
		Charges []providersim.SimCharge `json:"charges"`
	}
	s.control(t, http.MethodGet, "/_sim/charges", "", &typed)
	want := []providersim.SimCharge{
		{ID: pi.ID, IdempotencyKey: "k1", Amount: 1500, Currency: "EUR", Status: provider.PaymentSucceeded, RefundedAmount: 100,
			Metadata: map[string]string{"order_id": "o1", "attempt": "1"}},
		{ID: declined.ID, IdempotencyKey: "k2", Amount: 1500, Currency: "EUR", Status: provider.PaymentRequiresPaymentMethod,
			Metadata: map[string]string{"order_id": "o2", "attempt": "1"}},
	}
	if diff := cmp.Diff(want, typed.Charges); diff != "" {
		t.Fatalf("GET /_sim/charges (-want +got):\n%s", diff)
	}
	var refunds struct {
		Refunds []providersim.Refund `json:"refunds"`
	}
	s.control(t, http.MethodGet, "/_sim/refunds", "", &refunds)
	if len(refunds.Refunds) != 1 || refunds.Refunds[0].PaymentIntent != pi.ID || refunds.Refunds[0].Amount != 100 {
		t.Fatalf("GET /_sim/refunds = %+v, want the refund of 100", refunds)
	}
}

// TestInFlightListsRequestsUntilAnswered: GET /_sim/in-flight lists a slow
// request's key while it is being processed and no longer once it answered.
func TestInFlightListsRequestsUntilAnswered(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{SlowDelay: time.Hour}) // answered only when the test closes the simulator
	var out struct {
		Keys []string `json:"idempotency_keys"`
	}
	if status := s.control(t, http.MethodGet, "/_sim/in-flight", "", &out); status != http.StatusOK || out.Keys == nil || len(out.Keys) != 0 {
		t.Fatalf("GET /_sim/in-flight = %d %v, want 200 with an empty list", status, out.Keys)
	}
	s.mustCreate(t, "fast", "o1", "1", providersim.TokenVisa)
	done := make(chan error, 1)
	go func() {
		_, err := s.sc.V1PaymentIntents.Create(context.Background(), createParams("slow", "o2", "1", providersim.TokenSlow))
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.control(t, http.MethodGet, "/_sim/in-flight", "", &out)
		if slices.Equal(out.Keys, []string{"slow"}) {
			break
		}
		if time.Now().After(deadline) || len(out.Keys) > 1 {
			t.Fatalf("GET /_sim/in-flight = %v, want [slow] while the slow request runs", out.Keys)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Close() // aborts the slow request: answered, not committed
	if err := <-done; err == nil {
		t.Fatal("slow request aborted by Close: no error, want one")
	}
	if got := s.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight() after the answer = %v, want none", got)
	}
}

func TestFaultsOverHTTP(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	var f providersim.Faults
	s.control(t, http.MethodPost, "/_sim/faults", `{"latency_ms": 1}`, &f)
	s.control(t, http.MethodPost, "/_sim/faults", `{"in_use_409": 1, "error_before_commit": 1, "error_after_commit": 1, "search_lag_ms": 5000}`, &f)
	if f.LatencyMS != 1 || f.InUse409 != 1 || f.ErrorBeforeCommit != 1 || f.ErrorAfterCommit != 1 || f.SearchLagMS == nil || *f.SearchLagMS != 5000 {
		t.Fatalf("faults after two merges = %+v", f)
	}
	for _, bad := range []string{`{"error_before_commit_rate": 2}`, `{"error_after_commit_rate": -1}`, `{"search_lag_ms": -1}`, `{"no_such_fault": 1}`} {
		s.wantControl(t, http.MethodPost, "/_sim/faults", bad, http.StatusBadRequest)
	}
	codes := []int{}
	for range 4 {
		_, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k", "o1", "1", providersim.TokenVisa))
		if err == nil {
			codes = append(codes, 200)
			continue
		}
		codes = append(codes, stripeErr(t, err).HTTPStatusCode)
	}
	// 409 (in_use_409), 500 before (not saved), 500 after (saved), then
	// the saved 500 replayed.
	if want := []int{409, 500, 500, 500}; !slices.Equal(codes, want) {
		t.Fatalf("answers %v, want %v", codes, want)
	}
	if n := len(s.Charges()); n != 1 {
		t.Fatalf("%d PaymentIntents, want 1 (from error_after_commit)", n)
	}
	s.control(t, http.MethodGet, "/_sim/faults", "", &f)
	if f.InUse409 != 0 || f.ErrorBeforeCommit != 0 || f.ErrorAfterCommit != 0 || f.LatencyMS != 1 {
		t.Fatalf("faults after use = %+v, want counts consumed", f)
	}
	s.control(t, http.MethodPost, "/_sim/faults", `{"search_lag_ms": null}`, &f)
	if f.SearchLagMS != nil {
		t.Fatalf("search_lag_ms after null = %v, want unset", *f.SearchLagMS)
	}
	s.control(t, http.MethodDelete, "/_sim/faults", "", &f)
	if diff := cmp.Diff(providersim.Faults{}, f); diff != "" {
		t.Fatalf("faults after DELETE (-want +got):\n%s", diff)
	}
}

func TestRefundFaults(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	pi := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	if err := s.SetFaults(providersim.Faults{DropAfterCommit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.freshClient().V1Refunds.Create(ctxT(t), refundParams("refund-1", pi.ID, 0)); err == nil {
		t.Fatal("refund with drop_after_commit answered, want the connection dropped")
	}
	re, err := s.sc.V1Refunds.Create(ctxT(t), refundParams("refund-1", pi.ID, 0))
	if err != nil || re.Amount != 1500 || len(s.Refunds()) != 1 {
		t.Fatalf("repeat = %+v, %v, %d refunds; want the committed refund replayed", re, err, len(s.Refunds()))
	}
}

func TestClockOverHTTP(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	var c struct{ Now, Offset string }
	if status := s.control(t, http.MethodPost, "/_sim/clock", `{"now": "2030-01-02T03:04:05Z"}`, &c); status != http.StatusOK || c.Now[:19] != "2030-01-02T03:04:05" {
		t.Fatalf("POST /_sim/clock now = %d %+v", status, c)
	}
	if got := s.Now(); got.Year() != 2030 {
		t.Fatalf("Now() = %s, want 2030", got)
	}
	s.wantControl(t, http.MethodPost, "/_sim/clock", `{"advance": "soon"}`, http.StatusBadRequest)
	s.control(t, http.MethodDelete, "/_sim/clock", "", &c)
	if c.Offset != "0s" {
		t.Fatalf("DELETE /_sim/clock offset = %s, want 0s", c.Offset)
	}
	s.control(t, http.MethodGet, "/_sim/clock", "", &c)
	if now, err := time.Parse(time.RFC3339Nano, c.Now); err != nil || time.Since(now).Abs() > time.Minute {
		t.Fatalf("GET /_sim/clock = %+v, want about now", c)
	}
}

func TestResetForgetsEverything(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	s.AdvanceClock(time.Hour)
	s.wantControl(t, http.MethodPost, "/_sim/reset", "", http.StatusNoContent)
	if len(s.Charges()) != 0 || len(s.Events()) != 0 || time.Until(s.Now()) > time.Minute {
		t.Fatalf("after reset: %d PaymentIntents, %d events, clock %s", len(s.Charges()), len(s.Events()), s.Now())
	}
	if pi := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa); pi.Status != stripe.PaymentIntentStatusSucceeded || len(s.Charges()) != 1 {
		t.Fatalf("the key after reset: %s, want a new PaymentIntent", pi.Status)
	}
}

func TestUnknownURLs(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	for _, c := range []struct{ method, path string }{{"GET", "/v1/charges"}, {"POST", "/v1/payment_intents/search"}, {"DELETE", "/v1/refunds"}} {
		a := s.do(t, c.method, c.path, nil, nil)
		if e := a.errorObject(t); a.status != http.StatusNotFound || e.Type != "invalid_request_error" {
			t.Errorf("%s %s = %d %+v, want 404 invalid_request_error", c.method, c.path, a.status, e)
		}
	}
	if a := s.do(t, "GET", "/v1/charges", nil, map[string]string{"Authorization": ""}); a.status != http.StatusUnauthorized {
		t.Errorf("an unknown URL without a key = %d, want 401 (authentication first)", a.status)
	}
}

func TestListenAndServeShutsDownOnCancel(t *testing.T) {
	t.Parallel()
	s := providersim.New(providersim.Config{Addr: "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ListenAndServe(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for s.URL() == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.URL() == "" {
		t.Fatal("the simulator did not start")
	}
	sc := stripeClient(s.URL(), &http.Client{})
	if _, err := sc.V1PaymentIntents.Create(ctxT(t), createParams("k", "o1", "1", providersim.TokenVisa)); err != nil {
		t.Fatalf("Create() = %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListenAndServe() = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ListenAndServe() did not return after cancel")
	}
	if _, err := sc.V1PaymentIntents.Retrieve(ctxT(t), "pi_x", nil); err == nil {
		t.Fatal("Retrieve() after shutdown = nil, want an error")
	}
}
