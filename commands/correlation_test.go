package commands

import (
	"context"
	"testing"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// TestCorrelationOfPaymentSteps: the events a background job appends for an
// order (the reconciler driving its payment) carry the correlation id and
// request ids of the order stream's latest event — the request that placed
// it — and that event as their cause; a request acting on the order (a
// webhook, a repeat) keeps the stream's correlation but is itself the
// cause; a context's own correlation id (a cancel's) wins over the
// stream's.
func TestCorrelationOfPaymentSteps(t *testing.T) {
	t.Parallel()
	const placed = "0197c000-0000-7000-8000-0000000000e1"
	for _, c := range []struct {
		name, placedBy string
		ctx            func() context.Context
		want, cause    string
		request        string
	}{
		{"a job takes the placing request's lineage", "corr-place", context.Background, "corr-place", placed, "srv-place"},
		{"a request keeps the stream's correlation and is the cause", "corr-place",
			func() context.Context { return WithRequestIDs(context.Background(), RequestIDs{Server: "srv-hook"}) },
			"corr-place", "srv-hook", "srv-hook"},
		{"a context's own correlation wins", "corr-place",
			func() context.Context {
				return WithCorrelationID(WithRequestIDs(context.Background(), RequestIDs{Server: "srv-cancel"}), "corr-cancel")
			},
			"corr-cancel", "srv-cancel", "srv-cancel"},
		{"no correlation anywhere: the placing request's id stands in", "", context.Background, "srv-place", placed, "srv-place"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newPayFix(t, payConfig(), "tok_visa", nil)
			// A second order of the fixture's show whose OrderPlaced carries
			// the placing request's correlation id.
			const other = "0197c000-0000-7000-8000-0000000000a2"
			dk := testDataKey(other)
			deadline := payT0.Add(f.cfg.PaymentDeadline)
			if _, err := f.keys.Create(context.Background(), other, "", dk, nil, deadline); err != nil {
				t.Fatal(err)
			}
			p := domain.PlacedFrom(domain.OrderClaimed{ReservationID: payRes, OrderID: other, ShowID: payShow, Actor: payActor,
				Intent: payIntent, Quantity: 2, Amount: payAmount}, deadline, dk.Seal([]byte("tok_visa"), TokenAAD(other)))
			d, err := eventstore.Encode(placed, p, eventstore.Metadata{SchemaVersion: domain.SchemaVersion, CorrelationID: c.placedBy,
				RequestID: "srv-place"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.store.Append(context.Background(), domain.OrderStream(other), eventstore.NoStream(), d); err != nil {
				t.Fatal(err)
			}
			if err := f.h.ReconcileOrder(c.ctx(), other); err != nil {
				t.Fatalf("ReconcileOrder = %v", err)
			}
			recs, err := f.store.ReadStream(context.Background(), domain.OrderStream(other), 1, 0)
			if err != nil || len(recs) < 3 {
				t.Fatalf("order stream after ReconcileOrder: %d new events, %v; want the attempt, its success and the confirmation", len(recs), err)
			}
			for _, r := range recs {
				m, err := eventstore.DecodeMetadata(r.Metadata)
				if err != nil || m.CorrelationID != c.want || m.CausationID != c.cause || m.RequestID != c.request {
					t.Errorf("%s@%d correlation_id, causation_id, request_id = %q, %q, %q (%v), want %q, %q, %q",
						r.Type, r.Revision, m.CorrelationID, m.CausationID, m.RequestID, err, c.want, c.cause, c.request)
				}
			}
		})
	}
}
