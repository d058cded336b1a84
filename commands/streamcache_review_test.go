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

// TestKeptIntentTailOfANewIntentIsReadWhole: a process that keeps an intent
// must not fold a new intent of the same key (its stream truncated and
// recorded again, continuing the revisions) onto the kept one. Here the key
// was reused by a replica with a shorter BOOKING_INTENT_RETENTION (a rolling
// change of it), while A still counts the old intent young: A's repeat of
// the new body must replay the new reservation, as a whole read answers,
// not the old intent's rejection.
func TestKeptIntentTailOfANewIntentIsReadWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProcesses()
	clock := p.clock
	handler := func(exec string, retention time.Duration) *Handler {
		return p.handler(exec, nil, func(cfg *Config) { cfg.IntentRetention = retention })
	}
	a, b := handler(execA, 24*time.Hour), handler(execB, 2*time.Hour)
	show := scheduleShow(t, a, 4, 72*time.Hour)
	req, tooMany := aliceReserves(show.ID, "k", 10)
	for i := range 2 { // the repeat reads the intent, and A keeps it
		var rej *Rejection
		if _, _, err := a.ReserveSeats(ctx, req, tooMany); !errors.As(err, &rej) {
			t.Fatalf("reserve 10 of 4 seats (%d) = %v, want a rejection", i+1, err)
		}
	}
	clock.Advance(3 * time.Hour)
	_, one := aliceReserves(show.ID, "k", 1)
	res, out, err := b.ReserveSeats(ctx, req, one)
	if err != nil || out.Replayed {
		t.Fatalf("key k reused on B past its retention = %+v, %+v, %v; want a new reservation", res, out, err)
	}
	r, out, err := a.ReserveSeats(ctx, req, one)
	if err != nil || !out.Replayed || r.ID != res.ID {
		t.Fatalf("repeat on A of B's request = %s, replayed %t, %v; want a replay of %s", r.ID, out.Replayed, err, res.ID)
	}
}

// slowTailStore delays every read of a stream's tail (from > 0), so that
// concurrent loads of one kept stream overlap while one of them reads it.
type slowTailStore struct{ EventStore }

func (s slowTailStore) ReadStream(ctx context.Context, name string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error) {
	if from > 0 {
		time.Sleep(time.Millisecond)
	}
	return s.EventStore.ReadStream(ctx, name, from, limit)
}

// TestKeptStreamsUnderConcurrentReplays runs many replays of one kept order
// on A, GetOrders on A, and a cancel on B at once (run with -race): the
// kept streams are shared and must never be written through a caller's copy.
func TestKeptStreamsUnderConcurrentReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProcesses()
	pay := p.pay
	a, b := p.handler(execA, slowTailStore{p.mem}, nil), p.handler(execB, slowTailStore{p.mem}, nil)
	seat := orderASeat(t, a)
	oreq, ocmd, placed := seat.oreq, seat.ocmd, seat.placed
	if _, err := a.PlaceOrder(ctx, oreq, ocmd); err != nil { // A keeps both streams
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 16 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 10 {
				r, err := a.PlaceOrder(ctx, oreq, ocmd)
				if err != nil || !r.Replayed || r.Order.ID != placed.Order.ID {
					errs <- errors.Join(err, errors.New("replay: not a replay of the order"))
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 10 {
				if _, err := a.GetOrder(ctx, "alice", placed.Order.ID); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := b.CancelOrder(ctx, Request{Actor: "alice", Operation: OpCancelOrder, Key: "c"}, placed.Order.ID); err != nil {
			errs <- err
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r, err := a.PlaceOrder(ctx, oreq, ocmd)
	if err != nil || r.Order.Status != domain.OrderStatusCancelled {
		t.Fatalf("replay after the cancel = %+v, %v; want cancelled", r.Order.Status, err)
	}
	if pay.count("create") != 1 || pay.count("refund") != 1 {
		t.Errorf("provider: %d charges, %d refunds; want 1 and 1", pay.count("create"), pay.count("refund"))
	}
}
