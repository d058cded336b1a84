package domain_test

import (
	"slices"
	"testing"

	"github.com/retrysafe/booking/domain"
)

// TestOrderEndTypesAreFinal: the event types that end an order are exactly
// those after which a pending order is Final, so the event stores' pending
// rule (OrderEndTypes) and the aggregate agree; SendEndTypes add only
// OrderCancelRequested, which leaves the order cancelling, not Final.
func TestOrderEndTypesAreFinal(t *testing.T) {
	var ends []string
	for _, e := range domain.EventTypes() {
		o := replay[domain.Order](ordPlaced())
		o.Apply(e)
		if o.Final() {
			ends = append(ends, e.EventType())
		}
		if got, want := domain.EndsOrder(e.EventType()), o.Final(); got != want {
			t.Errorf("EndsOrder(%s) = %v, but a pending order after it is Final() = %v", e.EventType(), got, want)
		}
	}
	if len(ends) != 4 || !slices.Equal(ends, domain.OrderEndTypes) {
		t.Errorf("types that make a pending order Final = %v, want OrderEndTypes %v", ends, domain.OrderEndTypes)
	}
	for _, typ := range domain.SendEndTypes {
		if !domain.EndsOrder(typ) && typ != domain.TypeOrderCancelRequested {
			t.Errorf("SendEndTypes holds %s, neither an end nor OrderCancelRequested", typ)
		}
	}
	if len(domain.SendEndTypes) != len(domain.OrderEndTypes)+1 || !domain.EndsSending(domain.TypeOrderCancelRequested) {
		t.Errorf("SendEndTypes = %v, want OrderEndTypes and OrderCancelRequested", domain.SendEndTypes)
	}
	for _, typ := range []string{domain.TypeOrderPlaced, domain.TypePaymentSucceeded, domain.TypeRefundRequested, ""} {
		if domain.EndsSending(typ) {
			t.Errorf("EndsSending(%q) = true", typ)
		}
	}
}

// TestCategoryOf: every stream name function's name parses back to its
// category and id, the claim category before the reservation category its
// prefix extends; a name of no category is refused.
func TestCategoryOf(t *testing.T) {
	const id = "00000000-0000-7000-8000-000000000001"
	for _, c := range []struct{ name, category string }{
		{domain.ShowStream(id), domain.CategoryShow},
		{domain.ReservationStream(id), domain.CategoryReservation},
		{domain.ClaimStream(id), domain.CategoryClaim},
		{domain.OrderStream(id), domain.CategoryOrder},
		{domain.CategoryIntent + id, domain.CategoryIntent},
	} {
		cat, got, ok := domain.CategoryOf(c.name)
		if !ok || cat != c.category || got != id {
			t.Errorf("CategoryOf(%q) = %q, %q, %v; want %q, %q, true", c.name, cat, got, ok, c.category, id)
		}
	}
	for _, name := range []string{"", "other-" + id, "orders" + id} {
		if cat, got, ok := domain.CategoryOf(name); ok {
			t.Errorf("CategoryOf(%q) = %q, %q, true; want false", name, cat, got)
		}
	}
	if len(domain.Categories) != 5 {
		t.Errorf("Categories = %v, want the 5 categories", domain.Categories)
	}
}
