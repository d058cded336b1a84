package loadgen

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
)

// TestFaultBody: each fault name sets exactly its field of POST /_sim/faults.
func TestFaultBody(t *testing.T) {
	t.Parallel()
	c := Config{FaultRate: 0.1, FaultLatency: 40 * time.Millisecond}
	cases := map[string]map[string]any{
		FaultErrorBeforeCommit: {"error_before_commit_rate": 0.1},
		FaultErrorAfterCommit:  {"error_after_commit_rate": 0.1},
		FaultDropAfterCommit:   {"drop_after_commit_rate": 0.1},
		FaultWebhookDuplicates: {"webhook_duplicate_rate": 0.4},
		FaultWebhookReorder:    {"webhook_reorder": true},
		FaultLatency:           {"latency_ms": 40},
	}
	all := map[string]any{}
	for name, want := range cases {
		c.Faults = []string{name}
		if got := c.faultBody(); !reflect.DeepEqual(got, want) {
			t.Errorf("faults %s: body %v, want %v", name, got, want)
		}
		for k, v := range want {
			all[k] = v
		}
	}
	c.Faults = []string{FaultAll}
	if got := c.faultBody(); !reflect.DeepEqual(got, all) {
		t.Errorf("faults all: body %v, want %v", got, all)
	}
}

// TestValidate names what is wrong with a configuration.
func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Targets: []string{"http://x"}, Admin: "a", Users: []string{"u"}, Clients: 1, Orders: 1, Rate: 1,
		Timeout: time.Second, MaxDuration: time.Second}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"no target":                      {func(c *Config) { c.Targets = nil }, "--target"},
		"zero rate":                      {func(c *Config) { c.Rate = 0 }, "--rate"},
		"rate above 1":                   {func(c *Config) { c.CancelRate = 1.5 }, "--cancel-rate: must be between 0 and 1, got 1.5"},
		"negative rate":                  {func(c *Config) { c.LoseRate = -0.1 }, "--lose-rate: must be between 0 and 1"},
		"NaN rate":                       {func(c *Config) { c.FaultRate = math.NaN() }, "--fault-rate: must be between 0 and 1"},
		"NaN --rate":                     {func(c *Config) { c.Rate = math.NaN() }, "--rate: must be positive"},
		"infinite --rate":                {func(c *Config) { c.Rate = math.Inf(1) }, "--rate: must be positive"},
		"negative period without faults": {func(c *Config) { c.FaultPeriod = -time.Second }, "--fault-period"},
		"no clients":                     {func(c *Config) { c.Clients = 0 }, "invalid configuration: --clients: must be at least 1"},
		"no orders":                      {func(c *Config) { c.Orders = 0 }, "invalid configuration: --orders: must be at least 1"},
		"show size":                      {func(c *Config) { c.ShowSize = -3 }, "--show-size: must be 0 (one show for all) or positive"},
		"late wait":                      {func(c *Config) { c.LateWait = -time.Second }, "--late-wait: must be positive, got -1s"},
		"drain":                          {func(c *Config) { c.Drain = -time.Second }, "--drain: must be positive"},
		"settle":                         {func(c *Config) { c.Settle = -time.Second }, "--settle: must be positive"},
		"fault latency":                  {func(c *Config) { c.FaultLatency = -time.Second }, "--fault-latency: must be positive"},
		"retention":                      {func(c *Config) { c.IntentRetention = -time.Second }, "--intent-retention: must be positive"},
		"zero timeout":                   {func(c *Config) { c.Timeout = 0 }, "--timeout: must be positive"},
		"max duration":                   {func(c *Config) { c.MaxDuration = -time.Second }, "--max-duration: must be positive"},
		"unknown fault":                  {func(c *Config) { c.Faults = []string{"meteor"} }, `unknown fault "meteor"`},
		"no period":                      {func(c *Config) { c.Faults = []string{FaultAll} }, "--fault-period"},
		"no users":                       {func(c *Config) { c.Users = nil }, "admin token"},
		"ftp target":                     {func(c *Config) { c.Targets = []string{"ftp://x"} }, `--target: "ftp://x": must be an http:// or https:// URL`},
		"no host":                        {func(c *Config) { c.Targets = []string{"http://"} }, `--target: "http://": has no host`},
		"bare host":                      {func(c *Config) { c.Targets = []string{"127.0.0.1:8080"} }, `--target: "127.0.0.1:8080"`},
		"bad sim URL":                    {func(c *Config) { c.SimURL = "localhost" }, `--sim-url: "localhost": must be an http:// or https:// URL`},
	} {
		c := ok
		tc.mod(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// TestNormalizeURLs: trailing slashes and white space go, commas separate.
func TestNormalizeURLs(t *testing.T) {
	t.Parallel()
	got := normalizeURLs([]string{"http://a:8080/", " http://b:8080, http://c:8080// ", ""})
	if want := []string{"http://a:8080", "http://b:8080", "http://c:8080"}; !reflect.DeepEqual(got, want) {
		t.Errorf("normalizeURLs = %q, want %q", got, want)
	}
}

// TestRunFailsFastWithTheDialError: a target nothing listens on fails the
// run's setup within Config.SetupTimeout (not --max-duration), with the
// connection error in the message, and is a run-time failure, not a
// configuration error.
func TestRunFailsFastWithTheDialError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := "http://" + ln.Addr().String() + "/"
	ln.Close() // nothing listens there now: connections are refused
	cfg := Config{Targets: []string{target}, Admin: "a", Users: []string{"u"}, Clients: 1, Orders: 1, Rate: 1,
		Timeout: time.Second, MaxDuration: 10 * time.Minute, SetupTimeout: 2 * time.Second, Out: io.Discard}
	t0 := time.Now()
	err = Run(context.Background(), cfg)
	took := time.Since(t0)
	want := "loadgen: create show: no answer from " + strings.TrimSuffix(target, "/") + ": "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "connection refused") ||
		!strings.HasSuffix(err.Error(), "(gave up after 2s)") {
		t.Errorf("Run against a closed port = %v, want %q… connection refused … (gave up after 2s)", err, want)
	}
	var ce *configerr.Error
	if errors.As(err, &ce) {
		t.Errorf("Run against a closed port = a configuration error %v, want a run-time failure", err)
	}
	if took > time.Minute {
		t.Errorf("Run against a closed port took %s, want about 2s (SetupTimeout), far less than --max-duration", took)
	}
}

// TestVerdict: a violation wins over everything; a run without a confirmed
// order, below the --min-success floor, or with an audit row that checked
// nothing is inconclusive; skipped rows do not count; the rest passes.
func TestVerdict(t *testing.T) {
	t.Parallel()
	rows := func(checked ...int) audit.Report {
		var r audit.Report
		for i, n := range checked {
			r.Rows = append(r.Rows, audit.Row{Rule: audit.Rules[i], Checked: n})
		}
		return r
	}
	violated := rows(3, 0)
	violated.Rows[0].Violations = []string{"x"}
	skipped := rows(3, 0)
	skipped.Rows[1].Skipped = "no simulator URL"
	for _, tt := range []struct {
		name    string
		sum     Summary
		rep     audit.Report
		want    string
		reasons []string
	}{
		{"a healthy run", Summary{Intended: 10, Confirmed: 9}, rows(3, 4), VerdictPass, []string{}},
		{"a violation wins over an empty row", Summary{Intended: 10, Confirmed: 0}, violated, VerdictViolation, []string{}},
		{"a client-side violation", Summary{Intended: 10, Confirmed: 9, Violations: []string{"y"}}, rows(3), VerdictViolation, []string{}},
		{"no confirmed order", Summary{Intended: 10}, rows(3), VerdictInconclusive, []string{"no order was confirmed"}},
		{"below the floor", Summary{Intended: 10, Confirmed: 4}, rows(3), VerdictInconclusive,
			[]string{"4 of the 10 bookings meant to succeed confirmed, below --min-success 0.5 (5)"}},
		{"a row with nothing to check", Summary{Intended: 10, Confirmed: 5}, rows(3, 0), VerdictInconclusive,
			[]string{`audit row "net charge per order" had nothing to check`}},
		{"a skipped row is not empty", Summary{Intended: 10, Confirmed: 5}, skipped, VerdictPass, []string{}},
	} {
		c := Config{MinSuccess: 0.5}
		got := c.verdict(tt.sum, tt.rep)
		if got.Result != tt.want || !reflect.DeepEqual(got.Reasons, tt.reasons) {
			t.Errorf("%s: verdict %s %q, want %s %q", tt.name, got.Result, got.Reasons, tt.want, tt.reasons)
		}
	}
}

// TestCheckFlagsNamesTheEmptyURLFlag: with no --target the load goes to
// --url, so an empty --url is named as such; a --target list of nothing but
// separators is named as --target.
func TestCheckFlagsNamesTheEmptyURLFlag(t *testing.T) {
	t.Parallel()
	base := Config{Clients: 1, Orders: 1, Rate: 1, Timeout: time.Second, MaxDuration: time.Second}
	for _, tc := range []struct {
		url     string
		targets []string
		want    string
	}{
		{"", nil, "--url: is empty"},
		{"http://127.0.0.1:8080", []string{" , "}, "--target: is empty"},
	} {
		c := base
		c.URL, c.Targets = tc.url, tc.targets
		if err := CheckFlags(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckFlags(url %q, targets %q) = %v, want an error containing %q", tc.url, tc.targets, err, tc.want)
		}
	}
}
