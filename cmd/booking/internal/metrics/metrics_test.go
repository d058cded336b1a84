package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricNamesAndLabels pins the exposed counter names and labels:
// dashboards and alerts depend on them.
func TestMetricNamesAndLabels(t *testing.T) {
	t.Parallel()
	m := New()
	m.FingerprintConflict("reserve")
	m.Replay("reserve")
	m.InUse("order")
	m.Contention()
	m.RedundantEffect()
	m.Reconciliation("succeeded")
	m.Recovered("follow-up")
	m.UnknownAppend("resolved")
	m.RateLimited()
	m.RateLimited()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`booking_idempotency_fingerprint_conflicts_total{operation="reserve"} 1`,
		`booking_idempotency_replays_total{operation="reserve"} 1`,
		`booking_idempotency_in_use_total{operation="order"} 1`,
		`booking_show_contention_total 1`,
		`booking_redundant_effects_total 1`,
		`booking_payment_reconciliations_total{result="succeeded"} 1`,
		`booking_recovered_steps_total{step="follow-up"} 1`,
		`booking_append_unknown_outcomes_total{result="resolved"} 1`,
		`booking_retry_budget_exceeded_total 2`,
		`go_goroutines `,
		`process_start_time_seconds `,
	} {
		if !strings.Contains(body, "\n"+want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
}
