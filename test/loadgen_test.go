package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
)

// TestLoadgen_RunEndsWithAPassingAudit: `booking loadgen` against a running
// service (lost answers, double clicks, fresh keys, abandons, cancels,
// declines, simulator faults toggled) exits 0 and prints the audit's table
// with every rule checked and OK, read from the same log, simulator, API,
// database and NATS server the scenario's own final check reads, and
// writes the same report as JSON.
func TestLoadgen_RunEndsWithAPassingAudit(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	reportFile := filepath.Join(t.TempDir(), "report.json")
	// A second target where nothing listens (a dead replica): its
	// connection errors are backed off and the request goes to the live one.
	dead := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	p, out := runProc(t, "booking loadgen", []string{"loadgen", "--target", dead, "--target", s.URL, "--sim-url", s.SimURL,
		"--tokens", apiTokens, "--orders", "40", "--clients", "4", "--rate", "40", "--settle", "60s",
		"--cancel-rate", "0.3", "--abandon-rate", "0.1", "--fresh-rate", "0.2", "--show-size", "15",
		"--faults", "all", "--fault-period", "2s", "--fault-rate", "0.2", "--report", reportFile,
		"--database-url", s.dbURL, "--nats-url", "nats://" + s.natsAddr}, s.env(), 5*time.Minute)
	report := out.String()
	if code := p.exitCode(); code != 0 {
		t.Fatalf("booking loadgen exited with status %d, want 0:\n%s", code, report)
	}
	for _, rule := range audit.Rules {
		line := ""
		for _, l := range strings.Split(report, "\n") {
			if strings.Contains(l, string(rule)) {
				line = l
			}
		}
		if !strings.HasSuffix(line, " OK") || strings.Contains(line, " 0 ") {
			t.Errorf("audit row %q = %q, want it checked and OK:\n%s", rule, line, report)
		}
	}
	if strings.Contains(report, "VIOLATION") || !strings.Contains(report, "VERDICT: PASS") {
		t.Errorf("booking loadgen reported a violation or no pass:\n%s", report)
	}
	raw, err := os.ReadFile(reportFile)
	if err != nil {
		t.Fatalf("--report: %v", err)
	}
	var js struct {
		OK      bool `json:"ok"`
		Verdict struct {
			Result string `json:"result"`
		} `json:"verdict"`
		Loadgen struct {
			Bookings  int `json:"bookings"`
			Confirmed int `json:"confirmed"`
			Cancelled int `json:"cancelled"`
			Faults    int `json:"fault_toggles"`
			ConnErrs  int `json:"connection_errors"`
		} `json:"loadgen"`
		Audit struct {
			Orders    int `json:"orders"`
			Cancelled int `json:"cancelled"`
			Published int `json:"published"`
			Messages  int `json:"nats_messages"`
			Rows      []struct {
				Rule    string `json:"rule"`
				Checked int    `json:"checked"`
				Unit    string `json:"unit"`
			} `json:"rows"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatalf("--report: %v\n%s", err, raw)
	}
	for _, row := range js.Audit.Rows {
		if row.Checked == 0 || row.Unit == "" {
			t.Errorf("--report: row %q checked %d %q, want a count and its unit", row.Rule, row.Checked, row.Unit)
		}
	}
	if !js.OK || js.Verdict.Result != "pass" || js.Loadgen.Bookings != 40 || len(js.Audit.Rows) != len(audit.Rules) || js.Audit.Published != js.Audit.Messages ||
		js.Audit.Cancelled != js.Loadgen.Cancelled || js.Loadgen.Faults < 2 || js.Loadgen.ConnErrs == 0 {
		t.Errorf("--report: %+v", js)
	}
}

// TestLoadgen_WithoutTheLogChecksTheRunOnly: without --database-url (and
// so without the event log) every audit row but "no 500 answers" is
// skipped, that row is still checked from the run's answers, and the run
// exits 0.
func TestLoadgen_WithoutTheLogChecksTheRunOnly(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	var env []string
	for _, kv := range s.env() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "BOOKING_NATS_URL=") && !strings.HasPrefix(kv, "BOOKING_EVENT_STORE=") {
			env = append(env, kv)
		}
	}
	p, out := runProc(t, "booking loadgen", []string{"loadgen", "--target", s.URL + "/", "--sim-url", s.SimURL,
		"--tokens", apiTokens, "--orders", "6", "--clients", "2", "--rate", "20", "--settle", "1s"}, env, 3*time.Minute)
	report := out.String()
	if code := p.exitCode(); code != 0 {
		t.Fatalf("booking loadgen without --database-url exited with status %d, want 0:\n%s", code, report)
	}
	for _, rule := range audit.Rules {
		line := ""
		for _, l := range strings.Split(report, "\n") {
			if strings.Contains(l, string(rule)) {
				line = l
			}
		}
		want := " skipped: no event log (--database-url)"
		if rule == audit.HTTP500 {
			want = " OK"
		}
		if !strings.HasSuffix(line, want) || (rule == audit.HTTP500 && strings.Contains(line, " 0 requests checked")) {
			t.Errorf("audit row %q = %q, want it to end %q (and the no-500 row checked):\n%s", rule, line, want, report)
		}
	}
	if strings.Contains(report, "VIOLATION") {
		t.Errorf("booking loadgen without --database-url reported a violation:\n%s", report)
	}
}
