// Package domaintest builds domain events and rules for tests of packages
// that apply them and cannot import the service's wiring (the log index
// and the SQL it replaced).
package domaintest

import (
	"math/rand/v2"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// OrderRule is the service's pending-order rule as commands.OrderRule
// builds it from the domain (a commands test checks they are equal): the
// order category, domain.OrderEndTypes and domain.OrderObligations.
func OrderRule() eventstore.PendingRule {
	owed := make([]eventstore.Obligation, len(domain.OrderObligations))
	for i, o := range domain.OrderObligations {
		owed[i] = eventstore.Obligation(o)
	}
	return eventstore.PendingRule{Category: domain.CategoryOrder, Ends: domain.OrderEndTypes, Owed: owed}
}

// RandomOrderEvent returns an event of order stream id at revision rev:
// OrderPlaced (100 EUR) at revision 0, else one of the events the
// pending-order rule looks at (domain.OrderEndTypes, the obligations of
// domain.OrderObligations opened and closed) or ignores, chosen by r, with
// obligation names from "a", "b" and "" (which omits the member), so names
// collide across events.
func RandomOrderEvent(r *rand.Rand, id string, rev int) domain.Event {
	if rev == 0 {
		return domain.OrderPlaced{OrderID: id, Amount: domain.Money{Amount: 100, Currency: "EUR"}, PaymentDeadline: time.Unix(1_800_000_000, 0)}
	}
	name := []string{"a", "b", ""}[r.IntN(3)]
	switch r.IntN(12) {
	case 0:
		return domain.OrderConfirmed{}
	case 1:
		return domain.OrderFailed{}
	case 2:
		return domain.OrderCancelled{}
	case 3:
		return domain.OrderNeedsReview{}
	case 4:
		return domain.OrderCancelRequested{}
	case 5, 6:
		return domain.RefundRequested{ChargeID: name}
	case 7:
		return domain.RefundSucceeded{ChargeID: name}
	case 8:
		return domain.RefundRefused{ChargeID: name}
	case 9:
		return domain.PaymentActionRequired{PaymentID: name}
	case 10:
		return domain.PaymentSucceeded{ChargeID: name}
	default:
		return domain.PaymentFailed{ChargeID: name}
	}
}
