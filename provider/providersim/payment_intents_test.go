package providersim_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stripe/stripe-go/v84"

	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

func TestCreateConfirmSucceeds(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	before := time.Now().Unix()
	pi := s.mustCreate(t, "order-o1-1", "o1", "1", providersim.PaymentMethodVisa)
	switch {
	case !strings.HasPrefix(pi.ID, "pi_"), pi.Object != "payment_intent":
		t.Fatalf("id %q object %q, want a payment_intent pi_…", pi.ID, pi.Object)
	case pi.Status != stripe.PaymentIntentStatusSucceeded, pi.Amount != 1500, pi.AmountReceived != 1500, pi.Currency != "eur":
		t.Fatalf("PaymentIntent %+v, want succeeded 1500 eur received", pi)
	case pi.LatestCharge == nil || !strings.HasPrefix(pi.LatestCharge.ID, "ch_"):
		t.Fatalf("latest_charge %+v, want a ch_… id", pi.LatestCharge)
	case pi.PaymentMethod == nil || !strings.HasPrefix(pi.PaymentMethod.ID, "pm_") || pi.PaymentMethod.ID == providersim.PaymentMethodVisa:
		t.Fatalf("payment_method %+v, want a new pm_… id, not the test payment method", pi.PaymentMethod)
	case !strings.HasPrefix(pi.ClientSecret, pi.ID+"_secret_"):
		t.Fatalf("client_secret %q, want %s_secret_…", pi.ClientSecret, pi.ID)
	case pi.Created < before || pi.Created > time.Now().Unix():
		t.Fatalf("created %d, want now (%d)", pi.Created, before)
	case pi.Metadata["order_id"] != "o1" || pi.Metadata["attempt"] != "1" || pi.Description != "order o1":
		t.Fatalf("metadata %v description %q", pi.Metadata, pi.Description)
	case pi.NextAction != nil || pi.LastPaymentError != nil || pi.Livemode:
		t.Fatalf("next_action %+v last_payment_error %+v livemode %v, want none", pi.NextAction, pi.LastPaymentError, pi.Livemode)
	}
	want := []providersim.SimCharge{{ID: pi.ID, IdempotencyKey: "order-o1-1", Amount: 1500, Currency: "EUR",
		Status: provider.PaymentSucceeded, Metadata: map[string]string{"order_id": "o1", "attempt": "1"}}}
	if diff := cmp.Diff(want, s.Charges()); diff != "" {
		t.Fatalf("Charges() (-want +got):\n%s", diff)
	}
}

func TestCreateDeclines(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	for _, pm := range []string{providersim.TokenDecline, providersim.PaymentMethodChargeDeclined, "tok_decline_7", providersim.PaymentMethodVisaChargeDeclined} {
		_, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k-"+pm, "o-"+pm, "1", pm))
		se := stripeErr(t, err)
		switch {
		case se.HTTPStatusCode != http.StatusPaymentRequired, se.Type != stripe.ErrorTypeCard, se.Code != stripe.ErrorCodeCardDeclined,
			se.DeclineCode != stripe.DeclineCodeGenericDecline:
			t.Fatalf("%s: error %d %s %s %s, want 402 card_error card_declined generic_decline", pm, se.HTTPStatusCode, se.Type, se.Code, se.DeclineCode)
		case strings.Contains(se.Msg, pm):
			t.Fatalf("%s: message %q echoes the payment method", pm, se.Msg)
		case se.PaymentIntent == nil || se.PaymentIntent.Status != stripe.PaymentIntentStatusRequiresPaymentMethod:
			t.Fatalf("%s: error's payment_intent %+v, want it in requires_payment_method", pm, se.PaymentIntent)
		case se.PaymentIntent.LastPaymentError == nil || se.PaymentIntent.LastPaymentError.DeclineCode != stripe.DeclineCodeGenericDecline:
			t.Fatalf("%s: last_payment_error %+v, want generic_decline", pm, se.PaymentIntent.LastPaymentError)
		}
		got, err := s.sc.V1PaymentIntents.Retrieve(ctxT(t), se.PaymentIntent.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != stripe.PaymentIntentStatusRequiresPaymentMethod || got.LastPaymentError == nil ||
			got.LastPaymentError.Code != stripe.ErrorCodeCardDeclined || got.AmountReceived != 0 {
			t.Fatalf("%s: retrieved %+v, want declined", pm, got)
		}
	}
	for _, c := range s.Charges() {
		if c.Status != provider.PaymentRequiresPaymentMethod {
			t.Fatalf("Charges() = %+v, want every one requires_payment_method", s.Charges())
		}
	}
}

func TestAuthenticationRequired(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	ok := s.mustCreate(t, "k1", "o1", "1", providersim.PaymentMethodAuthenticationRequired)
	if ok.Status != stripe.PaymentIntentStatusRequiresAction || ok.NextAction == nil ||
		ok.NextAction.Type != stripe.PaymentIntentNextActionTypeUseStripeSDK || ok.ClientSecret == "" || ok.LatestCharge != nil {
		t.Fatalf("PaymentIntent %+v, want requires_action with next_action use_stripe_sdk and a client secret", ok)
	}
	fail := s.mustCreate(t, "k2", "o2", "1", providersim.TokenAuthenticationRequired+"_2")
	if fail.Status != stripe.PaymentIntentStatusRequiresAction {
		t.Fatalf("status %s, want requires_action", fail.Status)
	}
	var done providersim.PaymentIntent
	if code := s.control(t, http.MethodPost, "/_sim/payment_intents/"+ok.ID+"/authenticate", `{"outcome":"succeed"}`, &done); code != http.StatusOK ||
		done.Status != "succeeded" || done.NextAction != nil || done.AmountReceived != 1500 {
		t.Fatalf("authenticate succeed = %d %+v, want 200 succeeded", code, done)
	}
	if _, err := s.Authenticate(fail.ID, false); err != nil {
		t.Fatal(err)
	}
	got, err := s.sc.V1PaymentIntents.Retrieve(ctxT(t), fail.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != stripe.PaymentIntentStatusRequiresPaymentMethod || got.LastPaymentError == nil ||
		got.LastPaymentError.Code != stripe.ErrorCodePaymentIntentAuthenticationFailure || got.NextAction != nil {
		t.Fatalf("after a failed authentication %+v, want requires_payment_method with payment_intent_authentication_failure", got)
	}
	s.wantControl(t, http.MethodPost, "/_sim/payment_intents/"+ok.ID+"/authenticate", `{"outcome":"succeed"}`, http.StatusBadRequest)
	s.wantControl(t, http.MethodPost, "/_sim/payment_intents/pi_missing/authenticate", `{"outcome":"fail"}`, http.StatusNotFound)
	s.wantControl(t, http.MethodPost, "/_sim/payment_intents/"+ok.ID+"/authenticate", `{"outcome":"maybe"}`, http.StatusBadRequest)

	mustWaitWebhooks(t, s)
	types := map[string]int{}
	for _, ev := range rcv.events() {
		types[string(ev.Type)]++
	}
	if want := map[string]int{"payment_intent.requires_action": 2, "payment_intent.succeeded": 1, "payment_intent.payment_failed": 1}; !cmp.Equal(want, types) {
		t.Fatalf("webhook events %v, want %v", types, want)
	}
}

// TestUnknownPaymentMethodIsNotSaved: Stripe answers an unknown payment
// method 400 resource_missing; it is validation, so the key stays free.
func TestUnknownPaymentMethodIsNotSaved(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	a := s.do(t, http.MethodPost, "/v1/payment_intents", createForm("o1", "1", "pm_card_unheard_of"), map[string]string{"Idempotency-Key": "k"})
	e := a.errorObject(t)
	if a.status != http.StatusBadRequest || e.Type != "invalid_request_error" || e.Code != "resource_missing" || e.Param != "payment_method" {
		t.Fatalf("unknown payment method = %d %+v, want 400 resource_missing payment_method", a.status, e)
	}
	if strings.Contains(string(a.body), "unheard_of") {
		t.Fatalf("answer %s echoes the payment method", a.body)
	}
	if pi := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa); pi.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("the key after a refused request: %s, want a new succeeded PaymentIntent", pi.Status)
	}
	if err := s.SetFaults(providersim.Faults{DeclineTokens: []string{"pm_custom"}}); err != nil {
		t.Fatal(err)
	}
	if a := s.do(t, http.MethodPost, "/v1/payment_intents", createForm("o2", "1", "pm_custom"), nil); a.status != http.StatusPaymentRequired {
		t.Fatalf("a payment method of decline_tokens = %d %s, want 402", a.status, a.body)
	}
}

// TestParametersAreParsedStrictly: unknown parameters are refused as
// Stripe refuses them, and so are malformed values; nothing is created.
func TestParametersAreParsedStrictly(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	with := func(k, v string) url.Values { f := createForm("o1", "1", "tok_visa"); f.Set(k, v); return f }
	without := func(k string) url.Values { f := createForm("o1", "1", "tok_visa"); f.Del(k); return f }
	for _, tc := range []struct {
		name        string
		method      string
		path        string
		form        url.Values
		code, param string
		message     string
	}{
		{"misspelled", "POST", "/v1/payment_intents", with("amout", "1500"), "parameter_unknown", "amout", "Received unknown parameter: amout"},
		{"unknown sub key", "POST", "/v1/payment_intents", with("automatic_payment_methods[allow]", "never"), "parameter_unknown", "automatic_payment_methods[allow]", "Received unknown parameter: automatic_payment_methods[allow]"},
		{"nested metadata", "POST", "/v1/payment_intents", with("metadata[a][b]", "c"), "parameter_unknown", "metadata[a][b]", ""},
		{"scalar as hash", "POST", "/v1/payment_intents", with("amount[x]", "1"), "parameter_unknown", "amount[x]", ""},
		{"not an integer", "POST", "/v1/payment_intents", with("amount", "15.00"), "parameter_invalid_integer", "amount", "Invalid integer: 15.00"},
		{"no amount", "POST", "/v1/payment_intents", without("amount"), "parameter_missing", "amount", "Missing required param: amount."},
		{"no currency", "POST", "/v1/payment_intents", without("currency"), "parameter_missing", "currency", ""},
		{"zero amount", "POST", "/v1/payment_intents", with("amount", "0"), "parameter_invalid_integer", "amount", ""},
		{"too large", "POST", "/v1/payment_intents", with("amount", "100000000"), "amount_too_large", "amount", ""},
		{"bad boolean", "POST", "/v1/payment_intents", with("confirm", "yes"), "", "confirm", "Invalid boolean: yes"},
		{"bad enum", "POST", "/v1/payment_intents", with("automatic_payment_methods[allow_redirects]", "sometimes"), "", "automatic_payment_methods[allow_redirects]", ""},
		{"unexpandable", "POST", "/v1/payment_intents", with("expand[]", "customer"), "", "expand", "This property cannot be expanded (customer)."},
		{"query on a POST", "POST", "/v1/payment_intents?amount=1", createForm("o1", "1", "tok_visa"), "parameter_unknown", "amount", ""},
		{"list filter", "GET", "/v1/payment_intents", url.Values{"customer_email": {"x"}}, "parameter_unknown", "customer_email", ""},
		{"list limit", "GET", "/v1/payment_intents", url.Values{"limit": {"101"}}, "", "limit", ""},
		{"refund without target", "POST", "/v1/refunds", url.Values{"amount": {"1"}}, "parameter_missing", "payment_intent", ""},
		{"cancel reason", "POST", "/v1/payment_intents/pi_x/cancel", url.Values{"cancellation_reason": {"bored"}}, "", "cancellation_reason", ""},
	} {
		a := s.do(t, tc.method, tc.path, tc.form, nil)
		e := a.errorObject(t)
		if a.status != http.StatusBadRequest || e.Type != "invalid_request_error" || e.Code != tc.code || e.Param != tc.param ||
			tc.message != "" && e.Message != tc.message {
			t.Errorf("%s: %d %+v, want 400 invalid_request_error code %q param %q message %q", tc.name, a.status, e, tc.code, tc.param, tc.message)
		}
	}
	json := s.do(t, http.MethodPost, "/v1/payment_intents", nil, map[string]string{"Content-Type": "application/json"})
	if json.status != http.StatusBadRequest {
		t.Errorf("an empty JSON POST = %d, want 400 (missing amount)", json.status)
	}
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d PaymentIntents after refused requests, want 0", n)
	}
}

// TestConfirmNeedsReturnURLUnlessRedirectsAreRuledOut: with automatic
// payment methods on (Stripe's default), confirming without return_url is
// refused unless allow_redirects=never or payment_method_types=[card].
func TestConfirmNeedsReturnURLUnlessRedirectsAreRuledOut(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	base := func() url.Values {
		return url.Values{"amount": {"1500"}, "currency": {"EUR"}, "payment_method": {"pm_card_visa"}, "confirm": {"true"}}
	}
	for i, tc := range []struct {
		name string
		add  url.Values
		want int
	}{
		{"defaults", nil, 400},
		{"enabled, redirects not said", url.Values{"automatic_payment_methods[enabled]": {"true"}}, 400},
		{"redirects always", url.Values{"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"always"}}, 400},
		{"enabled missing", url.Values{"automatic_payment_methods[allow_redirects]": {"never"}}, 400},
		{"both parameters", url.Values{"automatic_payment_methods[enabled]": {"true"}, "payment_method_types[]": {"card"}}, 400},
		{"redirects never", url.Values{"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"}}, 200},
		{"card only", url.Values{"payment_method_types[]": {"card"}}, 200},
		{"card only, indexed", url.Values{"payment_method_types[0]": {"card"}}, 200},
		{"a return_url", url.Values{"return_url": {"https://example.com/back"}}, 200},
	} {
		f := base()
		for k, v := range tc.add {
			f[k] = v
		}
		key := "k" + string(rune('a'+i))
		a := s.do(t, http.MethodPost, "/v1/payment_intents", f, map[string]string{"Idempotency-Key": key})
		if a.status != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, a.status, a.body, tc.want)
			continue
		}
		if a.status == 400 {
			if tc.name == "defaults" && !strings.Contains(a.errorObject(t).Message, "return_url") {
				t.Errorf("%s: message %q, want Stripe's about return_url", tc.name, a.errorObject(t).Message)
			}
			// Refused in validation: nothing saved under the key.
			if ok := s.do(t, http.MethodPost, "/v1/payment_intents", createForm("o", "1", "tok_visa"), map[string]string{"Idempotency-Key": key}); ok.status != 200 {
				t.Errorf("%s: the key after the refusal = %d %s, want 200", tc.name, ok.status, ok.body)
			}
		}
	}
	unconfirmed := s.do(t, http.MethodPost, "/v1/payment_intents", url.Values{"amount": {"100"}, "currency": {"usd"}, "payment_method": {"tok_visa"}}, nil)
	if unconfirmed.status != 200 || !strings.Contains(string(unconfirmed.body), `"status":"requires_confirmation"`) {
		t.Errorf("create without confirm = %d %s, want 200 requires_confirmation", unconfirmed.status, unconfirmed.body)
	}
}

func TestRetrieveExpandsLatestCharge(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	pi := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	p := &stripe.PaymentIntentRetrieveParams{}
	p.AddExpand("latest_charge")
	got, err := s.sc.V1PaymentIntents.Retrieve(ctxT(t), pi.ID, p)
	if err != nil {
		t.Fatal(err)
	}
	ch := got.LatestCharge
	if ch == nil || ch.ID != pi.LatestCharge.ID || ch.Status != stripe.ChargeStatusSucceeded || ch.AmountCaptured != 1500 ||
		ch.PaymentIntent == nil || ch.PaymentIntent.ID != pi.ID || ch.AmountRefunded != 0 {
		t.Fatalf("expanded latest_charge %+v, want the succeeded charge of %s", ch, pi.ID)
	}
	_, err = s.sc.V1PaymentIntents.Retrieve(ctxT(t), "pi_missing", nil)
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusNotFound || se.Code != stripe.ErrorCodeResourceMissing {
		t.Fatalf("Retrieve(pi_missing) = %d %s, want 404 resource_missing", se.HTTPStatusCode, se.Code)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	pending := s.mustCreate(t, "k1", "o1", "1", providersim.PaymentMethodAuthenticationRequired)
	cp := &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("abandoned")}
	cp.SetIdempotencyKey("cancel-o1")
	got, err := s.sc.V1PaymentIntents.Cancel(ctxT(t), pending.ID, cp)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != stripe.PaymentIntentStatusCanceled || got.CancellationReason != stripe.PaymentIntentCancellationReasonAbandoned ||
		got.CanceledAt == 0 || got.NextAction != nil {
		t.Fatalf("canceled %+v, want canceled, abandoned", got)
	}

	// A succeeded one cannot be: 400 payment_intent_unexpected_state,
	// which the executing endpoint saves under the key.
	done := s.mustCreate(t, "k2", "o2", "1", providersim.TokenVisa)
	for i := range 2 {
		a := s.do(t, http.MethodPost, "/v1/payment_intents/"+done.ID+"/cancel", url.Values{"cancellation_reason": {"abandoned"}},
			map[string]string{"Idempotency-Key": "cancel-o2"})
		e := a.errorObject(t)
		if a.status != http.StatusBadRequest || e.Code != "payment_intent_unexpected_state" || e.PaymentIntent == nil || e.PaymentIntent.Status != "succeeded" {
			t.Fatalf("cancel of a succeeded one = %d %+v, want 400 payment_intent_unexpected_state with the PaymentIntent", a.status, e)
		}
		if replayed := a.header.Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
			t.Fatalf("cancel #%d: Idempotent-Replayed %v", i+1, replayed)
		}
	}
	again := s.do(t, http.MethodPost, "/v1/payment_intents/"+pending.ID+"/cancel", nil, nil)
	if again.status != http.StatusBadRequest || again.errorObject(t).Code != "payment_intent_unexpected_state" {
		t.Fatalf("cancel of a canceled one = %d %s, want 400 payment_intent_unexpected_state", again.status, again.body)
	}
	// An unknown one is 404, not saved: the key stays free.
	missing := s.do(t, http.MethodPost, "/v1/payment_intents/pi_missing/cancel", nil, map[string]string{"Idempotency-Key": "cancel-x"})
	if missing.status != http.StatusNotFound || missing.errorObject(t).Code != "resource_missing" {
		t.Fatalf("cancel of an unknown one = %d %s, want 404 resource_missing", missing.status, missing.body)
	}
	if len(s.InFlight()) != 0 {
		t.Fatalf("InFlight() = %v, want none", s.InFlight())
	}
	mustWaitWebhooks(t, s)
	evs := eventTypes(rcv.events())
	slices.Sort(evs)
	if !cmp.Equal(evs, []string{"payment_intent.canceled", "payment_intent.requires_action", "payment_intent.succeeded"}) {
		t.Fatalf("webhook events %v", evs)
	}
}

// clock is a base clock a test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestListByCreatedNewestFirstPaged(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &clock{t: base}
	s := mustSim(t, providersim.Config{Now: c.now})
	var ids []string
	for i := range 25 {
		ids = append(ids, s.mustCreate(t, "", "o", "1", providersim.TokenVisa).ID)
		if i%5 == 4 {
			c.add(10 * time.Second)
		}
	}
	// The service's call: a created range, paged to the end with
	// starting_after by stripe-go's iterator.
	p := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{
		GreaterThanOrEqual: base.Add(10 * time.Second).Unix(), LesserThanOrEqual: base.Add(30 * time.Second).Unix()}}
	p.Limit = stripe.Int64(4)
	var got []string
	for pi, err := range s.sc.V1PaymentIntents.List(ctxT(t), p) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, pi.ID)
	}
	var want []string
	for i := 19; i >= 5; i-- {
		want = append(want, ids[i])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("List(created in [+10 s, +30 s]) (-want +got):\n%s", diff)
	}

	var page struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
		HasMore bool   `json:"has_more"`
		Object  string `json:"object"`
		URL     string `json:"url"`
	}
	decode := func(a answer) {
		t.Helper()
		page.Data = nil
		if a.status != 200 {
			t.Fatalf("list = %d %s", a.status, a.body)
		}
		mustUnmarshal(t, a.body, &page)
	}
	decode(s.do(t, http.MethodGet, "/v1/payment_intents", url.Values{"limit": {"3"}}, nil))
	if len(page.Data) != 3 || page.Data[0].ID != ids[24] || !page.HasMore || page.Object != "list" || page.URL != "/v1/payment_intents" {
		t.Fatalf("first page %+v, want the 3 newest and has_more", page)
	}
	decode(s.do(t, http.MethodGet, "/v1/payment_intents", url.Values{"limit": {"3"}, "starting_after": {ids[2]}}, nil))
	if len(page.Data) != 2 || page.Data[0].ID != ids[1] || page.Data[1].ID != ids[0] || page.HasMore {
		t.Fatalf("last page %+v, want ids 1, 0 and no more", page)
	}
	decode(s.do(t, http.MethodGet, "/v1/payment_intents", url.Values{"limit": {"3"}, "ending_before": {ids[10]}}, nil))
	if len(page.Data) != 3 || page.Data[0].ID != ids[13] || page.Data[2].ID != ids[11] || !page.HasMore {
		t.Fatalf("ending_before page %+v, want ids 13, 12, 11 and has_more", page)
	}
	decode(s.do(t, http.MethodGet, "/v1/payment_intents", url.Values{"created": {itoa(base.Unix())}, "limit": {"100"}}, nil))
	if len(page.Data) != 5 {
		t.Fatalf("created=%d: %d, want 5", base.Unix(), len(page.Data))
	}
	decode(s.do(t, http.MethodGet, "/v1/payment_intents", url.Values{"created[gt]": {itoa(base.Add(40 * time.Second).Unix())}}, nil))
	if len(page.Data) != 0 || page.HasMore {
		t.Fatalf("created after the last: %+v, want none", page)
	}
	if a := s.do(t, http.MethodGet, "/v1/payment_intents", url.Values{"starting_after": {"pi_missing"}}, nil); a.status != 400 || a.errorObject(t).Param != "starting_after" {
		t.Fatalf("unknown cursor = %d %s, want 400 naming starting_after", a.status, a.body)
	}
}

// TestSearchFindsOnlyAfterTheLag: search is eventually consistent; on the
// simulator's clock a PaymentIntent is searchable once its lag passed.
func TestSearchFindsOnlyAfterTheLag(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{SearchLag: time.Hour})
	pi := s.mustCreate(t, "k1", "o1", "1", providersim.TokenVisa)
	if _, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k2", "o1", "2", providersim.TokenDecline)); err == nil {
		t.Fatal("a decline answered no error") // declined: an error, but a PaymentIntent
	}
	search := func(query string) []string {
		t.Helper()
		p := &stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: query}}
		var out []string
		for pi, err := range s.sc.V1PaymentIntents.Search(ctxT(t), p) {
			if err != nil {
				t.Fatalf("Search(%s) = %v", query, err)
			}
			out = append(out, pi.ID)
		}
		return out
	}
	q := "metadata['order_id']:'o1' AND metadata['attempt']:'1'"
	if got := search(q); len(got) != 0 {
		t.Fatalf("Search before the lag = %v, want nothing", got)
	}
	list, err := collect(s.sc.V1PaymentIntents.List(ctxT(t), &stripe.PaymentIntentListParams{}))
	if err != nil || len(list) != 2 {
		t.Fatalf("List meanwhile = %d, %v; want both (lists are consistent)", len(list), err)
	}
	s.AdvanceClock(59 * time.Minute)
	if got := search(q); len(got) != 0 {
		t.Fatalf("Search 59 min later = %v, want nothing (lag 1 h)", got)
	}
	s.AdvanceClock(2 * time.Minute)
	if got := search(q); !cmp.Equal(got, []string{pi.ID}) {
		t.Fatalf("Search after the lag = %v, want [%s]", got, pi.ID)
	}
	if got := search(`metadata["order_id"]:"o1"`); len(got) != 2 {
		t.Fatalf("Search by order = %v, want both attempts", got)
	}
	if got := search("status:'succeeded' AND currency:'EUR'"); !cmp.Equal(got, []string{pi.ID}) {
		t.Fatalf("Search by status = %v, want [%s]", got, pi.ID)
	}

	// The fault overrides the lag: 0 finds at once, a long lag is blind.
	s.wantControl(t, http.MethodPost, "/_sim/faults", `{"search_lag_ms":0}`, http.StatusOK)
	fresh := s.mustCreate(t, "k3", "o3", "1", providersim.TokenVisa)
	if got := search("metadata['order_id']:'o3'"); !cmp.Equal(got, []string{fresh.ID}) {
		t.Fatalf("Search with no lag = %v, want [%s]", got, fresh.ID)
	}
	s.wantControl(t, http.MethodPost, "/_sim/faults", `{"search_lag_ms":172800000}`, http.StatusOK)
	s.AdvanceClock(25 * time.Hour)
	if got := search("metadata['order_id']:'o3'"); len(got) != 0 {
		t.Fatalf("Search with a 48 h lag after 25 h = %v, want nothing", got)
	}
	for _, bad := range []string{"customer:'cus_1'", "metadata['order_id']:'o1' OR metadata['attempt']:'1'", "metadata['order_id']~'o'", "status:succeeded", ""} {
		a := s.do(t, http.MethodGet, "/v1/payment_intents/search", url.Values{"query": {bad}}, nil)
		if e := a.errorObject(t); a.status != 400 || e.Param != "query" {
			t.Errorf("query %q = %d %+v, want 400 naming query", bad, a.status, e)
		}
	}
}

func TestSearchPages(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	for range 15 {
		s.mustCreate(t, "", "o1", "1", providersim.TokenVisa)
	}
	a := s.do(t, http.MethodGet, "/v1/payment_intents/search", url.Values{"query": {"metadata['order_id']:'o1'"}, "limit": {"10"}}, nil)
	var page struct {
		Object   string            `json:"object"`
		Data     []json.RawMessage `json:"data"`
		HasMore  bool              `json:"has_more"`
		NextPage *string           `json:"next_page"`
		URL      string            `json:"url"`
	}
	mustUnmarshal(t, a.body, &page)
	if a.status != 200 || page.Object != "search_result" || len(page.Data) != 10 || !page.HasMore || page.NextPage == nil || page.URL != "/v1/payment_intents/search" {
		t.Fatalf("first page %d %+v, want 10 and a next_page", a.status, page)
	}
	b := s.do(t, http.MethodGet, "/v1/payment_intents/search", url.Values{"query": {"metadata['order_id']:'o1'"}, "page": {*page.NextPage}}, nil)
	mustUnmarshal(t, b.body, &page)
	if len(page.Data) != 5 || page.HasMore || page.NextPage != nil {
		t.Fatalf("second page %+v, want the last 5", page)
	}
	if c := s.do(t, http.MethodGet, "/v1/payment_intents/search", url.Values{"query": {"status:'succeeded'"}, "page": {"nonsense"}}, nil); c.status != 400 {
		t.Fatalf("a bad page token = %d, want 400", c.status)
	}
}

// TestLogsHoldNoPaymentMethodOrClientSecret: the simulator logs its
// commits, never what a customer's client needs or pays with.
func TestLogsHoldNoPaymentMethodOrClientSecret(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := mustSim(t, providersim.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	s.mustCreate(t, "k1", "o1", "1", providersim.TokenVisa)
	pending := s.mustCreate(t, "k2", "o2", "1", providersim.PaymentMethodAuthenticationRequired)
	if _, err := s.Authenticate(pending.ID, true); err != nil {
		t.Fatal(err)
	}
	got := logs.String()
	if !strings.Contains(got, pending.ID) {
		t.Fatalf("logs %q, want the commits logged", got)
	}
	for _, secret := range []string{providersim.TokenVisa, "pm_card", "_secret_", pending.PaymentMethod.ID} {
		if strings.Contains(got, secret) {
			t.Errorf("logs hold %q:\n%s", secret, got)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }
