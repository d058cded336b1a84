package providersim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/retrysafe/booking/provider/providersim"
)

const (
	testSecret = "whsec_test"
	testKey    = "sk_test_sim"
)

// sim is a simulator served over loopback, with stripe-go's client for it.
type sim struct {
	*providersim.Server
	url string
	sc  *stripe.Client
}

// mustSim starts a simulator with fast test timings and the API key
// testKey; cfg's zero fields take them. Cleanup closes it.
func mustSim(tb testing.TB, cfg providersim.Config) *sim {
	tb.Helper()
	if cfg.WebhookSecret == "" {
		cfg.WebhookSecret = testSecret
	}
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = 300 * time.Millisecond
	}
	if cfg.SearchLag == 0 {
		cfg.SearchLag = -1 // searchable at once unless a test says otherwise
	}
	if cfg.Webhooks.InitialBackoff == 0 {
		cfg.Webhooks.InitialBackoff = 10 * time.Millisecond
	}
	if cfg.Webhooks.MaxBackoff == 0 {
		cfg.Webhooks.MaxBackoff = 50 * time.Millisecond
	}
	if cfg.Webhooks.ReorderHold == 0 {
		cfg.Webhooks.ReorderHold = 2 * time.Second
	}
	if cfg.Seed == 0 {
		cfg.Seed = 42
	}
	s := providersim.New(cfg)
	ts := httptest.NewServer(s.Handler())
	tb.Cleanup(ts.Close)
	tb.Cleanup(func() { s.Close() }) // runs before ts.Close: aborts sleeping handlers
	return &sim{Server: s, url: ts.URL, sc: stripeClient(ts.URL, ts.Client())}
}

// stripeClient is stripe-go's client for the API at url, with the test
// key, no retries of its own and no logging.
func stripeClient(url string, hc *http.Client) *stripe.Client {
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(url),
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return stripe.NewClient(testKey, stripe.WithBackends(backends))
}

// freshClient returns a stripe-go client whose connections are never
// reused, so that a dropped connection reaches the caller.
func (s *sim) freshClient() *stripe.Client {
	return stripeClient(s.url, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
}

// createParams are the parameters the service sends for attempt attempt of
// order orderID, paying with pm.
func createParams(key, orderID, attempt, pm string) *stripe.PaymentIntentCreateParams {
	p := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(1500),
		Currency:      stripe.String("eur"),
		PaymentMethod: stripe.String(pm),
		Confirm:       stripe.Bool(true),
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true), AllowRedirects: stripe.String("never"),
		},
		Description: stripe.String("order " + orderID),
	}
	p.AddMetadata("order_id", orderID)
	p.AddMetadata("attempt", attempt)
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

// mustCreate creates and confirms a PaymentIntent, failing tb on an error.
func (s *sim) mustCreate(tb testing.TB, key, orderID, attempt, pm string) *stripe.PaymentIntent {
	tb.Helper()
	pi, err := s.sc.V1PaymentIntents.Create(ctxT(tb), createParams(key, orderID, attempt, pm))
	if err != nil {
		tb.Fatalf("Create(%s) = %v", key, err)
	}
	return pi
}

// stripeErr returns err's *stripe.Error, failing tb if it has none.
func stripeErr(tb testing.TB, err error) *stripe.Error {
	tb.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		tb.Fatalf("error %v (%T), want a *stripe.Error", err, err)
	}
	return se
}

// answer is a raw answer read in full.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// errorObject decodes the answer's {"error":{…}}.
func (a answer) errorObject(tb testing.TB) providersim.ErrorObject {
	tb.Helper()
	var out struct {
		Error providersim.ErrorObject `json:"error"`
	}
	if err := json.Unmarshal(a.body, &out); err != nil {
		tb.Fatalf("decode error body %s: %v", a.body, err)
	}
	return out.Error
}

// do sends a raw request to the simulator: form is the body of a POST (a
// GET puts it in the query string), header adds headers; the test key
// is sent as Bearer unless header sets Authorization.
func (s *sim) do(tb testing.TB, method, path string, form url.Values, header map[string]string) answer {
	tb.Helper()
	target, body := s.url+path, io.Reader(nil)
	if method == http.MethodGet && len(form) > 0 {
		target += "?" + form.Encode()
	} else if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctxT(tb), method, target, body)
	if err != nil {
		tb.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

// control sends a JSON request to the control API and decodes a JSON
// answer into out (if not nil); it returns the status.
func (s *sim) control(tb testing.TB, method, path, body string, out any) int {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctxT(tb), method, s.url+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			tb.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

// wantControl sends a control request and fails tb unless it answers want.
func (s *sim) wantControl(tb testing.TB, method, path, body string, want int) {
	tb.Helper()
	if got := s.control(tb, method, path, body, nil); got != want {
		tb.Fatalf("%s %s = %d, want %d", method, path, got, want)
	}
}

// createForm is the form body of the service's create request, the
// parameters createParams sends.
func createForm(orderID, attempt, pm string) url.Values {
	return url.Values{
		"amount": {"1500"}, "currency": {"eur"}, "payment_method": {pm}, "confirm": {"true"},
		"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"},
		"metadata[order_id]": {orderID}, "metadata[attempt]": {attempt}, "description": {"order " + orderID},
	}
}

func mustUnmarshal(tb testing.TB, data []byte, v any) {
	tb.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		tb.Fatalf("decode %s: %v", data, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func mustAtoi(tb testing.TB, s string) int64 {
	tb.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// collect gathers what a stripe-go iterator yields, stopping at an error.
func collect[T any](seq stripe.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}

func ctxT(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// receiver is a webhook endpoint that verifies deliveries with stripe-go's
// webhook.ConstructEvent (signature, tolerance, API version) and records
// the events it accepted.
type receiver struct {
	mu       sync.Mutex
	failures int // answer 500 to this many requests first
	calls    int
	accepted []stripe.Event
	refused  []error
	srv      *httptest.Server
}

func newReceiver(tb testing.TB, failures int) *receiver {
	tb.Helper()
	r := &receiver{failures: failures}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	ev, err := webhook.ConstructEvent(body, req.Header.Get("Stripe-Signature"), testSecret)
	if err != nil {
		r.refused = append(r.refused, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.failures > 0 {
		r.failures--
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	r.accepted = append(r.accepted, ev)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) events() []stripe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]stripe.Event(nil), r.accepted...)
}

func (r *receiver) stats() (calls int, refused []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, append([]error(nil), r.refused...)
}

// wantDelivered waits until s has no webhook delivery pending and fails
// tb unless r accepted want deliveries; format, given the count, says what
// was expected.
func (r *receiver) wantDelivered(tb testing.TB, s *sim, want int, format string) {
	tb.Helper()
	mustWaitWebhooks(tb, s)
	if n := len(r.events()); n != want {
		tb.Fatalf(format, n)
	}
}

func mustWaitWebhooks(tb testing.TB, s *sim) {
	tb.Helper()
	if err := s.WaitWebhooks(ctxT(tb)); err != nil {
		tb.Fatalf("WaitWebhooks() = %v", err)
	}
}

func eventTypes(evs []stripe.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Type)
	}
	return out
}
