package commands

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// readCountingStore counts ReadStream's calls and the events it returns,
// per stream.
type readCountingStore struct {
	EventStore
	mu    sync.Mutex
	read  map[string]int
	calls map[string]int
}

func (s *readCountingStore) ReadStream(ctx context.Context, name string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error) {
	recs, err := s.EventStore.ReadStream(ctx, name, from, limit)
	s.mu.Lock()
	s.read[name] += len(recs)
	s.calls[name]++
	s.mu.Unlock()
	return recs, err
}

func (s *readCountingStore) reset() (read, calls map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	read, calls = s.read, s.calls
	s.read, s.calls = map[string]int{}, map[string]int{}
	return read, calls
}

// TestKeptStreamsReadTailsAndSeeOtherProcesses: a process that loaded an
// order and its intent before reads only their tails on a replay (no event
// read again), yet sees what another process appended meanwhile — a cancel
// on B reaches A's next replay — and a kept intent is not used once it is
// old, so a key reused after the retention starts a new intent.
func TestKeptStreamsReadTailsAndSeeOtherProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProcesses()
	clock, pay := p.clock, p.pay
	store := &readCountingStore{EventStore: p.mem}
	store.reset()
	a, b := p.handler(execA, store, nil), p.handler(execB, store, nil)
	show := scheduleShow(t, a, 4, 72*time.Hour)
	req, cmd := aliceReserves(show.ID, "k", 1)
	res, _, err := a.ReserveSeats(ctx, req, cmd)
	if err != nil {
		t.Fatal(err)
	}
	oreq := Request{Actor: "alice", Operation: OpPlaceOrder, Key: "o", Wait: 10 * time.Second}
	ocmd := PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"}
	placed, err := a.PlaceOrder(ctx, oreq, ocmd)
	if err != nil || placed.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder = %+v, %v; want confirmed", placed, err)
	}
	intent, order := IntentStream("alice", OpPlaceOrder, "o"), domain.OrderStream(placed.Order.ID)

	// The first replay loads both streams; the second reads only the
	// order's tail: the kept intent has all a replay needs of it.
	for i := range 2 {
		store.reset()
		r, err := a.PlaceOrder(ctx, oreq, ocmd)
		if err != nil || !r.Replayed || r.Order.ID != placed.Order.ID || r.Order.Status != domain.OrderStatusConfirmed {
			t.Fatalf("replay %d = %+v, %v; want a replay of confirmed order %s", i+1, r, err, placed.Order.ID)
		}
		read, calls := store.reset()
		if i == 1 && (read[intent] != 0 || read[order] != 0 || calls[intent] != 0 || calls[order] != 1) {
			t.Errorf("second replay: %d and %d reads of the intent and the order, returning %d and %d events; "+
				"want the order's tail alone (0 and 1 reads, no event)", calls[intent], calls[order], read[intent], read[order])
		}
	}

	// A different body under the kept key is still the key-reused error.
	if _, err := a.PlaceOrder(ctx, oreq, PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_decline"}); !errors.Is(err, domain.ErrKeyReused) {
		t.Fatalf("another body under the kept order key = %v, want the key-reused error (422)", err)
	}

	// Another process cancels: A's next replay and read see it.
	if c, err := b.CancelOrder(ctx, Request{Actor: "alice", Operation: OpCancelOrder, Key: "c"}, placed.Order.ID); err != nil || c.Order.Status != domain.OrderStatusCancelled {
		t.Fatalf("cancel on B = %+v, %v; want cancelled", c, err)
	}
	r, err := a.PlaceOrder(ctx, oreq, ocmd)
	if err != nil || !r.Replayed || r.Order.Status != domain.OrderStatusCancelled {
		t.Fatalf("replay on A after B's cancel = %+v, %v; want the cancelled order", r, err)
	}
	if o, err := a.GetOrder(ctx, "alice", placed.Order.ID); err != nil || o.Status != domain.OrderStatusCancelled {
		t.Fatalf("GetOrder on A after B's cancel = %s, %v; want cancelled", o.Status, err)
	}

	// A key reused after the retention is a new intent on A too, though A
	// kept the old one.
	req2, cmd2 := aliceReserves(show.ID, "k", 2)
	if _, out, err := a.ReserveSeats(ctx, req2, cmd2); err == nil || out.Replayed {
		t.Fatalf("another body under key k within the retention = %+v, %v; want the key-reused error", out, err)
	}
	clock.Advance(DefaultConfig().IntentRetention + time.Hour)
	again, out, err := b.ReserveSeats(ctx, req2, cmd2)
	if err != nil || out.Replayed || again.ID == res.ID {
		t.Fatalf("key k reused after the retention on B = %s, replayed %t, %v; want a new reservation", again.ID, out.Replayed, err)
	}
	// A kept the first intent of key k; its repeat of B's is a replay of
	// B's reservation, and the first body is now the mismatch.
	if r, out, err := a.ReserveSeats(ctx, req2, cmd2); err != nil || !out.Replayed || r.ID != again.ID {
		t.Fatalf("repeat on A of the reused key = %s, replayed %t, %v; want a replay of %s", r.ID, out.Replayed, err, again.ID)
	}
	if _, out, err := a.ReserveSeats(ctx, req, cmd); err == nil || out.Replayed {
		t.Fatalf("the first body under the reused key on A = %+v, %v; want the key-reused error", out, err)
	}
	if pay.count("create") != 1 {
		t.Errorf("provider: %d charges, want 1", pay.count("create"))
	}
}
