package providersim_test

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stripe/stripe-go/v84"

	"github.com/retrysafe/booking/provider/providersim"
)

// TestAPIKeyAsStripeTakesIt: Bearer, or Basic with the key as user name;
// anything else is 401 before anything runs, and the key is never logged.
func TestAPIKeyAsStripeTakesIt(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := mustSim(t, providersim.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"bearer", "Bearer " + testKey, 200},
		{"basic, key as user name", basic(testKey, ""), 200},
		{"none", "", 401},
		{"another bearer", "Bearer sk_test_other", 401},
		{"another user", basic("sk_test_other", ""), 401},
		{"key as password", basic("", testKey), 401},
		{"no scheme", testKey, 401},
	} {
		a := s.do(t, http.MethodPost, "/v1/payment_intents", createForm("o-"+tc.name, "1", "tok_visa"),
			map[string]string{"Authorization": tc.auth, "Idempotency-Key": "k-" + tc.name})
		if a.status != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, a.status, a.body, tc.want)
		}
		if tc.want == 401 && (a.errorObject(t).Type != "invalid_request_error" || a.header.Get("WWW-Authenticate") == "") {
			t.Errorf("%s: %s %v, want invalid_request_error and WWW-Authenticate", tc.name, a.body, a.header)
		}
	}
	if n := len(s.Charges()); n != 2 {
		t.Fatalf("%d PaymentIntents, want 2 (refused requests run nothing)", n)
	}
	wrong := stripe.NewClient("sk_test_wrong", stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(s.url), MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})))
	_, err := wrong.V1PaymentIntents.Retrieve(ctxT(t), "pi_x", nil)
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusUnauthorized {
		t.Fatalf("stripe-go with another key = %d, want 401", se.HTTPStatusCode)
	}
	for _, path := range []string{"/healthz", "/_sim/charges"} {
		s.wantControl(t, http.MethodGet, path, "", http.StatusOK)
	}
	if strings.Contains(logs.String(), testKey) || strings.Contains(logs.String(), "sk_test_other") {
		t.Fatalf("the logs hold an API key:\n%s", logs.String())
	}
}

func TestWithoutAPIKeyEveryRequestPasses(t *testing.T) {
	t.Parallel()
	s := providersim.New(providersim.Config{})
	t.Cleanup(func() { s.Close() })
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/payment_intents", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /v1/payment_intents without a key = %d, want 200", w.Code)
	}
}
