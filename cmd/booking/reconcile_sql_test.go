package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

func TestPendingOrdersSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := pgstore.New(pool, pgstore.WithAppendTimeout(time.Minute)) // not 5 s: the machine may be fully busy
	ctx := context.Background()
	money := domain.Money{Amount: 100, Currency: "EUR"}
	placed := func(id string) domain.Event {
		return domain.OrderPlaced{OrderID: id, Amount: money, PaymentDeadline: time.Now().Add(time.Hour)}
	}
	orders := map[string][]domain.Event{
		"00000000-0000-7000-8000-000000000001": {placed("1")},                                                               // pending
		"00000000-0000-7000-8000-000000000002": {placed("2"), domain.OrderConfirmed{}},                                      // done
		"00000000-0000-7000-8000-000000000003": {placed("3"), domain.OrderCancelRequested{}},                                // cancelling
		"00000000-0000-7000-8000-000000000004": {placed("4"), domain.OrderFailed{}, domain.RefundRequested{ChargeID: "ch"}}, // refund due
		"00000000-0000-7000-8000-000000000005": {placed("5"), domain.OrderFailed{}, domain.RefundRequested{ChargeID: "ch"}, domain.RefundSucceeded{ChargeID: "ch"}},
		"00000000-0000-7000-8000-000000000006": {placed("6"), domain.OrderNeedsReview{}}, // parked
		// A refund the provider refused is parked with its order in review.
		"00000000-0000-7000-8000-000000000007": {placed("7"), domain.OrderCancelled{}, domain.RefundRequested{ChargeID: "ch"},
			domain.RefundRefused{ChargeID: "ch"}, domain.OrderNeedsReview{}},
		// A refund refused and then made anyway does not hide another one still due.
		"00000000-0000-7000-8000-000000000008": {placed("8"), domain.OrderCancelled{}, domain.RefundRequested{ChargeID: "ch1"},
			domain.RefundRefused{ChargeID: "ch1"}, domain.OrderNeedsReview{}, domain.RefundSucceeded{ChargeID: "ch1"},
			domain.RefundRequested{ChargeID: "ch2"}},
	}
	for id, evs := range orders {
		data := make([]eventstore.EventData, len(evs))
		for i, e := range evs {
			d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), e, eventstore.Metadata{})
			if err != nil {
				t.Fatal(err)
			}
			data[i] = d
		}
		if _, err := store.Append(ctx, domain.OrderStream(id), eventstore.NoStream(), data...); err != nil {
			t.Fatal(err)
		}
	}
	// Streams that are not orders never show up.
	d, _ := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), domain.OrderClaimed{}, eventstore.Metadata{})
	if _, err := store.Append(ctx, domain.ClaimStream("00000000-0000-7000-8000-000000000009"), eventstore.NoStream(), d); err != nil {
		t.Fatal(err)
	}
	p := pgPendingOrders{pool}
	var got []string
	after := ""
	for {
		page, err := p.PendingOrders(ctx, after, 2)
		if err != nil {
			t.Fatalf("PendingOrders: %v", err)
		}
		got = append(got, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	want := []string{"00000000-0000-7000-8000-000000000001", "00000000-0000-7000-8000-000000000003", "00000000-0000-7000-8000-000000000004",
		"00000000-0000-7000-8000-000000000008"}
	if diff := cmp.Diff(want, got); diff != "" || !slices.IsSorted(got) {
		t.Errorf("PendingOrders pages (-want +got):\n%s", diff)
	}
}
