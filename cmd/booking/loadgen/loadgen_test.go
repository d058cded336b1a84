package loadgen

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestFaultBody: each fault name sets exactly its field of POST /_sim/faults.
func TestFaultBody(t *testing.T) {
	t.Parallel()
	c := Config{FaultRate: 0.1, FaultLatency: 40 * time.Millisecond}
	cases := map[string]map[string]any{
		FaultErrorBeforeCommit: {"error_before_commit_rate": 0.1},
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
		"no target":     {func(c *Config) { c.Targets = nil }, "--target"},
		"zero rate":     {func(c *Config) { c.Rate = 0 }, "--rate"},
		"rate above 1":  {func(c *Config) { c.CancelRate = 1.5 }, "between 0 and 1"},
		"unknown fault": {func(c *Config) { c.Faults = []string{"meteor"} }, `unknown fault "meteor"`},
		"no period":     {func(c *Config) { c.Faults = []string{FaultAll} }, "--fault-period"},
		"no users":      {func(c *Config) { c.Users = nil }, "admin token"},
	} {
		c := ok
		tc.mod(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}
