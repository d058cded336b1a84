package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/projections"
)

// emptyReads is a database with nothing pending: the read-model queries of
// the state gauges, answering nothing.
type emptyReads struct{}

func (emptyReads) PendingIntents(context.Context, int) ([]projections.PendingIntent, eventstore.Position, error) {
	return nil, eventstore.Position{}, nil
}

func (emptyReads) UnknownOutcomes(context.Context, int) ([]projections.UnknownOutcome, eventstore.Position, error) {
	return nil, eventstore.Position{}, nil
}

func (emptyReads) RefundBacklog(context.Context) (projections.RefundBacklog, eventstore.Position, error) {
	return projections.RefundBacklog{}, eventstore.Position{}, nil
}

// fixedClock is a database clock at one instant.
type fixedClock struct{}

func (fixedClock) Now(context.Context) (time.Time, error) {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), nil
}

// scrape GETs url and returns every sample, keyed by its series as exposed
// (`name{label="value",...}`).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s = %d %s", url, res.StatusCode, b)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return parseSamples(t, string(b))
}

// parseSamples returns every sample of a Prometheus text exposition,
// keyed by its series as exposed (`name{label="value",...}`).
func parseSamples(t *testing.T, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsFromStart: a fresh service's /metrics, served over HTTP the way
// booking serve wires it, has every metric with a fixed label set at 0 (each
// operation, reconciliation result, recovered step and append outcome;
// intents by operation and result, refusals by code, webhooks and erasures
// by result; provider calls by operation and result, with their latency
// histogram; the event store's clock skew), the
// state gauges and the pgx pool's statistics at 0, booking_build_info at 1
// with the version; the HTTP RED metrics count each answer by route
// template (a 405 by the route its path matched), method and code from the
// first request on.
func TestMetricsFromStart(t *testing.T) {
	t.Parallel()
	discard := slog.New(slog.DiscardHandler)
	mx := metrics.New("v1.2.3-test")
	pool, err := pgxpool.New(context.Background(), "postgres://booking@127.0.0.1:1/none") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	mx.MustRegister(metrics.NewPoolCollector(pool), metrics.NewStateCollector(nil, emptyReads{}, fixedClock{}, 24*time.Hour, discard))
	mx.MustRegister(metrics.NewRetryBudgetGauges(20, 40)...)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{ObserveRequest: mx.ObserveHTTP}, nil, nil, discard))
	defer srv.Close()
	admin, err := startAdmin("127.0.0.1:0", mx, 5*time.Second, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.stop()
	metricsURL := "http://" + admin.Addr + "/metrics"

	got := scrape(t, metricsURL)
	want := map[string]float64{
		fmt.Sprintf(`booking_build_info{goversion=%q,version="v1.2.3-test"}`, runtime.Version()): 1,
		`booking_show_contention_total`:                            0,
		`booking_redundant_effects_total`:                          0,
		`booking_retry_budget_exceeded_total`:                      0,
		`booking_retry_budget_rate`:                                20,
		`booking_retry_budget_burst`:                               40,
		`booking_http_connections_max{listener="admin"}`:           adminMaxConns,
		`booking_http_connections_refused_total{listener="admin"}`: 0,
		`booking_intents_pending`:                                  0,
		`booking_intent_oldest_pending_age_seconds`:                0,
		`booking_intents_unfinished_past_half_retention`:           0,
		`booking_payment_unknown_outcomes`:                         0,
		`booking_payment_oldest_unknown_outcome_age_seconds`:       0,
		`booking_refunds_pending`:                                  0,
		`booking_refund_oldest_pending_age_seconds`:                0,
		`booking_refunds_in_review`:                                0,
		`booking_orders_needs_review`:                              0,
		`pgxpool_acquired_conns`:                                   0,
		`pgxpool_idle_conns`:                                       0,
		`pgxpool_total_conns`:                                      0,
		`pgxpool_acquires_total`:                                   0,
		`pgxpool_acquire_wait_seconds_total`:                       0,
		`pgxpool_empty_acquires_total`:                             0,
		`pgxpool_new_conns_total`:                                  0,
		`pgxpool_max_conns`:                                        float64(pool.Config().MaxConns),
	}
	for _, op := range metrics.Operations {
		for _, name := range []string{"booking_idempotency_fingerprint_conflicts_total", "booking_idempotency_replays_total", "booking_idempotency_in_use_total"} {
			want[fmt.Sprintf(`%s{operation=%q}`, name, op)] = 0
		}
	}
	for _, r := range metrics.ReconciliationResults {
		want[fmt.Sprintf(`booking_payment_reconciliations_total{result=%q}`, r)] = 0
	}
	for _, s := range metrics.RecoveredSteps {
		want[fmt.Sprintf(`booking_recovered_steps_total{step=%q}`, s)] = 0
	}
	for _, r := range metrics.UnknownAppendResults {
		want[fmt.Sprintf(`booking_append_unknown_outcomes_total{result=%q}`, r)] = 0
	}
	for _, op := range metrics.Operations {
		for _, r := range metrics.IntentResults {
			want[fmt.Sprintf(`booking_intents_total{operation=%q,result=%q}`, op, r)] = 0
		}
	}
	for _, c := range metrics.RefusalCodes {
		want[fmt.Sprintf(`booking_intent_refusals_total{code=%q}`, c)] = 0
	}
	for _, r := range metrics.WebhookResults {
		want[fmt.Sprintf(`booking_webhooks_total{result=%q}`, r)] = 0
	}
	for _, r := range metrics.ErasureResults {
		want[fmt.Sprintf(`booking_erasures_total{result=%q}`, r)] = 0
	}
	for _, op := range metrics.ProviderOperations {
		for _, r := range metrics.ProviderResults {
			want[fmt.Sprintf(`booking_provider_calls_total{operation=%q,result=%q}`, op, r)] = 0
		}
		want[fmt.Sprintf(`booking_provider_call_duration_seconds_count{operation=%q}`, op)] = 0
	}
	want[`booking_event_store_clock_skew_seconds`] = 0
	for series, v := range want {
		if g, ok := got[series]; !ok || g != v {
			t.Errorf("fresh /metrics: %s = %v (present %t), want %v", series, g, ok, v)
		}
	}
	for series, v := range got {
		if strings.HasPrefix(series, "booking_") && !strings.HasPrefix(series, "booking_build_info") && !strings.HasPrefix(series, "booking_retry_budget_") &&
			!strings.HasPrefix(series, "booking_http_connections_") && v != 0 {
			t.Errorf("fresh /metrics: %s = %v, want 0", series, v)
		}
		if strings.HasPrefix(series, "http_") {
			t.Errorf("fresh /metrics has %s before any answered request", series)
		}
	}

	for _, req := range []struct{ method, path string }{{"GET", "/healthz"}, {"GET", "/metrics"}, {"GET", "/v1/orders"},
		{"DELETE", "/v1/shows"}, {"PUT", "/v1/orders/ord_1"}} {
		hreq, err := http.NewRequest(req.method, srv.URL+req.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if req.path == "/metrics" && res.StatusCode != http.StatusNotFound {
			t.Errorf("GET /metrics on the API = %d, want 404 (the metrics are the admin listener's)", res.StatusCode)
		}
	}
	got = scrape(t, metricsURL)
	for _, series := range []string{
		`http_requests_total{code="200",method="GET",route="/healthz"}`,
		`http_requests_total{code="404",method="GET",route="unmatched"}`,
		// A 405 is labelled with the route its path matched.
		`http_requests_total{code="405",method="DELETE",route="/v1/shows"}`,
		`http_requests_total{code="405",method="PUT",route="/v1/orders/{id}"}`,
		`http_requests_total{code="401",method="GET",route="/v1/orders"}`,
		`http_request_duration_seconds_count{code="401",method="GET",route="/v1/orders"}`,
		`http_request_duration_seconds_bucket{code="200",method="GET",route="/healthz",le="+Inf"}`,
	} {
		if got[series] != 1 {
			t.Errorf("/metrics after one request each: %s = %v, want 1", series, got[series])
		}
	}
}
