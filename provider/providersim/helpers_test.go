package providersim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

const testSecret = "whsec_test"

// sim is a simulator served over loopback with a client for it.
type sim struct {
	*providersim.Server
	url    string
	client *provider.Client
}

// mustSim starts a simulator with fast test timings; cfg's zero fields take
// them. Cleanup closes it.
func mustSim(tb testing.TB, cfg providersim.Config) *sim {
	tb.Helper()
	if cfg.WebhookSecret == "" {
		cfg.WebhookSecret = testSecret
	}
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = 300 * time.Millisecond
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
	return &sim{Server: s, url: ts.URL, client: provider.New(ts.URL, ts.Client())}
}

// freshClient returns a client whose connections are never reused, so that a
// dropped connection reaches the caller instead of being retried by
// net/http's transport on a new connection.
func (s *sim) freshClient() *provider.Client {
	return provider.New(s.url, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
}

// mustDo sends a request to the simulator and decodes a JSON answer into out
// (if not nil); it returns the status.
func (s *sim) mustDo(tb testing.TB, method, path string, body any, out any) int {
	tb.Helper()
	var rdr io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			tb.Fatal(err)
		}
		rdr = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, rdr)
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

// mustCharge creates a charge with key and req, failing tb on an error.
func (s *sim) mustCharge(tb testing.TB, ctx context.Context, key string, req provider.ChargeRequest) provider.Charge {
	tb.Helper()
	ch, err := s.client.CreateCharge(ctx, key, req)
	if err != nil {
		tb.Fatalf("CreateCharge(%s) = %v", key, err)
	}
	return ch
}

// wantStatus does the request (as mustDo, discarding the body) and fails tb
// unless it answers want.
func (s *sim) wantStatus(tb testing.TB, method, path string, body any, want int) {
	tb.Helper()
	if status := s.mustDo(tb, method, path, body, nil); status != want {
		tb.Fatalf("%s %s = %d, want %d", method, path, status, want)
	}
}

// mustSimCtx starts a simulator with cfg (mustSim) and returns it with a
// context for the test (ctxT).
func mustSimCtx(tb testing.TB, cfg providersim.Config) (*sim, context.Context) {
	tb.Helper()
	return mustSim(tb, cfg), ctxT(tb)
}

func charge(orderID string, attempt int, token string) provider.ChargeRequest {
	return provider.NewChargeRequest(1500, "EUR", token, orderID, attempt)
}

func ctxT(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// receiver is a webhook endpoint that verifies signatures with
// provider.VerifySignature and records the events it accepted.
type receiver struct {
	mu       sync.Mutex
	failures int // answer 500 to this many requests first
	calls    int
	accepted []provider.Event
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
	if err := provider.VerifySignature(req.Header.Get(provider.HeaderSignature), body, []byte(testSecret), time.Now(), 0); err != nil {
		r.refused = append(r.refused, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.failures > 0 {
		r.failures--
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	ev, err := provider.ParseEvent(body)
	if err != nil {
		r.refused = append(r.refused, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.accepted = append(r.accepted, ev)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) events() []provider.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Event(nil), r.accepted...)
}

func (r *receiver) stats() (calls int, refused []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, append([]error(nil), r.refused...)
}

// mustWaitWebhooks waits until the simulator has no pending delivery.
// wantDelivered waits until s has no webhook delivery pending
// (mustWaitWebhooks) and fails tb unless r received want deliveries;
// format, given the count, says what was expected.
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
