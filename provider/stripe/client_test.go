package stripe

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/retrysafe/booking/provider"
)

// The payment port as package commands declares it: the Client must keep
// implementing exactly this.
var _ interface {
	CreatePayment(ctx context.Context, key string, req provider.PaymentRequest) (provider.Payment, error)
	GetPayment(ctx context.Context, id string) (provider.Payment, error)
	ListPayments(ctx context.Context, from, to time.Time) ([]provider.Payment, error)
	SearchPayments(ctx context.Context, orderID string, attempt int) ([]provider.Payment, error)
	CancelPayment(ctx context.Context, key, id string) (provider.Payment, error)
	Refund(ctx context.Context, key string, req provider.PaymentRefundRequest) (provider.PaymentRefund, error)
	ListRefunds(ctx context.Context, paymentID string) ([]provider.PaymentRefund, error)
	ParseWebhook(body []byte, signatureHeader string, now time.Time) (provider.WebhookEvent, error)
	CheckWebhookHeader(signatureHeader string, now time.Time) error
} = (*Client)(nil)

// Secrets the tests plant in answers; no error text or log line may show them.
const (
	testSecretKey     = "sk_test_adapterSECRETkey"
	testPaymentMethod = "pm_card_visa"
	testClientSecret  = "pi_1_secret_PLANTED"
)

var testRequest = provider.PaymentRequest{
	Amount: 1500, Currency: "EUR", PaymentMethod: testPaymentMethod,
	OrderID: "ord_1", Attempt: 2, Description: "2 seats",
}

// mustClient returns a Client for baseURL with a test key.
func mustClient(tb testing.TB, baseURL string, hc *http.Client) *Client {
	tb.Helper()
	c, err := New(Config{SecretKey: testSecretKey, BaseURL: baseURL, HTTPClient: hc, WebhookSecrets: []string{"whsec_test"}})
	if err != nil {
		tb.Fatalf("New() = %v", err)
	}
	return c
}

// recorded is one request a fake Stripe received.
type recorded struct {
	Method, Path string
	Header       http.Header
	Form         url.Values // the body of a POST, the query of a GET
}

// fakeStripe serves answer for every request and records the requests.
type fakeStripe struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newFakeStripe(tb testing.TB, answer http.HandlerFunc) *fakeStripe {
	tb.Helper()
	f := &fakeStripe{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		if r.Method != http.MethodPost {
			form = r.URL.Query()
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.URL.Path, r.Header.Clone(), form})
		f.mu.Unlock()
		answer(w, r)
	}))
	tb.Cleanup(f.Close)
	return f
}

func (f *fakeStripe) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// reply writes a JSON answer with status and extra headers (name, value, …).
func reply(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_test")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// piJSON returns a PaymentIntent as Stripe renders it, with the given
// status and extra members (raw JSON "key":value pairs).
func piJSON(id, status string, extra ...string) string {
	members := []string{
		`"id":"` + id + `"`, `"object":"payment_intent"`, `"amount":1500`, `"currency":"eur"`,
		`"status":"` + status + `"`, `"created":1767225600`, `"client_secret":"` + testClientSecret + `"`,
		`"payment_method":"` + testPaymentMethod + `"`, `"metadata":{"order_id":"ord_1","attempt":"2"}`,
	}
	return "{" + strings.Join(append(members, extra...), ",") + "}"
}

func TestCreatePayment_SendsTheRequestStripeAcceptsAndMapsTheAnswer(t *testing.T) {
	t.Parallel()
	f := newFakeStripe(t, reply(200, piJSON("pi_1", "succeeded", `"latest_charge":"ch_1"`), "Idempotent-Replayed", "true"))
	req := testRequest
	req.Deployment = "prod-eu"
	got, err := mustClient(t, f.URL, nil).CreatePayment(t.Context(), "order-ord_1-attempt-2", req)
	if err != nil {
		t.Fatalf("CreatePayment() = %v", err)
	}
	want := provider.Payment{
		ID: "pi_1", Amount: 1500, Currency: "EUR", Status: provider.PaymentSucceeded,
		Metadata: map[string]string{"order_id": "ord_1", "attempt": "2"},
		Created:  time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ClientSecret: testClientSecret, Replayed: true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CreatePayment() mismatch (-want +got):\n%s", diff)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("requests = %d, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/v1/payment_intents" {
		t.Errorf("request = %s %s, want POST /v1/payment_intents", r.Method, r.Path)
	}
	wantForm := url.Values{
		"amount": {"1500"}, "currency": {"eur"}, "payment_method": {testPaymentMethod}, "confirm": {"true"},
		"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"},
		"metadata[order_id]": {"ord_1"}, "metadata[attempt]": {"2"}, "metadata[deployment]": {"prod-eu"},
		"description": {"2 seats"},
	}
	if diff := cmp.Diff(wantForm, r.Form); diff != "" {
		t.Errorf("form mismatch (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{
		"Idempotency-Key": "order-ord_1-attempt-2",
		"Authorization":   "Bearer " + testSecretKey,
		"Stripe-Version":  APIVersion,
		"Content-Type":    "application/x-www-form-urlencoded",
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

func TestCreatePayment_RequiresActionKeepsClientSecretAndNextActionVerbatim(t *testing.T) {
	t.Parallel()
	next := `{"type":"use_stripe_sdk","use_stripe_sdk":{"type":"three_d_secure_redirect","stripe_js":"https://hooks.stripe.com/x"}}`
	f := newFakeStripe(t, reply(200, piJSON("pi_2", "requires_action", `"next_action":`+next)))
	got, err := mustClient(t, f.URL, nil).CreatePayment(t.Context(), "k2", testRequest)
	if err != nil {
		t.Fatalf("CreatePayment() = %v", err)
	}
	if got.Status != provider.PaymentRequiresAction || got.ClientSecret != testClientSecret || string(got.NextAction) != next || got.Replayed {
		t.Errorf("CreatePayment() = status %s, secret %q, next_action %s, replayed %t; want requires_action, %q, %s, false",
			got.Status, got.ClientSecret, got.NextAction, got.Replayed, testClientSecret, next)
	}
}

// declineBody is Stripe's 402 for a declined confirmation: the error names
// the PaymentIntent, which holds the client secret and the payment method.
var declineBody = `{"error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline",` +
	`"message":"Your card was declined. pm: ` + testPaymentMethod + ` ` + testClientSecret + `",` +
	`"payment_intent":` + piJSON("pi_3", "requires_payment_method",
	`"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline","message":"Your card was declined for `+testPaymentMethod+`"}`) + `}}`

// errorCase is an answer and how the adapter must classify it.
type errorCase struct {
	name    string
	call    string // "create", "get", "cancel", "refund", "list"
	handler http.HandlerFunc
	want    []error // every sentinel the error must wrap
	notWant []error // sentinels it must not wrap
	status  int     // the APIError's StatusCode; 0: no APIError
	code    string
	replay  bool
}

func errorCases() []errorCase {
	apiErr := `{"error":{"type":"api_error","message":"An error occurred with our connection to Stripe. ` + testClientSecret + `"}}`
	return []errorCase{
		{name: "a 500 to a POST is an unknown outcome, not a failure", call: "create", handler: reply(500, apiErr),
			want: []error{provider.ErrOutcomeUnknown}, notWant: []error{provider.ErrDeclined, provider.ErrInvalidRequest, provider.ErrUnavailable}, status: 500},
		{name: "a replayed 500 to a POST is still an unknown outcome", call: "create", handler: reply(500, apiErr, "Idempotent-Replayed", "true"),
			want: []error{provider.ErrOutcomeUnknown}, notWant: []error{provider.ErrDeclined, provider.ErrInvalidRequest}, status: 500, replay: true},
		{name: "a 502 without JSON to a POST is an unknown outcome", call: "refund", handler: reply(502, `<html>bad gateway `+testClientSecret+`</html>`),
			want: []error{provider.ErrOutcomeUnknown}, status: 502},
		{name: "a 503 to a GET is unavailable", call: "get", handler: reply(503, apiErr),
			want: []error{provider.ErrUnavailable}, notWant: []error{provider.ErrOutcomeUnknown}, status: 503},
		{name: "a 409 is the key in use", call: "create", handler: reply(409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use"}}`),
			want: []error{provider.ErrKeyInUse}, status: 409, code: "idempotency_key_in_use"},
		{name: "a 400 idempotency_error is an idempotency alert, never a decline", call: "create", handler: reply(400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`),
			want: []error{provider.ErrIdempotency}, notWant: []error{provider.ErrDeclined}, status: 400},
		{name: "a 402 card_error is a decline carrying its PaymentIntent", call: "create", handler: reply(402, declineBody),
			want: []error{provider.ErrDeclined}, notWant: []error{provider.ErrOutcomeUnknown}, status: 402, code: "card_declined"},
		{name: "a 401 is a refused key and unavailable", call: "create", handler: reply(401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: sk_test_****"}}`),
			want: []error{provider.ErrUnauthorized, provider.ErrUnavailable}, notWant: []error{provider.ErrOutcomeUnknown, provider.ErrInvalidRequest}, status: 401},
		{name: "a 403 is a refused key", call: "list", handler: reply(403, `{"error":{"type":"invalid_request_error"}}`),
			want: []error{provider.ErrUnauthorized, provider.ErrUnavailable}, status: 403},
		{name: "a 404 is not found", call: "get", handler: reply(404, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"intent","message":"No such payment_intent: 'pi_x'"}}`),
			want: []error{provider.ErrNotFound}, status: 404, code: "resource_missing"},
		{name: "a 429 is unavailable, not an unknown outcome", call: "create", handler: reply(429, `{"error":{"type":"invalid_request_error","code":"rate_limit"}}`),
			want: []error{provider.ErrUnavailable}, notWant: []error{provider.ErrOutcomeUnknown}, status: 429, code: "rate_limit"},
		{name: "another 400 is an invalid request with its code", call: "create", handler: reply(400, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"payment_method","message":"No such PaymentMethod: '`+testPaymentMethod+`'"}}`),
			want: []error{provider.ErrInvalidRequest}, notWant: []error{provider.ErrDeclined, provider.ErrOutcomeUnknown}, status: 400, code: "resource_missing"},
		{name: "a cancel of a succeeded PaymentIntent is an invalid request in an unexpected state", call: "cancel",
			handler: reply(400, `{"error":{"type":"invalid_request_error","code":"payment_intent_unexpected_state","payment_intent":`+piJSON("pi_4", "succeeded")+`}}`),
			want:    []error{provider.ErrInvalidRequest}, status: 400, code: provider.CodePaymentIntentUnexpectedState},
		{name: "a refund beyond what remains is an invalid request", call: "refund", handler: reply(400, `{"error":{"type":"invalid_request_error","code":"charge_already_refunded"}}`),
			want: []error{provider.ErrInvalidRequest}, status: 400, code: provider.CodeChargeAlreadyRefunded},
		{name: "a 200 cut off after the headers is an unknown outcome", call: "create", handler: dropAfterHeaders,
			want: []error{provider.ErrOutcomeUnknown}, notWant: []error{provider.ErrUnavailable}},
		{name: "a 200 that does not decode is an unknown outcome", call: "create", handler: reply(200, `{"client_secret":"`+testClientSecret+`","payment_method":"`+testPaymentMethod+`","amount":"many"}`),
			want: []error{provider.ErrOutcomeUnknown}, notWant: []error{provider.ErrUnavailable}},
		{name: "a connection dropped before any answer is an unknown outcome", call: "create", handler: dropConnection,
			want: []error{provider.ErrOutcomeUnknown}, notWant: []error{provider.ErrUnavailable}},
		{name: "a connection dropped on a GET is unavailable", call: "get", handler: dropConnection,
			want: []error{provider.ErrUnavailable}, notWant: []error{provider.ErrOutcomeUnknown}},
	}
}

// dropConnection reads the request and closes the connection unanswered,
// as after a commit whose answer is lost.
func dropConnection(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// dropAfterHeaders answers 200 with a body promised longer than what is
// sent, then closes the connection.
func dropAfterHeaders(w http.ResponseWriter, _ *http.Request) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n" +
		`{"client_secret":"` + testClientSecret + `","payment_method":"` + testPaymentMethod + `","id":"pi_5",`)
	_ = buf.Flush()
	_ = conn.Close()
}

// callAdapter makes the adapter call named by call against c.
func callAdapter(ctx context.Context, c *Client, call string) error {
	var err error
	switch call {
	case "create":
		_, err = c.CreatePayment(ctx, "key-1", testRequest)
	case "get":
		_, err = c.GetPayment(ctx, "pi_1")
	case "cancel":
		_, err = c.CancelPayment(ctx, "key-1", "pi_1")
	case "refund":
		_, err = c.Refund(ctx, "key-1", provider.PaymentRefundRequest{PaymentID: "pi_1", Amount: 500})
	case "list":
		_, err = c.ListPayments(ctx, time.Unix(1767225600, 0), time.Unix(1767225660, 0))
	default:
		panic("unknown call " + call)
	}
	return err
}

func TestErrors_ClassifiedByStripesRulesWithOneRequestEach(t *testing.T) {
	t.Parallel()
	for _, tc := range errorCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeStripe(t, tc.handler)
			err := callAdapter(t.Context(), mustClient(t, f.URL, nil), tc.call)
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("%s: error %v does not wrap %v", tc.call, err, want)
				}
			}
			for _, no := range tc.notWant {
				if errors.Is(err, no) {
					t.Errorf("%s: error %v wraps %v", tc.call, err, no)
				}
			}
			// MaxNetworkRetries 0 and no transport resend: exactly one request.
			if n := len(f.requests()); n != 1 {
				t.Errorf("%s: the server got %d requests, want 1 (no retries inside the adapter)", tc.call, n)
			}
			var apiErr *provider.APIError
			if tc.status == 0 {
				if errors.As(err, &apiErr) {
					t.Errorf("%s: error %v is an APIError, want a transport error", tc.call, err)
				}
				return
			}
			if !errors.As(err, &apiErr) {
				t.Fatalf("%s: error %v is not an *APIError", tc.call, err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code || apiErr.Replayed != tc.replay {
				t.Errorf("%s: APIError status %d code %q replayed %t, want %d %q %t", tc.call, apiErr.StatusCode, apiErr.Code, apiErr.Replayed, tc.status, tc.code, tc.replay)
			}
		})
	}
}

func TestErrors_ADeclineCarriesThePaymentIntent(t *testing.T) {
	t.Parallel()
	f := newFakeStripe(t, reply(402, declineBody, "Idempotent-Replayed", "true"))
	_, err := mustClient(t, f.URL, nil).CreatePayment(t.Context(), "k", testRequest)
	var apiErr *provider.APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("CreatePayment() = %v, want a decline", err)
	}
	if apiErr.Payment == nil {
		t.Fatal("APIError.Payment = nil, want the declined PaymentIntent")
	}
	want := provider.Payment{
		ID: "pi_3", Amount: 1500, Currency: "EUR", Status: provider.PaymentRequiresPaymentMethod,
		Metadata: map[string]string{"order_id": "ord_1", "attempt": "2"},
		Created:  time.Unix(1767225600, 0).UTC(), ClientSecret: testClientSecret, Replayed: true,
		LastError: &provider.PaymentError{Type: "card_error", Code: "card_declined", DeclineCode: "generic_decline",
			Message: "card declined (generic_decline)"},
	}
	if diff := cmp.Diff(want, *apiErr.Payment); diff != "" {
		t.Errorf("APIError.Payment mismatch (-want +got):\n%s", diff)
	}
	if !apiErr.Payment.Declined() || apiErr.DeclineCode != "generic_decline" {
		t.Errorf("Payment.Declined() = %t, DeclineCode %q; want true, generic_decline", apiErr.Payment.Declined(), apiErr.DeclineCode)
	}
}

// secretsIn returns the planted secrets that s shows.
func secretsIn(s string) []string {
	var found []string
	for _, secret := range []string{"_secret_", testSecretKey, testPaymentMethod} {
		if strings.Contains(s, secret) {
			found = append(found, secret)
		}
	}
	return found
}

func TestErrors_TextsShowNoSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range errorCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeStripe(t, tc.handler)
			err := callAdapter(t.Context(), mustClient(t, f.URL, nil), tc.call)
			if err == nil {
				t.Fatal("no error")
			}
			for _, text := range []string{err.Error(), fmtAll(err)} {
				if found := secretsIn(text); found != nil {
					t.Errorf("error text shows %q: %s", found, text)
				}
			}
		})
	}
}

// fmtAll renders err with %+v and its APIError's Payment with %v and %#v.
func fmtAll(err error) string {
	s := err.Error()
	var apiErr *provider.APIError
	if errors.As(err, &apiErr) && apiErr.Payment != nil {
		s += " " + apiErr.Payment.String() + " " + apiErr.Payment.GoString()
		if apiErr.Payment.LastError != nil {
			s += " " + apiErr.Payment.LastError.Message
		}
	}
	return s
}

func TestErrors_AConnectionDroppedOnAReusedConnectionIsNotResent(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	f := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			reply(200, piJSON("pi_1", "succeeded"))(w, r)
			return
		}
		posts.Add(1)
		dropConnection(w, r)
	})
	// One connection, kept alive: the POST goes out on the GET's connection,
	// where Go's transport would resend a request with an Idempotency-Key.
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	c := mustClient(t, f.URL, hc)
	if _, err := c.GetPayment(t.Context(), "pi_1"); err != nil {
		t.Fatalf("GetPayment() = %v", err)
	}
	_, err := c.CreatePayment(t.Context(), "key-1", testRequest)
	if !errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Fatalf("CreatePayment() = %v, want ErrOutcomeUnknown", err)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("the server got %d POSTs, want 1 (no resend on a reused connection)", n)
	}
}

func TestErrors_NothingSentIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	_ = ln.Close()

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	f := newFakeStripe(t, reply(200, piJSON("pi_1", "succeeded")))
	for _, tc := range []struct {
		name string
		url  string
		ctx  context.Context
		also error
	}{
		{"connection refused", refused, t.Context(), nil},
		{"context done before sending", f.URL, canceled, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, call := range []string{"create", "cancel", "refund", "get"} {
				err := callAdapter(tc.ctx, mustClient(t, tc.url, nil), call)
				if !errors.Is(err, provider.ErrUnavailable) || errors.Is(err, provider.ErrOutcomeUnknown) {
					t.Errorf("%s: %v, want ErrUnavailable and not ErrOutcomeUnknown", call, err)
				}
				if tc.also != nil && !errors.Is(err, tc.also) {
					t.Errorf("%s: %v, want it to wrap %v", call, err, tc.also)
				}
			}
		})
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("the server got %d requests, want 0", n)
	}
}

func TestErrors_ATimeoutAfterSendingIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	received := make(chan struct{}, 1)
	f := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
		received <- struct{}{}
		<-r.Context().Done() // answer only when the client gives up
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-received
		cancel()
	}()
	_, err := mustClient(t, f.URL, nil).CreatePayment(ctx, "key-1", testRequest)
	if !errors.Is(err, provider.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("CreatePayment() = %v, want ErrOutcomeUnknown wrapping context.Canceled", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("the server got %d requests, want 1", n)
	}
}

func TestErrors_InvalidInputIsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	f := newFakeStripe(t, reply(200, piJSON("pi_1", "succeeded")))
	c := mustClient(t, f.URL, nil)
	ctx := t.Context()
	bad := testRequest
	bad.Amount = 0
	calls := map[string]func() error{
		"empty key":            func() error { _, err := c.CreatePayment(ctx, "", testRequest); return err },
		"key too long":         func() error { _, err := c.CreatePayment(ctx, strings.Repeat("k", 256), testRequest); return err },
		"key with a newline":   func() error { _, err := c.CreatePayment(ctx, "k\n1", testRequest); return err },
		"key with a space":     func() error { _, err := c.CancelPayment(ctx, " k", "pi_1"); return err },
		"zero amount":          func() error { _, err := c.CreatePayment(ctx, "k", bad); return err },
		"empty payment id":     func() error { _, err := c.GetPayment(ctx, ""); return err },
		"empty cancel id":      func() error { _, err := c.CancelPayment(ctx, "k", ""); return err },
		"empty refund payment": func() error { _, err := c.Refund(ctx, "k", provider.PaymentRefundRequest{}); return err },
		"negative refund": func() error {
			_, err := c.Refund(ctx, "k", provider.PaymentRefundRequest{PaymentID: "pi_1", Amount: -1})
			return err
		},
		"empty refunds payment": func() error { _, err := c.ListRefunds(ctx, ""); return err },
		"empty search order":    func() error { _, err := c.SearchPayments(ctx, "", 1); return err },
		"range ends before it starts": func() error {
			_, err := c.ListPayments(ctx, time.Unix(20, 0), time.Unix(10, 0))
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, provider.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("the server got %d requests, want 0", n)
	}
}

// pages serves successive list pages: page i is bodies[i].
func pages(bodies ...string) http.HandlerFunc {
	var n atomic.Int32
	return func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		if i >= len(bodies) {
			reply(500, `{"error":{"type":"api_error"}}`)(w, r)
			return
		}
		reply(200, bodies[i])(w, r)
	}
}

func TestListPayments_PagesToTheEndOverTheCreatedRange(t *testing.T) {
	t.Parallel()
	charge := `"latest_charge":{"id":"ch_1","object":"charge","amount":1500,"amount_refunded":500,"currency":"eur"}`
	f := newFakeStripe(t, pages(
		`{"object":"list","url":"/v1/payment_intents","has_more":true,"data":[`+piJSON("pi_3", "succeeded", charge)+`,`+piJSON("pi_2", "canceled")+`]}`,
		`{"object":"list","url":"/v1/payment_intents","has_more":false,"data":[`+piJSON("pi_1", "requires_action", `"next_action":{"type":"use_stripe_sdk","use_stripe_sdk":{"type":"three_d_secure_redirect"}}`)+`]}`,
	))
	from, to := time.Unix(1767225600, 0), time.Unix(1767225660, 900_000_000)
	got, err := mustClient(t, f.URL, nil).ListPayments(t.Context(), from, to)
	if err != nil {
		t.Fatalf("ListPayments() = %v", err)
	}
	var ids []string
	for _, p := range got {
		ids = append(ids, p.ID)
	}
	if diff := cmp.Diff([]string{"pi_3", "pi_2", "pi_1"}, ids); diff != "" {
		t.Fatalf("ListPayments() ids mismatch (-want +got):\n%s", diff)
	}
	if got[0].AmountRefunded != 500 || got[0].Currency != "EUR" || got[1].AmountRefunded != 0 {
		t.Errorf("AmountRefunded = %d, %d, currency %s; want 500, 0, EUR", got[0].AmountRefunded, got[1].AmountRefunded, got[0].Currency)
	}
	if string(got[2].NextAction) != `{"type":"use_stripe_sdk","use_stripe_sdk":{"type":"three_d_secure_redirect"}}` || got[2].ClientSecret != testClientSecret {
		t.Errorf("NextAction = %s, client secret %q; want next_action verbatim and the client secret", got[2].NextAction, got[2].ClientSecret)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("requests = %d, want 2 pages", len(reqs))
	}
	first := url.Values{
		"created[gte]": {"1767225600"}, "created[lte]": {"1767225660"}, "limit": {"100"},
		"expand[0]": {"data.latest_charge"},
	}
	second := url.Values{"starting_after": {"pi_2"}}
	for k, v := range first {
		second[k] = v
	}
	for i, want := range []url.Values{first, second} {
		if diff := cmp.Diff(want, reqs[i].Form, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("page %d query mismatch (-want +got):\n%s", i+1, diff)
		}
		if reqs[i].Method != http.MethodGet || reqs[i].Path != "/v1/payment_intents" {
			t.Errorf("page %d = %s %s, want GET /v1/payment_intents", i+1, reqs[i].Method, reqs[i].Path)
		}
	}
}

func TestSearchPayments_QueriesMetadataAndPagesToTheEnd(t *testing.T) {
	t.Parallel()
	f := newFakeStripe(t, pages(
		`{"object":"search_result","url":"/v1/payment_intents/search","has_more":true,"next_page":"page_2","data":[`+piJSON("pi_2", "succeeded")+`]}`,
		`{"object":"search_result","url":"/v1/payment_intents/search","has_more":false,"next_page":null,"data":[`+piJSON("pi_1", "canceled")+`]}`,
	))
	c := mustClient(t, f.URL, nil)
	got, err := c.SearchPayments(t.Context(), "ord_'1", 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("SearchPayments() = %d payments, %v; want 2, nil", len(got), err)
	}
	reqs := f.requests()
	wantQuery := `metadata['order_id']:'ord_\'1' AND metadata['attempt']:'2'`
	for i, r := range reqs {
		if r.Path != "/v1/payment_intents/search" || r.Form.Get("query") != wantQuery || r.Form.Get("limit") != "100" || r.Form.Get("expand[0]") != "data.latest_charge" {
			t.Errorf("request %d = %s %v, want the search with query %q", i+1, r.Path, r.Form, wantQuery)
		}
	}
	if len(reqs) != 2 || reqs[1].Form.Get("page") != "page_2" {
		t.Errorf("requests = %d, second page %q; want 2, page_2", len(reqs), reqs[len(reqs)-1].Form.Get("page"))
	}

	f2 := newFakeStripe(t, reply(200, `{"object":"search_result","has_more":false,"data":[]}`))
	if _, err := mustClient(t, f2.URL, nil).SearchPayments(t.Context(), "ord_1", 0); err != nil {
		t.Fatalf("SearchPayments(attempt 0) = %v", err)
	}
	if q := f2.requests()[0].Form.Get("query"); q != `metadata['order_id']:'ord_1'` {
		t.Errorf("attempt 0 query = %q, want the order only", q)
	}
}

func TestGetPayment_ExpandsTheLatestCharge(t *testing.T) {
	t.Parallel()
	f := newFakeStripe(t, reply(200, piJSON("pi_1", "succeeded", `"latest_charge":{"id":"ch_1","object":"charge","amount_refunded":1500}`)))
	got, err := mustClient(t, f.URL, nil).GetPayment(t.Context(), "pi_1")
	if err != nil || got.AmountRefunded != 1500 {
		t.Fatalf("GetPayment() = %+v, %v; want AmountRefunded 1500", got, err)
	}
	r := f.requests()[0]
	if r.Method != http.MethodGet || r.Path != "/v1/payment_intents/pi_1" || r.Form.Get("expand[0]") != "latest_charge" {
		t.Errorf("request = %s %s %v, want GET /v1/payment_intents/pi_1?expand[0]=latest_charge", r.Method, r.Path, r.Form)
	}
}

func TestCancelPayment_SendsAbandonedUnderTheKey(t *testing.T) {
	t.Parallel()
	f := newFakeStripe(t, reply(200, piJSON("pi_1", "canceled", `"cancellation_reason":"abandoned"`)))
	got, err := mustClient(t, f.URL, nil).CancelPayment(t.Context(), "cancel-1", "pi_1")
	if err != nil || got.Status != provider.PaymentCanceled {
		t.Fatalf("CancelPayment() = %v, %v; want canceled", got, err)
	}
	r := f.requests()[0]
	if r.Path != "/v1/payment_intents/pi_1/cancel" || r.Header.Get("Idempotency-Key") != "cancel-1" ||
		!cmp.Equal(r.Form, url.Values{"cancellation_reason": {"abandoned"}}) {
		t.Errorf("request = %s key %q form %v, want /v1/payment_intents/pi_1/cancel under cancel-1 with cancellation_reason=abandoned",
			r.Path, r.Header.Get("Idempotency-Key"), r.Form)
	}
}

func TestRefund_SendsThePaymentIntentAmountAndMetadata(t *testing.T) {
	t.Parallel()
	body := `{"id":"re_1","object":"refund","amount":500,"currency":"eur","status":"succeeded","payment_intent":"pi_1","created":1767225600,"metadata":{"reason":"redundant"}}`
	f := newFakeStripe(t, reply(200, body, "Idempotent-Replayed", "true"))
	c := mustClient(t, f.URL, nil)
	got, err := c.Refund(t.Context(), "refund-1", provider.PaymentRefundRequest{PaymentID: "pi_1", Amount: 500, Metadata: map[string]string{"reason": "redundant"}})
	if err != nil {
		t.Fatalf("Refund() = %v", err)
	}
	want := provider.PaymentRefund{ID: "re_1", PaymentID: "pi_1", Amount: 500, Currency: "EUR", Status: "succeeded",
		Metadata: map[string]string{"reason": "redundant"}, Created: time.Unix(1767225600, 0).UTC(), Replayed: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Refund() mismatch (-want +got):\n%s", diff)
	}
	if _, err := c.Refund(t.Context(), "refund-2", provider.PaymentRefundRequest{PaymentID: "pi_1"}); err != nil {
		t.Fatalf("Refund(all) = %v", err)
	}
	reqs := f.requests()
	wantForms := []url.Values{
		{"payment_intent": {"pi_1"}, "amount": {"500"}, "metadata[reason]": {"redundant"}},
		{"payment_intent": {"pi_1"}}, // amount omitted: what remains
	}
	for i, want := range wantForms {
		if diff := cmp.Diff(want, reqs[i].Form); diff != "" || reqs[i].Path != "/v1/refunds" {
			t.Errorf("refund %d to %s, form mismatch (-want +got):\n%s", i+1, reqs[i].Path, diff)
		}
	}
}

func TestListRefunds_PagesToTheEnd(t *testing.T) {
	t.Parallel()
	re := func(id string) string {
		return `{"id":"` + id + `","object":"refund","amount":100,"currency":"eur","status":"succeeded","payment_intent":"pi_1","created":1}`
	}
	f := newFakeStripe(t, pages(
		`{"object":"list","has_more":true,"data":[`+re("re_2")+`]}`,
		`{"object":"list","has_more":false,"data":[`+re("re_1")+`]}`,
	))
	got, err := mustClient(t, f.URL, nil).ListRefunds(t.Context(), "pi_1")
	if err != nil || len(got) != 2 || got[1].ID != "re_1" || got[1].PaymentID != "pi_1" || got[1].Currency != "EUR" {
		t.Fatalf("ListRefunds() = %+v, %v; want re_2, re_1 of pi_1", got, err)
	}
	reqs := f.requests()
	if reqs[0].Path != "/v1/refunds" || reqs[0].Form.Get("payment_intent") != "pi_1" || reqs[0].Form.Get("limit") != "100" || reqs[1].Form.Get("starting_after") != "re_2" {
		t.Errorf("requests = %v, %v; want payment_intent=pi_1&limit=100, then starting_after=re_2", reqs[0].Form, reqs[1].Form)
	}
}

func TestNew_RefusesInvalidConfigurationAndHidesSecrets(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"no key for Stripe's API": {},
		"relative base URL":       {BaseURL: "127.0.0.1:8090"},
		"base URL with a query":   {BaseURL: "http://127.0.0.1:8090/?x=1"},
		"empty webhook secret":    {BaseURL: "http://127.0.0.1:8090", WebhookSecrets: []string{"whsec_1", ""}},
		"negative tolerance":      {BaseURL: "http://127.0.0.1:8090", WebhookTolerance: -time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%s) = nil error, want one", name)
		}
	}
	if _, err := New(Config{BaseURL: "http://127.0.0.1:8090"}); err != nil {
		t.Errorf("New(simulator URL without a key) = %v, want nil", err)
	}
	cfg := Config{SecretKey: testSecretKey, WebhookSecrets: []string{"whsec_hidden"}}
	for _, s := range []string{cfg.String(), cfg.GoString()} {
		if strings.Contains(s, testSecretKey) || strings.Contains(s, "whsec_hidden") {
			t.Errorf("Config shows a secret: %s", s)
		}
	}
}

// TestLogs_NothingSecretIsWritten runs every error case while capturing
// the process's standard output and error, where stripe-go's default
// logger writes. It is not parallel: it swaps os.Stdout and os.Stderr.
func TestLogs_NothingSecretIsWritten(t *testing.T) {
	out := captureOutput(t, func() {
		for _, tc := range errorCases() {
			f := newFakeStripe(t, tc.handler)
			_ = callAdapter(t.Context(), mustClient(t, f.URL, nil), tc.call)
		}
		f := newFakeStripe(t, reply(200, piJSON("pi_1", "requires_action", `"next_action":{"type":"use_stripe_sdk"}`)))
		c := mustClient(t, f.URL, nil)
		_, _ = c.CreatePayment(t.Context(), "k", testRequest)
		_, _ = c.GetPayment(t.Context(), "pi_1")
	})
	if found := secretsIn(out); found != nil {
		t.Errorf("the output shows %q:\n%s", found, out)
	}
}

// captureOutput returns what fn writes to os.Stdout and os.Stderr.
func captureOutput(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() {
		var b strings.Builder
		s := bufio.NewScanner(r)
		for s.Scan() {
			b.WriteString(s.Text() + "\n")
		}
		done <- b.String()
	}()
	stdout, stderr, logOut := os.Stdout, os.Stderr, log.Writer()
	os.Stdout, os.Stderr = w, w
	log.SetOutput(w)
	defer func() {
		os.Stdout, os.Stderr = stdout, stderr
		log.SetOutput(logOut)
	}()
	fn()
	os.Stdout, os.Stderr = stdout, stderr
	log.SetOutput(logOut)
	_ = w.Close()
	return <-done
}

// A reply body must decode as JSON where a test relies on it.
func TestFixtures_AreJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{piJSON("pi_1", "succeeded"), declineBody} {
		if !json.Valid([]byte(s)) {
			t.Errorf("invalid JSON fixture: %s", s)
		}
	}
}
