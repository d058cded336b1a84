package providersim

import "strings"

// Payment methods with a fixed meaning, accepted as a PaymentIntent's
// payment_method: Stripe's test PaymentMethods
// (https://docs.stripe.com/testing#cards) and the simulator's own tokens,
// like a card network's test cards. A name that is one of these followed
// by "_" and anything (for example "tok_visa_42") behaves the same, so
// tests can use distinct payment methods. Payment methods are secrets to
// the service: the simulator never stores, echoes or logs them (the
// PaymentIntent shows a new pm_… id instead).
const (
	TokenVisa                   = "tok_visa"                    // succeeds; alias pm_card_visa
	TokenDecline                = "tok_decline"                 // 402 card_declined; alias pm_card_chargeDeclined
	TokenAuthenticationRequired = "tok_authentication_required" // requires_action; alias pm_card_authenticationRequired
	TokenErrorBeforeCommit      = "tok_error_before_commit"     // 500 before executing: nothing created, nothing saved
	TokenErrorAfterCommit       = "tok_error_after_commit"      // succeeds, then 500, saved and replayed for the key
	TokenTimeoutAfterCommit     = "tok_timeout_after_commit"    // succeeds, then the connection is dropped
	TokenSlow                   = "tok_slow"                    // succeeds after Config.SlowDelay

	PaymentMethodVisa                   = "pm_card_visa"
	PaymentMethodChargeDeclined         = "pm_card_chargeDeclined"
	PaymentMethodVisaChargeDeclined     = "pm_card_visa_chargeDeclined"
	PaymentMethodAuthenticationRequired = "pm_card_authenticationRequired"
)

// behaviour is what confirming a payment method does.
type behaviour int

const (
	behaviourUnknown behaviour = iota
	behaviourSucceed
	behaviourDecline
	behaviourAuthenticate
	behaviourErrorBeforeCommit
	behaviourErrorAfterCommit
	behaviourTimeoutAfterCommit
	behaviourSlow
)

var paymentMethods = map[string]behaviour{
	TokenVisa:                           behaviourSucceed,
	PaymentMethodVisa:                   behaviourSucceed,
	TokenDecline:                        behaviourDecline,
	PaymentMethodChargeDeclined:         behaviourDecline,
	PaymentMethodVisaChargeDeclined:     behaviourDecline,
	TokenAuthenticationRequired:         behaviourAuthenticate,
	PaymentMethodAuthenticationRequired: behaviourAuthenticate,
	TokenErrorBeforeCommit:              behaviourErrorBeforeCommit,
	TokenErrorAfterCommit:               behaviourErrorAfterCommit,
	TokenTimeoutAfterCommit:             behaviourTimeoutAfterCommit,
	TokenSlow:                           behaviourSlow,
}

// behaviourOf returns what pm does: an exact name first, else the longest
// name that pm extends with "_…"; behaviourUnknown for anything else.
func behaviourOf(pm string) behaviour {
	if b, ok := paymentMethods[pm]; ok {
		return b
	}
	best, bestLen := behaviourUnknown, 0
	for name, b := range paymentMethods {
		if len(name) > bestLen && strings.HasPrefix(pm, name+"_") {
			best, bestLen = b, len(name)
		}
	}
	return best
}
