package commands

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands/webhookstore"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/provider"
)

// TestPGWebhookOfRecordedPaymentSendsNothing counts, on PostgreSQL with
// the provider_events table (webhookstore) on the counted pool, the SQL
// statements of a payment_intent.succeeded: none in the process that
// recorded the payment (its mark waits in memory for its batch: one INSERT
// when flushed), one (the look-up by id) for its redelivery to another
// process once the mark is written, and two (the look-up by id, the read
// of the order) for another notice of it there.
func TestPGWebhookOfRecordedPaymentSendsNothing(t *testing.T) {
	ctx := context.Background()
	db := newCountedPG(t)
	counter := db.counter
	process := func(exec string) (*Handler, *webhookstore.Store) {
		marks := webhookstore.New(db.pool)
		return db.handler(t, exec, WithProcessedEvents(marks)), marks
	}
	a, marksA := process("webhook-a")
	b, _ := process("webhook-b")
	pay := bookPaid(t, a)

	// deliver returns the statements that delivering event id of pay to h
	// sent, with their report; the process's clock reading is fresh, as
	// ReceiveWebhook leaves it.
	deliver := func(h *Handler, id string) (int, string) {
		t.Helper()
		if _, err := h.streams.now(ctx); err != nil {
			t.Fatal(err)
		}
		counter.Reset()
		ev := provider.WebhookEvent{ID: id, Type: provider.EventPaymentIntentSucceeded, PaymentID: pay.ID, Metadata: pay.Metadata}
		if err := h.HandleProviderEvent(ctx, ev); err != nil {
			t.Fatalf("HandleProviderEvent(%s) = %v", id, err)
		}
		return counter.Total(), counter.Report(1)
	}
	if n, report := deliver(a, "evt_pg_1"); n != 0 {
		t.Errorf("the process that recorded the payment: %d statements, want 0:\n%s", n, report)
	}
	counter.Reset()
	if err := marksA.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counter.Total(); n != 1 {
		t.Errorf("writing the mark: %d statements, want 1 (the batch's INSERT):\n%s", n, counter.Report(1))
	}
	if n, report := deliver(b, "evt_pg_1"); n != 1 {
		t.Errorf("its redelivery to another process: %d statements, want 1 (the look-up by id):\n%s", n, report)
	}
	if n, report := deliver(b, "evt_pg_2"); n != 2 {
		t.Errorf("another notice to that process: %d statements, want 2 (the look-up by id, the order's read):\n%s", n, report)
	}
}

// bookPaid schedules a show on h, books one seat of it paid with tok_visa,
// and returns the payment as the provider has it.
func bookPaid(t *testing.T, h *Handler) provider.Payment {
	t.Helper()
	ctx := context.Background()
	now, err := h.clock.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	show, _, err := h.ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Webhooks", StartsAt: now.Add(24 * time.Hour), Capacity: 10, Price: domain.Money{Amount: 1000, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := h.ReserveSeats(ctx, Request{Actor: "alice", Operation: OpReserveSeats, Key: "r"}, ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	o, err := h.PlaceOrder(ctx, Request{Actor: "alice", Operation: OpPlaceOrder, Key: "o", Wait: 10 * time.Second},
		PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"})
	if err != nil || o.Order.Status != domain.OrderStatusConfirmed || o.Order.ChargeID == "" {
		t.Fatalf("PlaceOrder = %+v, %v; want a confirmed, paid order", o, err)
	}
	pay, err := h.payments.GetPayment(ctx, o.Order.ChargeID)
	if err != nil {
		t.Fatal(err)
	}
	return pay
}
