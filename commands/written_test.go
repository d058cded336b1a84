package commands

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// appendCounter is a memstore that counts Append calls.
type appendCounter struct {
	*memStore
	appends atomic.Int64
}

func (c *appendCounter) Append(ctx context.Context, stream string, exp eventstore.ExpectedRevision, evs ...eventstore.EventData) (eventstore.AppendResult, error) {
	c.appends.Add(1)
	return c.memStore.Append(ctx, stream, exp, evs...)
}

func (c *appendCounter) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	c.appends.Add(1)
	return c.memStore.AppendMulti(ctx, appends...)
}

// TestFollowUpsTheRequestWroteAreNotAppendedAgain: the process manager
// recognises the follow-ups of SeatsHeld and OrderClaimed that the request
// of the same process appended, and sends no append for them; a process
// that did not write them (another replica) repeats them idempotently, and
// either way the log does not change.
func TestFollowUpsTheRequestWroteAreNotAppendedAgain(t *testing.T) {
	ctx := context.Background()
	store := &appendCounter{memStore: newMemStore()}
	clock := newFakeClock(payT0)
	store.SetClock(clock)
	keys := newMemKeys()
	newHandler := func(executor string) *Handler {
		cfg := DefaultConfig()
		cfg.Executor = executor
		return New(cfg, store, clock, newFakePayments(), newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithKeys(keys))
	}
	h := newHandler("exec-a")
	show, _, err := h.ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Show", StartsAt: payT0.Add(48 * time.Hour), Capacity: 10, Price: payPrice})
	if err != nil {
		t.Fatalf("ScheduleShow = %v", err)
	}
	res, _, err := h.ReserveSeats(ctx, Request{Actor: "alice", Operation: OpReserveSeats, Key: "res"}, ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
	if err != nil {
		t.Fatalf("ReserveSeats = %v", err)
	}
	out, err := h.PlaceOrder(ctx, Request{Actor: "alice", Operation: OpPlaceOrder, Key: "order", Wait: 10 * time.Second},
		PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"})
	if err != nil || out.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder = %+v, %v; want a confirmed order", out.Order, err)
	}
	all, err := store.ReadAll(ctx, eventstore.Position{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var records []eventstore.RecordedEvent
	for _, r := range all {
		if r.Type == "SeatsHeld" || r.Type == "OrderClaimed" {
			records = append(records, r)
		}
	}
	if len(records) != 2 {
		t.Fatalf("the log holds %d SeatsHeld and OrderClaimed events, want 2", len(records))
	}
	followUps := func(h *Handler) int64 {
		t.Helper()
		before := store.appends.Load()
		var wg sync.WaitGroup
		for _, r := range records {
			if err := h.followUp(ctx, r, laterOf{}, &wg); err != nil {
				t.Fatalf("followUp(%s) = %v", r.Type, err)
			}
		}
		wg.Wait()
		if after, err := store.ReadAll(ctx, eventstore.Position{}, 1000); err != nil || len(after) != len(all) {
			t.Fatalf("the log holds %d events after the follow-ups (%v), want %d: nothing new", len(after), err, len(all))
		}
		return store.appends.Load() - before
	}
	if n := followUps(h); n != 0 {
		t.Errorf("the process manager of the process that wrote the follow-ups sent %d appends, want 0", n)
	}
	other := newHandler("exec-b")
	if n := followUps(other); n == 0 {
		t.Errorf("another process's process manager sent no append, want its idempotent repeats (the check above must be able to fail)")
	}
	// Recovery knows the intents this process took past their commit point.
	fresh := newHandler("exec-c")
	for _, in := range []struct{ actor, op, key string }{{"admin", OpScheduleShow, "show"}, {"alice", OpReserveSeats, "res"}, {"alice", OpPlaceOrder, "order"}} {
		stream := IntentStream(in.actor, in.op, in.key)
		recorded, err := store.ReadStream(ctx, stream, 0, 1)
		if err != nil || len(recorded) != 1 {
			t.Fatalf("ReadStream(%s) = %d events, %v; want its IntentRecorded", stream, len(recorded), err)
		}
		if !h.finishedHere(stream, in.op, recorded[0].Position) {
			t.Errorf("finishedHere(%s) = false in the process that finished it, want true", in.op)
		}
		if fresh.finishedHere(stream, in.op, recorded[0].Position) {
			t.Errorf("finishedHere(%s) = true in another process, want false (it must read the intent)", in.op)
		}
		// A later intent on the same stream (the key reused once the
		// retention passed) is recorded after everything above: what this
		// process wrote for the earlier one does not finish it.
		if h.finishedHere(stream, in.op, all[len(all)-1].Position) {
			t.Errorf("finishedHere(%s) after a later intent record = true, want false (the ids derive from the stream name)", in.op)
		}
	}
}

// TestWrittenSetIsBounded: the set keeps the last writtenCap ids, evicting
// the oldest first.
func TestWrittenSetIsBounded(t *testing.T) {
	var w writtenSet
	id := func(i int) string { return DerivedID("written", fmt.Sprint(i)) }
	for i := range writtenCap + 10 {
		w.add([]eventstore.EventData{{ID: id(i)}}, eventstore.Position{})
	}
	w.add([]eventstore.EventData{{ID: id(writtenCap + 5)}}, eventstore.Position{}) // a repeat takes no room
	if len(w.ids.m) != writtenCap {
		t.Errorf("the set holds %d ids, want the bound %d", len(w.ids.m), writtenCap)
	}
	if w.has(id(9)) || !w.has(id(10), id(writtenCap+9)) {
		t.Errorf("has: the 10 oldest ids must be evicted and every later one kept")
	}
}
