package providersim_test

import (
	"testing"

	"github.com/stripe/stripe-go/v84"

	"github.com/retrysafe/booking/provider/providersim"
)

// TestAPIVersionIsStripeGos: webhook.ConstructEvent refuses an event of
// another API version than the library pins, so the simulator's events
// must carry exactly stripe-go's.
func TestAPIVersionIsStripeGos(t *testing.T) {
	if providersim.APIVersion != stripe.APIVersion {
		t.Fatalf("providersim.APIVersion = %q, want stripe.APIVersion %q", providersim.APIVersion, stripe.APIVersion)
	}
}
