package providersim_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

func TestSimChargesListsEveryChargeWithExactFields(t *testing.T) {
	t.Parallel()
	s, ctx := mustSimCtx(t, providersim.Config{})
	ch := s.mustCharge(t, ctx, "k1", charge("o1", 1, "tok_visa"))
	_, _ = s.client.CreateCharge(ctx, "k2", charge("o2", 1, "tok_decline"))
	if _, err := s.client.Refund(ctx, "r1", ch.ID, 100); err != nil {
		t.Fatal(err)
	}

	var raw struct {
		Charges []map[string]any `json:"charges"`
	}
	if status := s.mustDo(t, http.MethodGet, "/_sim/charges", nil, &raw); status != http.StatusOK || len(raw.Charges) != 2 {
		t.Fatalf("GET /_sim/charges = %d with %d charges, want 200 with 2", status, len(raw.Charges))
	}
	keys := slices.Sorted(maps.Keys(raw.Charges[0]))
	if want := []string{"amount", "currency", "id", "idempotency_key", "metadata", "refunded_amount", "status"}; !slices.Equal(keys, want) {
		t.Fatalf("GET /_sim/charges fields = %v, want %v", keys, want)
	}
	var typed struct {
		Charges []providersim.SimCharge `json:"charges"`
	}
	s.mustDo(t, http.MethodGet, "/_sim/charges", nil, &typed)
	want := []providersim.SimCharge{
		{ID: ch.ID, IdempotencyKey: "k1", Amount: 1500, Currency: "EUR", Status: provider.StatusSucceeded, RefundedAmount: 100, Metadata: map[string]string{"order_id": "o1", "attempt": "1"}},
		{ID: typed.Charges[1].ID, IdempotencyKey: "k2", Amount: 1500, Currency: "EUR", Status: provider.StatusFailed, Metadata: map[string]string{"order_id": "o2", "attempt": "1"}},
	}
	if diff := cmp.Diff(want, typed.Charges); diff != "" {
		t.Fatalf("GET /_sim/charges (-want +got):\n%s", diff)
	}
}

// TestInFlightListsRequestsUntilAnswered: GET /_sim/in-flight lists a slow
// charge's key while it is being processed and no longer once it answered.
func TestInFlightListsRequestsUntilAnswered(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{SlowDelay: time.Hour}) // answered only when the test closes the simulator
	var out struct {
		Keys []string `json:"idempotency_keys"`
	}
	if status := s.mustDo(t, http.MethodGet, "/_sim/in-flight", nil, &out); status != http.StatusOK || out.Keys == nil || len(out.Keys) != 0 {
		t.Fatalf("GET /_sim/in-flight = %d %v, want 200 with an empty list", status, out.Keys)
	}
	s.mustCharge(t, ctxT(t), "fast", charge("o1", 1, "tok_visa"))
	done := make(chan error, 1)
	go func() {
		_, err := s.client.CreateCharge(context.Background(), "slow", charge("o2", 1, "tok_slow"))
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mustDo(t, http.MethodGet, "/_sim/in-flight", nil, &out)
		if slices.Equal(out.Keys, []string{"slow"}) {
			break
		}
		if time.Now().After(deadline) || len(out.Keys) > 1 {
			t.Fatalf("GET /_sim/in-flight = %v, want [slow] while the slow charge runs", out.Keys)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.InFlight(); !slices.Equal(got, []string{"slow"}) {
		t.Fatalf("InFlight() = %v, want [slow]", got)
	}
	s.Close() // aborts the slow charge: answered, not committed
	if err := <-done; err == nil {
		t.Fatal("slow charge aborted by Close: no error, want one")
	}
	if got := s.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight() after the answer = %v, want none", got)
	}
}

func TestFaultsOverHTTP(t *testing.T) {
	t.Parallel()
	s, ctx := mustSimCtx(t, providersim.Config{})

	var f providersim.Faults
	s.mustDo(t, http.MethodPost, "/_sim/faults", map[string]any{"latency_ms": 1}, &f)
	s.mustDo(t, http.MethodPost, "/_sim/faults", map[string]any{"in_use_409": 1, "error_before_commit": 1}, &f)
	if f.LatencyMS != 1 || f.InUse409 != 1 || f.ErrorBeforeCommit != 1 {
		t.Fatalf("faults after two merges = %+v", f)
	}
	s.wantStatus(t, http.MethodPost, "/_sim/faults", map[string]any{"error_before_commit_rate": 2}, http.StatusBadRequest)
	s.wantStatus(t, http.MethodPost, "/_sim/faults", map[string]any{"no_such_fault": 1}, http.StatusBadRequest)

	req := charge("o1", 1, "tok_visa")
	if _, err := s.client.CreateCharge(ctx, "k", req); !errors.Is(err, provider.ErrKeyInUse) {
		t.Fatalf("1st CreateCharge() = %v, want ErrKeyInUse (in_use_409)", err)
	}
	if _, err := s.client.CreateCharge(ctx, "k", req); !errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Fatalf("2nd CreateCharge() = %v, want ErrOutcomeUnknown (error_before_commit)", err)
	}
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("simulator has %d charges after the faults, want 0", n)
	}
	if _, err := s.client.CreateCharge(ctx, "k", req); err != nil {
		t.Fatalf("3rd CreateCharge() = %v, want success", err)
	}
	s.mustDo(t, http.MethodGet, "/_sim/faults", nil, &f)
	if f.InUse409 != 0 || f.ErrorBeforeCommit != 0 || f.LatencyMS != 1 {
		t.Fatalf("faults after use = %+v, want counts consumed", f)
	}

	s.mustDo(t, http.MethodPost, "/_sim/faults", map[string]any{"drop_after_commit": 1, "decline_tokens": []string{"tok_visa_blocked"}}, nil)
	req2 := charge("o2", 1, "tok_visa")
	if _, err := s.freshClient().CreateCharge(ctx, "k2", req2); !errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Fatalf("CreateCharge() with drop_after_commit = %v, want ErrOutcomeUnknown", err)
	}
	if ch, err := s.client.CreateCharge(ctx, "k2", req2); err != nil || !ch.Replayed {
		t.Fatalf("repeat after drop = %+v, %v; want a replay", ch, err)
	}
	if _, err := s.client.CreateCharge(ctx, "k3", charge("o3", 1, "tok_visa_blocked")); !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("CreateCharge(declined token) = %v, want ErrDeclined", err)
	}

	s.mustDo(t, http.MethodDelete, "/_sim/faults", nil, &f)
	if diff := cmp.Diff(providersim.Faults{}, f); diff != "" {
		t.Fatalf("faults after DELETE (-want +got):\n%s", diff)
	}
	if n := len(s.Charges()); n != 3 {
		t.Fatalf("simulator has %d charges, want 3", n)
	}
}

func TestRefundFaults(t *testing.T) {
	t.Parallel()
	s, ctx := mustSimCtx(t, providersim.Config{})
	ch := s.mustCharge(t, ctx, "k", charge("o1", 1, "tok_visa"))
	if err := s.SetFaults(providersim.Faults{DropAfterCommit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.freshClient().Refund(ctx, "refund-"+ch.ID, ch.ID, 0); !errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Fatalf("Refund() = %v, want ErrOutcomeUnknown", err)
	}
	if re, ok, err := s.client.RefundByKey(ctx, "refund-"+ch.ID); err != nil || !ok || re.Amount != 1500 {
		t.Fatalf("RefundByKey() = %+v, %v, %v; want the committed refund", re, ok, err)
	}
}

func TestClockOverHTTP(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	var c struct{ Now, Offset string }
	if status := s.mustDo(t, http.MethodPost, "/_sim/clock", map[string]string{"now": "2030-01-02T03:04:05Z"}, &c); status != http.StatusOK || c.Now[:19] != "2030-01-02T03:04:05" {
		t.Fatalf("POST /_sim/clock now = %d %+v", status, c)
	}
	if got := s.Now(); got.Year() != 2030 {
		t.Fatalf("Now() = %s, want 2030", got)
	}
	s.wantStatus(t, http.MethodPost, "/_sim/clock", map[string]string{"advance": "soon"}, http.StatusBadRequest)
	s.mustDo(t, http.MethodDelete, "/_sim/clock", nil, &c)
	if c.Offset != "0s" {
		t.Fatalf("DELETE /_sim/clock offset = %s, want 0s", c.Offset)
	}
	s.mustDo(t, http.MethodGet, "/_sim/clock", nil, &c)
	if now, err := time.Parse(time.RFC3339Nano, c.Now); err != nil || time.Since(now).Abs() > time.Minute {
		t.Fatalf("GET /_sim/clock = %+v, want about now", c)
	}
}

func TestProtocolErrors(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	var e struct {
		Error struct{ Type, Code, Param string } `json:"error"`
	}
	if status := s.mustDo(t, http.MethodPost, "/v1/charges", charge("o1", 1, "tok_visa"), &e); status != http.StatusBadRequest || e.Error.Type != "invalid_request_error" {
		t.Fatalf("POST /v1/charges without key = %d %+v, want 400 invalid_request_error", status, e)
	}
	if status := s.mustDo(t, http.MethodGet, "/v1/charges", nil, &e); status != http.StatusBadRequest {
		t.Fatalf("GET /v1/charges without filter = %d, want 400", status)
	}
	var list struct {
		Data []provider.Charge `json:"data"`
	}
	if status := s.mustDo(t, http.MethodGet, "/v1/charges?idempotency_key=nope", nil, &list); status != http.StatusOK || list.Data == nil || len(list.Data) != 0 {
		t.Fatalf("GET /v1/charges?idempotency_key=nope = %d %+v, want 200 with an empty list", status, list)
	}
	if status := s.mustDo(t, http.MethodGet, "/v1/nothing", nil, &e); status != http.StatusNotFound {
		t.Fatalf("GET /v1/nothing = %d, want 404", status)
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
	c := provider.New(s.URL(), nil)
	if _, err := c.CreateCharge(ctxT(t), "k", charge("o1", 1, "tok_visa")); err != nil {
		t.Fatalf("CreateCharge() = %v", err)
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
	if _, err := c.GetCharge(ctxT(t), "ch_x"); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("GetCharge() after shutdown = %v, want ErrUnavailable", err)
	}
}
