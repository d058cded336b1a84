package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// fakeAPI is a stand-in for the booking API that answers the load
// generator's requests: shows and reservations are created (201); orders
// are answered by order (the body's payment token and how many orders came
// before); cancels are never sent (--cancel-rate 0).
func fakeAPI(t *testing.T, order func(n int64, token string) (int, any)) *httptest.Server {
	t.Helper()
	var orders atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer := func(code int, body any) {
			if code >= 400 {
				w.Header().Set("Content-Type", "application/problem+json")
			} else {
				w.Header().Set("Content-Type", "application/json")
			}
			if code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "0")
			}
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(body)
		}
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
		case "/v1/shows":
			answer(http.StatusCreated, map[string]any{"id": uuid.NewString()})
		case "/v1/reservations":
			answer(http.StatusCreated, map[string]any{"id": uuid.NewString(), "status": "held",
				"expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)})
		case "/v1/orders":
			var body struct {
				Payment struct {
					Token string `json:"token"`
				} `json:"payment"`
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			code, out := order(orders.Add(1), body.Payment.Token)
			answer(code, out)
		default:
			answer(http.StatusNotFound, map[string]any{"status": 404})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// confirmOrDecline answers an order as a healthy service does: 201
// confirmed, or 402 for the declining card.
func confirmOrDecline(_ int64, token string) (int, any) {
	if token == "tok_decline" {
		return http.StatusPaymentRequired, map[string]any{"status": 402, "code": "payment-declined"}
	}
	return http.StatusCreated, map[string]any{"id": uuid.NewString(), "status": "confirmed"}
}

// runLoadgen runs `booking loadgen` against url with a small load and no
// event log, simulator or NATS (their audit rows are skipped; the no-500
// row is checked from the answers), and returns its exit status (0 for
// none), its output and its JSON report.
func runLoadgen(t *testing.T, url string, extra ...string) (int, string, map[string]any) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	args := append([]string{"loadgen", "--target", url, "--sim-url=", "--database-url=", "--nats-url=",
		"--tokens", "admin=adm:admin,u1=tok1,u2=tok2", "--orders", "8", "--clients", "2", "--rate", "100",
		"--max-duration", "3s", "--drain", "2s", "--settle", "1s", "--timeout", "2s", "--no-progress",
		"--lose-rate", "0", "--dup-rate", "0", "--fresh-rate", "0", "--abandon-rate", "0", "--cancel-rate", "0",
		"--late-rate", "0", "--decline-rate", "0.25", "--report", report}, extra...)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := 0
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		code = exitCode(err)
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("--report: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var js map[string]any
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatalf("--report: %v\n%s", err, raw)
	}
	return code, stdout.String(), js
}

// verdictOf returns the report's verdict member: its result and reasons.
func verdictOf(t *testing.T, js map[string]any) (string, string) {
	t.Helper()
	v, _ := js["verdict"].(map[string]any)
	reasons, _ := json.Marshal(v["reasons"])
	res, _ := v["result"].(string)
	return res, string(reasons)
}

// TestLoadgenVerdict_EveryOrder503IsInconclusive: against a service whose
// every POST /v1/orders answers 503 (shows and reservations work), no
// order is confirmed: nothing is violated, yet the run proves nothing, so
// `booking loadgen` exits 3 (inconclusive), says why, and its report is not
// ok.
func TestLoadgenVerdict_EveryOrder503IsInconclusive(t *testing.T) {
	t.Parallel()
	api := fakeAPI(t, func(int64, string) (int, any) {
		return http.StatusServiceUnavailable, map[string]any{"status": 503, "code": "unavailable"}
	})
	code, out, js := runLoadgen(t, api.URL)
	res, reasons := verdictOf(t, js)
	if code != exitInconclusive || res != "inconclusive" || js["ok"] != false || !strings.Contains(reasons, "no order was confirmed") ||
		!strings.Contains(out, "VERDICT: INCONCLUSIVE: no order was confirmed") {
		t.Errorf("loadgen against orders that all answer 503: exit %d, verdict %s %s, ok %v; want exit %d, inconclusive, no order confirmed:\n%s",
			code, res, reasons, js["ok"], exitInconclusive, out)
	}
}

// TestLoadgenVerdict_FewConfirmedIsInconclusive: a service that confirms
// only the first order and answers 503 to every other confirms fewer than
// --min-success of the bookings meant to succeed: exit 3, naming the floor.
func TestLoadgenVerdict_FewConfirmedIsInconclusive(t *testing.T) {
	t.Parallel()
	var confirmed atomic.Bool
	api := fakeAPI(t, func(_ int64, token string) (int, any) {
		if token == "tok_visa" && confirmed.CompareAndSwap(false, true) {
			return confirmOrDecline(0, token)
		}
		return http.StatusServiceUnavailable, map[string]any{"status": 503, "code": "unavailable"}
	})
	code, out, js := runLoadgen(t, api.URL, "--decline-rate", "0", "--clients", "8", "--min-success", "0.5")
	res, reasons := verdictOf(t, js)
	if code != exitInconclusive || res != "inconclusive" || !strings.Contains(reasons, "1 of the 8 bookings meant to succeed confirmed, below --min-success 0.5 (4)") {
		t.Errorf("loadgen with 1 of 8 confirmed: exit %d, verdict %s %s; want exit %d, inconclusive below the floor:\n%s",
			code, res, reasons, exitInconclusive, out)
	}
}

// TestLoadgenVerdict_A500IsAViolation: a service that answers the first
// order 500 (and confirms its repeat) breaks the no-500 rule: exit 1, the
// report's verdict "violation", whatever else the run confirmed.
func TestLoadgenVerdict_A500IsAViolation(t *testing.T) {
	t.Parallel()
	api := fakeAPI(t, func(n int64, token string) (int, any) {
		if n == 1 {
			return http.StatusInternalServerError, map[string]any{"status": 500, "title": "Internal Server Error"}
		}
		return confirmOrDecline(n, token)
	})
	code, out, js := runLoadgen(t, api.URL)
	res, _ := verdictOf(t, js)
	if code != exitFailure || res != "violation" || js["ok"] != false || !strings.Contains(out, "VERDICT: VIOLATION (1)") {
		t.Errorf("loadgen against a 500: exit %d, verdict %s, ok %v; want exit %d, violation:\n%s", code, res, js["ok"], exitFailure, out)
	}
}

// TestLoadgenVerdict_AHealthyRunPasses: a service that confirms every
// order paid with a good card and declines the declining card passes:
// exit 0, verdict "pass", ok, and the no-500 row counts the requests.
func TestLoadgenVerdict_AHealthyRunPasses(t *testing.T) {
	t.Parallel()
	api := fakeAPI(t, confirmOrDecline)
	code, out, js := runLoadgen(t, api.URL)
	res, reasons := verdictOf(t, js)
	if code != 0 || res != "pass" || js["ok"] != true || !strings.Contains(out, "VERDICT: PASS") {
		t.Errorf("loadgen against a healthy service: exit %d, verdict %s %s, ok %v; want exit 0, pass:\n%s", code, res, reasons, js["ok"], out)
	}
	if !strings.Contains(out, "requests checked") || strings.Contains(out, "NOTHING CHECKED") {
		t.Errorf("loadgen's table does not say how many requests the no-500 row checked:\n%s", out)
	}
}
