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

// orderedSeat is alice's confirmed order of one seat of a new show, with
// the requests and commands that held and ordered it, so that a test can
// repeat them.
type orderedSeat struct {
	show   domain.Show
	req    Request // the hold's
	cmd    ReserveSeatsCommand
	res    domain.Reservation
	oreq   Request // the order's
	ocmd   PlaceOrderCommand
	placed OrderResult
}

// orderASeat has h schedule a show of 4 seats, hold one of them for alice
// (key k) and order it paid with tok_visa (key o, waiting up to 10 s),
// failing t unless the order is confirmed.
func orderASeat(t *testing.T, h *Handler) orderedSeat {
	t.Helper()
	ctx := context.Background()
	s := orderedSeat{show: scheduleShow(t, h, 4, 72*time.Hour)}
	s.req, s.cmd = aliceReserves(s.show.ID, "k", 1)
	var err error
	if s.res, _, err = h.ReserveSeats(ctx, s.req, s.cmd); err != nil {
		t.Fatal(err)
	}
	s.oreq = Request{Actor: "alice", Operation: OpPlaceOrder, Key: "o", Wait: 10 * time.Second}
	s.ocmd = PlaceOrderCommand{ReservationID: s.res.ID, PaymentToken: "tok_visa"}
	s.placed, err = h.PlaceOrder(ctx, s.oreq, s.ocmd)
	if err != nil || s.placed.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder = %+v, %v; want confirmed", s.placed, err)
	}
	return s
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
	seat := orderASeat(t, a)
	oreq, ocmd, placed := seat.oreq, seat.ocmd, seat.placed
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
	if _, err := a.PlaceOrder(ctx, oreq, PlaceOrderCommand{ReservationID: seat.res.ID, PaymentToken: "tok_decline"}); !errors.Is(err, domain.ErrKeyReused) {
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
	req2, cmd2 := aliceReserves(seat.show.ID, "k", 2)
	if _, out, err := a.ReserveSeats(ctx, req2, cmd2); err == nil || out.Replayed {
		t.Fatalf("another body under key k within the retention = %+v, %v; want the key-reused error", out, err)
	}
	clock.Advance(DefaultConfig().IntentRetention + time.Hour)
	again, out, err := b.ReserveSeats(ctx, req2, cmd2)
	if err != nil || out.Replayed || again.ID == seat.res.ID {
		t.Fatalf("key k reused after the retention on B = %s, replayed %t, %v; want a new reservation", again.ID, out.Replayed, err)
	}
	// A kept the first intent of key k; its repeat of B's is a replay of
	// B's reservation, and the first body is now the mismatch.
	if r, out, err := a.ReserveSeats(ctx, req2, cmd2); err != nil || !out.Replayed || r.ID != again.ID {
		t.Fatalf("repeat on A of the reused key = %s, replayed %t, %v; want a replay of %s", r.ID, out.Replayed, err, again.ID)
	}
	if _, out, err := a.ReserveSeats(ctx, seat.req, seat.cmd); err == nil || out.Replayed {
		t.Fatalf("the first body under the reused key on A = %+v, %v; want the key-reused error", out, err)
	}
	if pay.count("create") != 1 {
		t.Errorf("provider: %d charges, want 1", pay.count("create"))
	}
}
