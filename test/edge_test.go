package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The public edge: what the API port answers and what only the admin
// listener (BOOKING_ADMIN_ADDR) does.

// adminClient reads the admin listeners; it is not the API's client, whose
// answers are checked against the OpenAPI document.
var adminClient = &http.Client{Timeout: 30 * time.Second}

// adminOf returns the admin listener's base URL of the booking serve whose
// API is at base (this server or a peer).
func (s *server) adminOf(t testing.TB, base string) string {
	t.Helper()
	v, ok := s.admins.Load(base)
	if !ok {
		t.Fatalf("no admin listener known for the API at %s", base)
	}
	return v.(string)
}

// scrape returns the body of GET /metrics of the admin listener at
// adminBase, failing the test unless it answers 200.
func (s *server) scrape(t testing.TB, adminBase string) string {
	t.Helper()
	res, err := adminClient.Get(adminBase + "/metrics")
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", adminBase, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics = %d, %v, want 200", adminBase, res.StatusCode, err)
	}
	return string(body)
}

// TestEdge_MetricsOnlyOnTheAdminListener: the API port answers /metrics and
// the profiler 404 (problem+json, like any unknown path), with or without a
// token, while the admin listener serves both; the API port still serves
// /healthz, /readyz and /openapi.yaml.
func TestEdge_MetricsOnlyOnTheAdminListener(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap"} {
		for _, tok := range []string{"", tokAdmin} {
			r := s.doCall(t, call{Method: "GET", Path: path, Token: tok})
			checkProblem(t, r, http.StatusNotFound, "not-found")
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml"} {
		if r := s.doCall(t, call{Method: "GET", Path: path}); r.Status != http.StatusOK {
			t.Errorf("%s, want 200", r)
		}
	}
	body := s.scrape(t, s.AdminURL)
	for _, want := range []string{"booking_build_info{", "go_gc_duration_seconds", `booking_http_connections_max{listener="api"} 1024`,
		`booking_http_connections_refused_total{listener="api"} 0`, `booking_http_connections_max{listener="admin"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET %s/metrics has no %q", s.AdminURL, want)
		}
	}
	res, err := adminClient.Get(s.AdminURL + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "heap profile:") {
		t.Errorf("GET %s/debug/pprof/heap?debug=1 = %d %.100q, want a heap profile", s.AdminURL, res.StatusCode, b)
	}
}

// TestRetryBudget_PerReplicaWithTwoReplicas: two booking serve replicas on
// one database, each with a budget of 5 POSTs (and 1 more per 1000 s): one
// actor's burst of 8 POSTs at each replica is answered 5 times and refused
// 3 times by each, so the actor gets 2 × the burst from the two; each
// replica's admin listener shows its share (rate and burst) and counts its
// own refusals.
func TestRetryBudget_PerReplicaWithTwoReplicas(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{ExternalSim: true, Env: map[string]string{
		"BOOKING_RETRY_BUDGET_RATE": "0.001", "BOOKING_RETRY_BUDGET_BURST": "5"}})
	p := s.startPeer(t)
	for _, base := range []string{s.URL, p.URL} {
		allowed, refused := 0, 0
		for range 8 {
			// No Idempotency-Key: 400 and nothing recorded, but counted
			// against the budget, which comes first.
			r := s.doCall(t, call{Method: "POST", Path: base + "/v1/reservations", Token: tokBob, Body: map[string]any{}})
			switch r.Status {
			case http.StatusBadRequest:
				allowed++
			case http.StatusTooManyRequests:
				checkProblem(t, r, http.StatusTooManyRequests, "rate-limited")
				refused++
			default:
				t.Fatalf("%s, want 400 (no key) or 429", r)
			}
		}
		if allowed != 5 || refused != 3 {
			t.Errorf("8 POSTs of one actor at %s: %d passed the budget, %d refused; want 5 and 3 (this replica's burst)", base, allowed, refused)
		}
	}
	for _, base := range []string{s.URL, p.URL} {
		admin := s.adminOf(t, base)
		for line, want := range map[string]float64{"booking_retry_budget_rate": 0.001, "booking_retry_budget_burst": 5,
			"booking_retry_budget_exceeded_total": 3} {
			if got := s.metric(t, base, line); got != want {
				t.Errorf("GET %s/metrics: %s = %v, want %v", admin, line, got, want)
			}
		}
	}
}

// TestEdge_ForgedWebhookFlood: 120 forged notifications (a wrong secret,
// or a timestamp 10 minutes old) from 8 connections, and 10 announcing a
// body over 64 KiB, at a booking serve: each is refused (400, 413), none
// records anything, booking_webhooks_total counts 120 bad_signature and 10
// invalid, and the refusals cost at most one log line per 10 s. A stale
// header is answered before the body it announces is sent (which the
// server would otherwise wait for until its read timeout, 408).
func TestEdge_ForgedWebhookFlood(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{Env: map[string]string{"BOOKING_LOG_FORMAT": "json"}})
	before := s.totalEvents(t)
	body := []byte(`{"id":"evt_forged","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_forged","object":"payment_intent"}}}`)
	const forged, oversized, senders = 120, 10, 8
	start := time.Now()
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for w := range senders {
		wg.Go(func() {
			for i := w; i < forged; i += senders {
				sig := signWebhook(body, time.Now(), []byte("whsec_forged"))
				if i%3 == 0 {
					sig = signWebhook(body, time.Now().Add(-10*time.Minute), []byte(webhookSecret))
				}
				a, err := s.send(context.Background(), call{Method: "POST", Path: "/v1/provider/webhooks", Body: body,
					Header: map[string]string{"Stripe-Signature": sig}})
				if err != nil || a.Status != http.StatusBadRequest {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Fatalf("%d of %d forged notifications were not answered 400", n, forged)
	}
	host := strings.TrimPrefix(s.URL, "http://")
	sig := "Stripe-Signature: " + signWebhook(body, time.Now(), []byte("whsec_forged")) + "\r\n"
	for range oversized {
		if status, _ := rawWebhook(t, host, sig+fmt.Sprintf("Content-Length: %d\r\n", 100<<10)); status != http.StatusRequestEntityTooLarge {
			t.Fatalf("a 100 KiB Content-Length = %d, want 413 before the body is sent", status)
		}
	}
	elapsed := time.Since(start)
	stale := "Stripe-Signature: " + signWebhook(body, time.Now().Add(-10*time.Minute), []byte(webhookSecret)) + "\r\n"
	status, answer := rawWebhook(t, host, stale+"Content-Length: 200\r\n")
	if status != http.StatusBadRequest || !strings.Contains(answer, `"code":"stale-signature"`) {
		t.Fatalf("a stale header with its body unsent = %d %s, want 400 stale-signature before the body", status, answer)
	}
	if got := s.metric(t, s.URL, `booking_webhooks_total{result="bad_signature"}`); got != forged+1 {
		t.Errorf(`booking_webhooks_total{result="bad_signature"} = %v, want %d (every forged one and the stale one)`, got, forged+1)
	}
	if got := s.metric(t, s.URL, `booking_webhooks_total{result="invalid"}`); got != oversized {
		t.Errorf(`booking_webhooks_total{result="invalid"} = %v, want %d`, got, oversized)
	}
	lines := strings.Count(s.logs.String(), `"msg":"provider webhook refused"`)
	if most := 1 + int((time.Since(start))/(10*time.Second)); lines < 1 || lines > most {
		t.Errorf("%d log lines for %d refusals in %s, want 1 to %d (one per 10 s)", lines, forged+oversized+1, elapsed, most)
	}
	if n := s.totalEvents(t); n != before {
		t.Errorf("event store: %d events after the refused notifications, want %d", n, before)
	}
}

// rawWebhook sends POST /v1/provider/webhooks to host over a connection of
// its own with the headers extra (each ending in \r\n) and no body, and
// returns the answer's status and body, read within 10 s.
func rawWebhook(t *testing.T, host, extra string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/provider/webhooks HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s\r\n", host, extra)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
