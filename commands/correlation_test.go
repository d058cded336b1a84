package commands

import (
	"context"
	"testing"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// TestCorrelationOfPaymentSteps: the events a background job appends for an
// order (the reconciler driving its payment) carry the correlation id of
// the order stream's first event — the request that placed it — and a
// context's own correlation id (a request's) wins over it.
func TestCorrelationOfPaymentSteps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, placedBy, ctxID, want string }{
		{"a job takes the placing request's id", "req-place", "", "req-place"},
		{"a request's own id wins", "req-place", "req-cancel", "req-cancel"},
		{"no id anywhere stays empty", "", "", ""},
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
			d, err := eventstore.Encode(NewID(), p, eventstore.Metadata{SchemaVersion: domain.SchemaVersion, CorrelationID: c.placedBy})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.store.Append(context.Background(), domain.OrderStream(other), eventstore.NoStream(), d); err != nil {
				t.Fatal(err)
			}
			if err := f.h.ReconcileOrder(WithCorrelationID(context.Background(), c.ctxID), other); err != nil {
				t.Fatalf("ReconcileOrder = %v", err)
			}
			recs, err := f.store.ReadStream(context.Background(), domain.OrderStream(other), 1, 0)
			if err != nil || len(recs) < 3 {
				t.Fatalf("order stream after ReconcileOrder: %d new events, %v; want the attempt, its success and the confirmation", len(recs), err)
			}
			for _, r := range recs {
				m, err := eventstore.DecodeMetadata(r.Metadata)
				if err != nil || m.CorrelationID != c.want {
					t.Errorf("%s@%d correlation_id = %q (%v), want %q", r.Type, r.Revision, m.CorrelationID, err, c.want)
				}
			}
		})
	}
}
