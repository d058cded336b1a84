package commands

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/domain/domaintest"
)

// TestOrderRuleIsTheTestsRule: the rule the event stores' tests use
// (domaintest.OrderRule, which they import since they cannot import this
// package) is the service's.
func TestOrderRuleIsTheTestsRule(t *testing.T) {
	if diff := cmp.Diff(OrderRule(), domaintest.OrderRule()); diff != "" {
		t.Errorf("domaintest.OrderRule differs from commands.OrderRule (-service +tests):\n%s", diff)
	}
}
