package providersim_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84"

	"github.com/retrysafe/booking/provider/providersim"
)

// TestRepeatReplaysTheSavedAnswer: the same key and parameters replay the
// first answer byte for byte, with Idempotent-Replayed; parameters are
// compared, not bytes, so their order and array notation do not matter.
func TestRepeatReplaysTheSavedAnswer(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	key := map[string]string{"Idempotency-Key": "order-o1-1"}
	form := createForm("o1", "1", "tok_visa")
	form.Set("expand[]", "latest_charge")
	first := s.do(t, http.MethodPost, "/v1/payment_intents", form, key)
	if first.status != 200 || first.header.Get("Idempotent-Replayed") != "" || first.header.Get("Idempotency-Key") != "order-o1-1" {
		t.Fatalf("first = %d %v %s", first.status, first.header, first.body)
	}
	reordered := url.Values{}
	for k, v := range form {
		if k == "expand[]" {
			k = "expand[0]"
		}
		reordered[k] = v
	}
	for _, f := range []url.Values{form, reordered} {
		again := s.do(t, http.MethodPost, "/v1/payment_intents", f, key)
		if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) ||
			again.header.Get("Original-Request") != first.header.Get("Request-Id") {
			t.Fatalf("repeat = %d replayed %q body equal %v, want the first answer replayed", again.status,
				again.header.Get("Idempotent-Replayed"), bytes.Equal(again.body, first.body))
		}
	}
	// stripe-go sees a replay as the same PaymentIntent.
	p := createParams("order-o1-1", "o1", "1", "tok_visa")
	p.AddExpand("latest_charge")
	if pi, err := s.sc.V1PaymentIntents.Create(ctxT(t), p); err != nil || !strings.Contains(string(first.body), pi.ID) {
		t.Fatalf("stripe-go repeat = %v, %v", pi, err)
	}
	if n := len(s.Charges()); n != 1 {
		t.Fatalf("%d PaymentIntents, want 1", n)
	}

	// A decline is an answer like any other: replayed, not executed again.
	for i := range 2 {
		a := s.do(t, http.MethodPost, "/v1/payment_intents", createForm("o2", "1", "tok_decline"), map[string]string{"Idempotency-Key": "order-o2-1"})
		if a.status != http.StatusPaymentRequired || (a.header.Get("Idempotent-Replayed") == "true") != (i == 1) {
			t.Fatalf("decline #%d = %d replayed %q", i+1, a.status, a.header.Get("Idempotent-Replayed"))
		}
	}
	if n := len(s.Charges()); n != 2 {
		t.Fatalf("%d PaymentIntents, want 2", n)
	}
}

// TestSameKeyOtherParametersOrEndpointIsIdempotencyError: the key's first
// request is compared; a mismatch is 400 idempotency_error, never a decline,
// and changes nothing.
func TestSameKeyOtherParametersOrEndpointIsIdempotencyError(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	pi := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	p := createParams("k", "o1", "1", providersim.TokenVisa)
	p.Amount = stripe.Int64(1600)
	_, err := s.sc.V1PaymentIntents.Create(ctxT(t), p)
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeIdempotency {
		t.Fatalf("other amount under the key = %d %s, want 400 idempotency_error", se.HTTPStatusCode, se.Type)
	}
	rp := &stripe.RefundCreateParams{PaymentIntent: stripe.String(pi.ID)}
	rp.SetIdempotencyKey("k")
	_, err = s.sc.V1Refunds.Create(ctxT(t), rp)
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeIdempotency || !strings.Contains(se.Msg, "endpoint") {
		t.Fatalf("the key on another endpoint = %d %s %q, want 400 idempotency_error about the endpoint", se.HTTPStatusCode, se.Type, se.Msg)
	}
	if n, r := len(s.Charges()), len(s.Refunds()); n != 1 || r != 0 {
		t.Fatalf("%d PaymentIntents, %d refunds; want 1, 0", n, r)
	}
}

// TestConcurrentRequestWithTheKeyIs409: while the first request executes,
// another with its key is refused 409 idempotency_key_in_use, not saved.
func TestConcurrentRequestWithTheKeyIs409(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{SlowDelay: time.Minute})
	first := make(chan answer, 1)
	go func() {
		first <- s.do(t, http.MethodPost, "/v1/payment_intents", createForm("o1", "1", providersim.TokenSlow), map[string]string{"Idempotency-Key": "k"})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(s.InFlight()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.InFlight(); len(got) != 1 || got[0] != "k" {
		t.Fatalf("InFlight() = %v, want [k]", got)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k", "o1", "1", providersim.TokenSlow))
			se := stripeErr(t, err)
			if se.HTTPStatusCode != http.StatusConflict || se.Code != stripe.ErrorCodeIdempotencyKeyInUse || se.Type != stripe.ErrorTypeInvalidRequest {
				t.Errorf("concurrent = %d %s %s, want 409 invalid_request_error idempotency_key_in_use", se.HTTPStatusCode, se.Type, se.Code)
			}
		})
	}
	wg.Wait()
	s.Close() // the first request is still executing: closing aborts it (503), nothing saved
	if a := <-first; a.status != http.StatusServiceUnavailable {
		t.Fatalf("the aborted first request = %d, want 503", a.status)
	}
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d PaymentIntents, want 0", n)
	}
}

// TestConcurrentIdenticalRequestsMakeOnePaymentIntent: 20 at once with one
// key: one executes, the others meet it (409) or replay it.
func TestConcurrentIdenticalRequestsMakeOnePaymentIntent(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids = map[string]int{}
	)
	for range 20 {
		wg.Go(func() {
			pi, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k", "o1", "1", providersim.TokenVisa))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusConflict {
					t.Errorf("Create = %v, want a PaymentIntent or 409", err)
				}
				return
			}
			ids[pi.ID]++
		})
	}
	wg.Wait()
	if n := len(s.Charges()); n != 1 || len(ids) != 1 {
		t.Fatalf("%d PaymentIntents, answers named %v; want 1", n, ids)
	}
}

// TestErrorBeforeCommitIsNotSaved: a 500 before the endpoint executes
// creates nothing and saves nothing; a repeat executes.
func TestErrorBeforeCommitIsNotSaved(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	for range 2 {
		_, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k1", "o1", "1", providersim.TokenErrorBeforeCommit))
		if se := stripeErr(t, err); se.HTTPStatusCode != 500 || se.Type != stripe.ErrorTypeAPI {
			t.Fatalf("tok_error_before_commit = %d %s, want 500 api_error", se.HTTPStatusCode, se.Type)
		}
	}
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d PaymentIntents, want 0", n)
	}
	if err := s.SetFaults(providersim.Faults{ErrorBeforeCommit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k2", "o2", "1", providersim.TokenVisa)); stripeErr(t, err).HTTPStatusCode != 500 {
		t.Fatalf("error_before_commit: %v, want 500", err)
	}
	a := s.do(t, http.MethodPost, "/v1/payment_intents", createForm("o2", "1", providersim.TokenVisa), map[string]string{"Idempotency-Key": "k2"})
	if a.status != 200 || a.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the repeat = %d replayed %q, want it executed (200)", a.status, a.header.Get("Idempotent-Replayed"))
	}
	if n := len(s.Charges()); n != 1 {
		t.Fatalf("%d PaymentIntents, want 1", n)
	}
}

// TestErrorAfterCommitIsSavedAndReplayed: Stripe saves a 500 of an
// endpoint that began executing; the PaymentIntent exists, and a repeat
// replays the 500.
func TestErrorAfterCommitIsSavedAndReplayed(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	check := func(key, orderID, pm string) {
		t.Helper()
		for i := range 2 {
			a := s.do(t, http.MethodPost, "/v1/payment_intents", createForm(orderID, "1", pm), map[string]string{"Idempotency-Key": key})
			if a.status != 500 || a.errorObject(t).Type != "api_error" || (a.header.Get("Idempotent-Replayed") == "true") != (i == 1) {
				t.Fatalf("%s #%d = %d replayed %q %s, want 500 api_error (replayed the second time)", pm, i+1, a.status,
					a.header.Get("Idempotent-Replayed"), a.body)
			}
		}
		found := 0
		for _, c := range s.Charges() {
			if c.Metadata["order_id"] == orderID && c.Status == "succeeded" && c.IdempotencyKey == key {
				found++
			}
		}
		if found != 1 {
			t.Fatalf("%s: %d succeeded PaymentIntents of %s, want 1: %+v", pm, found, orderID, s.Charges())
		}
	}
	check("k1", "o1", providersim.TokenErrorAfterCommit)
	if err := s.SetFaults(providersim.Faults{ErrorAfterCommit: 1}); err != nil {
		t.Fatal(err)
	}
	check("k2", "o2", providersim.TokenVisa)
	rcv.wantDelivered(t, s, 2, "%d webhook events, want 2 payment_intent.succeeded")
}

// TestDropAfterCommitReplaysTheOutcome: the connection is dropped after
// the commit; the same key replays the 200.
func TestDropAfterCommitReplaysTheOutcome(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	sc := s.freshClient()
	for i, pm := range []string{providersim.TokenTimeoutAfterCommit, providersim.TokenVisa} {
		key := "k" + itoa(int64(i))
		if i == 1 {
			if err := s.SetFaults(providersim.Faults{DropAfterCommit: 1}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := sc.V1PaymentIntents.Create(ctxT(t), createParams(key, "o", "1", pm))
		if err == nil {
			t.Fatalf("%s: answered, want the connection dropped", pm)
		}
		pi, err := sc.V1PaymentIntents.Create(ctxT(t), createParams(key, "o", "1", pm))
		if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded {
			t.Fatalf("%s: repeat = %v, %v; want the succeeded PaymentIntent", pm, pi, err)
		}
		if c := s.Charges(); len(c) != i+1 || c[i].ID != pi.ID {
			t.Fatalf("%s: Charges() = %+v, want %s", pm, c, pi.ID)
		}
	}
}

// TestKeysArePrunedAfterRetention: on the simulator's clock, a key older
// than the retention is forgotten and the same key starts a new request.
func TestKeysArePrunedAfterRetention(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{Retention: time.Hour})
	first := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	s.AdvanceClock(59 * time.Minute)
	if again := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa); again.ID != first.ID {
		t.Fatalf("inside the window: %s, want the replay of %s", again.ID, first.ID)
	}
	s.AdvanceClock(2 * time.Minute)
	second := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	if second.ID == first.ID || len(s.Charges()) != 2 {
		t.Fatalf("after the window: %s, %d PaymentIntents; want a second one", second.ID, len(s.Charges()))
	}
	if second.Created-first.Created > 5 {
		t.Fatalf("created %d then %d: created follows the base clock, not the moved one", first.Created, second.Created)
	}
}

func TestKeysAndFaultsOfTheKey(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	long := strings.Repeat("k", 256)
	if a := s.do(t, http.MethodPost, "/v1/payment_intents", createForm("o", "1", "tok_visa"), map[string]string{"Idempotency-Key": long}); a.status != 400 {
		t.Fatalf("a 256-character key = %d, want 400", a.status)
	}
	// Without a key every request executes.
	s.mustCreate(t, "", "o", "1", "tok_visa")
	s.mustCreate(t, "", "o", "1", "tok_visa")
	if err := s.SetFaults(providersim.Faults{InUse409: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k", "o", "1", "tok_visa"))
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusConflict {
		t.Fatalf("in_use_409 = %d, want 409", se.HTTPStatusCode)
	}
	s.mustCreate(t, "k", "o", "1", "tok_visa")
	if n := len(s.Charges()); n != 3 {
		t.Fatalf("%d PaymentIntents, want 3", n)
	}
}
