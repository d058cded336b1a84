package test

import (
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
)

// TestLoadgen_RunEndsWithAPassingAudit: `booking loadgen` against a running
// service (lost answers, duplicate sends, declines) exits 0 and prints the
// audit's table with every rule checked and OK, read from the same log,
// simulator and API the scenario's own final check reads.
func TestLoadgen_RunEndsWithAPassingAudit(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	p, out := runProc(t, "booking loadgen", []string{"loadgen", "--url", s.URL, "--sim-url", s.SimURL,
		"--tokens", apiTokens, "--orders", "24", "--clients", "4", "--rate", "40", "--settle", "60s",
		"--database-url", s.dbURL}, s.env(), 5*time.Minute)
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
		if !strings.HasSuffix(line, " OK") || strings.Contains(line, " 0 checked") {
			t.Errorf("audit row %q = %q, want it checked and OK:\n%s", rule, line, report)
		}
	}
	if strings.Contains(report, "VIOLATION") {
		t.Errorf("booking loadgen reported a violation:\n%s", report)
	}
}
