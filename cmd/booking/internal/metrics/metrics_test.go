package metrics

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/retrysafe/booking/commands"
)

// TestMetricNamesAndLabels pins the exposed counter names and labels:
// dashboards and alerts depend on them.
func TestMetricNamesAndLabels(t *testing.T) {
	t.Parallel()
	m := New("v0.0.0-test")
	m.FingerprintConflict("reserve")
	m.Replay("reserve")
	m.InUse("order")
	m.Contention()
	m.RedundantEffect()
	m.Reconciliation("succeeded")
	m.Recovered("follow-up")
	m.UnknownAppend("resolved")
	m.Webhook("bad_signature")
	m.RateLimited()
	m.RateLimited()
	m.Intent("reserve", "created", "")
	m.Intent("reserve", "refused", "sold-out")
	m.Webhook("duplicate")
	m.Erasure("recorded")
	m.ClockSkew(-20.5)
	m.ProviderCall("create_payment", "ok", 300*time.Millisecond)
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
		`booking_webhooks_total{result="bad_signature"} 1`,
		`booking_webhooks_total{result="accepted"} 0`,
		`booking_retry_budget_exceeded_total 2`,
		`booking_intents_total{operation="reserve",result="created"} 1`,
		`booking_intents_total{operation="reserve",result="refused"} 1`,
		`booking_intent_refusals_total{code="sold-out"} 1`,
		`booking_webhooks_total{result="duplicate"} 1`,
		`booking_erasures_total{result="recorded"} 1`,
		`booking_event_store_clock_skew_seconds -20.5`,
		`booking_provider_calls_total{operation="create_payment",result="ok"} 1`,
		`booking_provider_call_duration_seconds_bucket{operation="create_payment",le="0.5"} 1`,
		`booking_provider_call_duration_seconds_bucket{operation="create_payment",le="0.25"} 0`,
		`go_goroutines `,
		`process_start_time_seconds `,
	} {
		if !strings.Contains(body, "\n"+want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
}

// TestLabelSetsCoverCommands: every label value the commands layer reports
// through Metrics (a string literal argument of Reconciliation, Recovered or
// UnknownAppend in its source) is in the fixed label set New starts at 0,
// so a new result cannot be missing from /metrics until it first happens.
func TestLabelSetsCoverCommands(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../../../commands/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("commands source: %v (%d files)", err, len(files))
	}
	sets := map[string][]string{"Reconciliation": ReconciliationResults, "Recovered": RecoveredSteps, "UnknownAppend": UnknownAppendResults}
	call := regexp.MustCompile(`metrics\.(Reconciliation|Recovered|UnknownAppend)\(("[a-z_]*")`)
	// Intent results and erasure results are the commands layer's constants.
	for _, r := range []string{commands.IntentCreated, commands.IntentReplayed, commands.IntentRefused, commands.IntentInUse, commands.IntentWaited} {
		if !slices.Contains(IntentResults, r) {
			t.Errorf("IntentResults lack %q", r)
		}
	}
	for _, r := range []string{commands.ErasureRecorded, commands.ErasureNoOrder} {
		if !slices.Contains(ErasureResults, r) {
			t.Errorf("ErasureResults lack %q", r)
		}
	}
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			found++
			v, _ := strconv.Unquote(m[2])
			if strings.HasSuffix(v, "_") {
				continue // a prefix such as "found_" + status: its values are listed from provider's statuses
			}
			if !slices.Contains(sets[m[1]], v) {
				t.Errorf("%s: metrics.%s(%q) is not in the label set New initialises", filepath.Base(f), m[1], v)
			}
		}
	}
	if found < 10 {
		t.Errorf("found %d label values in the commands source, want the reconciliation results and the rest", found)
	}
}

// TestDashboardShowsEveryMetric: every booking_ metric New registers (but
// the build's info) is queried by a panel of the Grafana dashboard
// (deploy/grafana/dashboards/booking.json), so a new outcome cannot go
// unseen.
func TestDashboardShowsEveryMetric(t *testing.T) {
	t.Parallel()
	dash, err := os.ReadFile("../../../../deploy/grafana/dashboards/booking.json")
	if err != nil {
		t.Fatal(err)
	}
	families, err := New("v0.0.0-test").reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "booking_") || name == "booking_build_info" {
			continue
		}
		n++
		if f.GetType() == dto.MetricType_HISTOGRAM {
			name += "_bucket" // a histogram is queried by its buckets
		}
		if !strings.Contains(string(dash), name+"{") {
			t.Errorf("the dashboard has no panel querying %s", name)
		}
	}
	if n < 14 {
		t.Errorf("checked %d booking_ metrics, want every one New registers", n)
	}
}
