package pgstore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// TestPendingOrders pages through the order streams the reconciler must
// visit: orders without an ending event, refunds still due and payments
// waiting for the customer's action to cancel.
func TestPendingOrders(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := New(pool, WithAppendTimeout(time.Minute)) // not 5 s: the machine may be fully busy
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
		// A payment that required the customer's action is cancelled once
		// its order failed, until its final state is recorded.
		"00000000-0000-7000-8000-00000000000a": {placed("a"), domain.PaymentActionRequired{PaymentID: "pi1"}, domain.OrderFailed{}},
		"00000000-0000-7000-8000-00000000000b": {placed("b"), domain.PaymentActionRequired{PaymentID: "pi1"}, domain.OrderFailed{},
			domain.PaymentFailed{ChargeID: "pi1"}},
		"00000000-0000-7000-8000-00000000000c": {placed("c"), domain.PaymentActionRequired{PaymentID: "pi1"}, domain.PaymentSucceeded{ChargeID: "pi1"},
			domain.OrderConfirmed{}, domain.PaymentFailed{}},
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
	var got []string
	after := ""
	for {
		page, err := store.PendingStreams(ctx, orderRule(), after, 2)
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
		"00000000-0000-7000-8000-000000000008", "00000000-0000-7000-8000-00000000000a"}
	if diff := cmp.Diff(want, got); diff != "" || !slices.IsSorted(got) {
		t.Errorf("PendingOrders pages (-want +got):\n%s", diff)
	}
}

// TestPurgeStreams truncates exactly the streams of the prefix whose first
// live event is older than the age by the database clock, keeps their last
// revision, and counts the events left.
func TestPurgeStreams(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := New(pool, WithAppendTimeout(time.Minute))
	ctx := context.Background()
	add := func(stream string, n int) {
		t.Helper()
		data := make([]eventstore.EventData, n)
		for i := range data {
			d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), domain.OrderConfirmed{}, eventstore.Metadata{})
			if err != nil {
				t.Fatal(err)
			}
			data[i] = d
		}
		if _, err := store.Append(ctx, stream, eventstore.Any(), data...); err != nil {
			t.Fatal(err)
		}
	}
	add("intent-old1", 2)
	add("intent-old2", 1)
	add("intent-new", 1)
	add("order-old", 1)
	add("intentXold", 1) // '_' or '%' in a prefix would match it; "intent-" does not
	if _, err := pool.Exec(ctx, `UPDATE events SET recorded_at = now() - interval '2 hours' WHERE stream <> 'intent-new'`); err != nil {
		t.Fatal(err)
	}
	if n, err := store.EventCount(ctx); err != nil || n != 6 {
		t.Fatalf("EventCount() = %d, %v; want 6", n, err)
	}
	if n, err := store.PurgeStreams(ctx, "intent-", time.Hour, 1); err != nil || n != 1 {
		t.Fatalf("PurgeStreams(limit 1) = %d, %v; want 1", n, err)
	}
	if n, err := store.PurgeStreams(ctx, "intent-", time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("PurgeStreams(limit 10) = %d, %v; want the other old intent", n, err)
	}
	if n, err := store.PurgeStreams(ctx, "intent-", time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("PurgeStreams again = %d, %v; want 0", n, err)
	}
	if n, err := store.PurgeStreams(ctx, "intent_", time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("PurgeStreams(intent_) = %d, %v; want 0 (the prefix is literal)", n, err)
	}
	if n, err := store.EventCount(ctx); err != nil || n != 3 {
		t.Errorf("EventCount() after the purge = %d, %v; want 3", n, err)
	}
	for stream, want := range map[string]int{"intent-old1": 0, "intent-old2": 0, "intent-new": 1, "order-old": 1, "intentXold": 1} {
		evs, err := store.ReadStream(ctx, stream, 0, 10)
		if want == 0 && errors.Is(err, eventstore.ErrStreamNotFound) {
			continue // a wholly truncated stream reads as absent
		}
		if err != nil || len(evs) != want {
			t.Errorf("ReadStream(%s) = %d events, %v; want %d", stream, len(evs), err, want)
		}
	}
	// The purged stream keeps its last revision: a new intent must expect it.
	d, _ := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), domain.OrderConfirmed{}, eventstore.Metadata{})
	if _, err := store.Append(ctx, "intent-old1", eventstore.NoStream(), d); err == nil {
		t.Errorf("Append(intent-old1, NoStream) after the purge succeeded, want a conflict at revision 1")
	}
	if _, err := store.Append(ctx, "intent-old1", eventstore.Exact(1), d); err != nil {
		t.Errorf("Append(intent-old1, Exact(1)) after the purge = %v", err)
	}
}

// orderRule is the service's order rule (commands.OrderRule), built here
// from the domain as the wiring builds it.
func orderRule() eventstore.PendingRule {
	owed := make([]eventstore.Obligation, len(domain.OrderObligations))
	for i, o := range domain.OrderObligations {
		owed[i] = eventstore.Obligation(o)
	}
	return eventstore.PendingRule{Category: domain.CategoryOrder, Ends: domain.OrderEndTypes, Owed: owed}
}
