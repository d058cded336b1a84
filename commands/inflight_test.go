package commands

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// parkAt is a fault hook that parks the first caller reaching step until
// release is called; parked is closed once one is parked there.
type parkAt struct {
	step    string
	once    sync.Once
	parked  chan struct{}
	release chan struct{}
}

func newParkAt(step string) *parkAt {
	return &parkAt{step: step, parked: make(chan struct{}), release: make(chan struct{})}
}

func (p *parkAt) hook(step string) {
	if step != p.step {
		return
	}
	first := false
	p.once.Do(func() { first = true })
	if first {
		close(p.parked)
		<-p.release
	}
}

// waitParked fails t unless a caller parks within 30 s.
func (p *parkAt) waitParked(t *testing.T) {
	t.Helper()
	select {
	case <-p.parked:
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing parked at %s within 30 s", p.step)
	}
}

// TestDeferredIntentLostToAnotherProcessIsARepeat: a reservation and an
// order request, each parked on process A right before the unit that would
// record its intent (reservation.holding, order.claiming), while the same
// request reaches process B and completes there. Released, A's unit loses
// on the intent stream, writes nothing, and A answers as a repeat of B's
// request: the same reservation and order, replayed; one IntentRecorded per
// intent, one hold, one charge; the key row A made for an order that never
// exists is deleted.
//
// It runs on an atomic store and on one that appends a unit part by part
// and stops at the first part that fails, as KurrentDB does (partwise).
func TestDeferredIntentLostToAnotherProcessIsARepeat(t *testing.T) {
	t.Parallel()
	for _, partwise := range []bool{false, true} {
		t.Run(map[bool]string{false: "atomic", true: "part by part"}[partwise], func(t *testing.T) {
			t.Parallel()
			p := newProcesses()
			var store EventStore
			if partwise {
				store = partwiseStore{p.mem}
			}
			deferredIntentLost(t, p, p.handler(execA, store, nil), p.handler(execB, store, nil))
		})
	}
}

// partwiseStore appends a unit's parts one by one and stops at the first
// that fails, the parts before it written: AppendMulti as KurrentDB's
// store does it.
type partwiseStore struct{ *memStore }

func (s partwiseStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	res := make([]eventstore.AppendResult, len(appends))
	for i, a := range appends {
		r, err := s.Append(ctx, a.Stream, a.Expected, a.Events...)
		if err != nil {
			return nil, &eventstore.AppendPartError{Part: i, Parts: len(appends), Stream: a.Stream, Err: err}
		}
		res[i] = r
	}
	return res, nil
}

func deferredIntentLost(t *testing.T, p *processes, a, b *Handler) {
	ctx := context.Background()
	show := scheduleShow(t, b, 3, 48*time.Hour)

	hold := newParkAt("reservation.holding")
	a.hooks = Hooks{Step: hold.hook}
	req, cmd := aliceReserves(show.ID, "r", 1)
	type reserved struct {
		r   domain.Reservation
		out Outcome
		err error
	}
	onA := make(chan reserved, 1)
	go func() {
		r, out, err := a.ReserveSeats(ctx, req, cmd)
		onA <- reserved{r, out, err}
	}()
	hold.waitParked(t)
	first, out, err := b.ReserveSeats(ctx, req, cmd)
	if err != nil || out.Replayed {
		t.Fatalf("ReserveSeats on B = %+v, %v; want a new reservation", out, err)
	}
	close(hold.release)
	got := <-onA
	if got.err != nil || !got.out.Replayed || got.r.ID != first.ID || got.r.Status != domain.ReservationStatusHeld {
		t.Fatalf("ReserveSeats on A = %s (%s), replayed %t, %v; want a replay of held reservation %s", got.r.ID, got.r.Status, got.out.Replayed, got.err, first.ID)
	}
	showEvents, err := p.mem.ReadStream(ctx, domain.ShowStream(show.ID), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := countTypes(showEvents, "SeatsHeld"); n != 1 {
		t.Errorf("show stream: %d SeatsHeld, want 1", n)
	}

	claim := newParkAt("order.claiming")
	a.hooks = Hooks{Step: claim.hook}
	oreq := Request{Actor: "alice", Operation: OpPlaceOrder, Key: "o", Wait: 10 * time.Second}
	ocmd := PlaceOrderCommand{ReservationID: first.ID, PaymentToken: "tok_visa"}
	type ordered struct {
		o   OrderResult
		err error
	}
	orderOnA := make(chan ordered, 1)
	go func() {
		o, err := a.PlaceOrder(ctx, oreq, ocmd)
		orderOnA <- ordered{o, err}
	}()
	claim.waitParked(t)
	placed, err := b.PlaceOrder(ctx, oreq, ocmd)
	if err != nil || placed.Replayed || placed.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder on B = %+v, %v; want a new confirmed order", placed, err)
	}
	close(claim.release)
	og := <-orderOnA
	if og.err != nil || !og.o.Replayed || og.o.Order.ID != placed.Order.ID || og.o.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder on A = %+v, %v; want a replay of confirmed order %s", og.o, og.err, placed.Order.ID)
	}
	for _, r := range []Request{req, oreq} {
		recs, err := p.mem.ReadStream(ctx, IntentStream(r.Actor, r.Operation, r.Key), 0, 0)
		if err != nil || len(recs) != 1 || recs[0].Type != "IntentRecorded" {
			t.Errorf("intent %s: %d events, %v; want IntentRecorded only", r.Operation, len(recs), err)
		}
	}
	if net, n := p.pay.net(); net != payPrice.Amount || n != 1 {
		t.Errorf("provider: net %d over %d charges, want %d over 1", net, n, payPrice.Amount)
	}
	for deadline := time.Now().Add(30 * time.Second); p.keys.len() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d key rows 30 s after the order ended and A's unit lost, want 0", p.keys.len())
		}
		time.Sleep(20 * time.Millisecond) // polling for a state, with a deadline
	}
}

// TestInFlightRepeatWaitsInTheProcess: while an order request is parked
// before the unit that records its intent (order.claiming), a repeat on
// the same process waits InUseWait and answers *InUseError (409) with a
// Retry-After inside the lease, and so does another body (nothing is
// recorded for a 422 to compare with); a repeat that starts waiting (parked
// at intent.waiting, then let go) answers the order, replayed, once the
// first request is released, and another body then the key-reused error.
// Nothing is recorded while the first request is parked.
func TestInFlightRepeatWaitsInTheProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProcesses()
	h := p.handler(execA, nil, func(c *Config) { c.InUseWait = 200 * time.Millisecond })
	show := scheduleShow(t, h, 3, 48*time.Hour)
	req, cmd := aliceReserves(show.ID, "r", 1)
	res, _, err := h.ReserveSeats(ctx, req, cmd)
	if err != nil {
		t.Fatal(err)
	}
	claim := newParkAt("order.claiming")
	var waiting atomic.Pointer[parkAt] // armed for the last repeat only
	h.hooks = Hooks{Step: func(step string) {
		claim.hook(step)
		if w := waiting.Load(); w != nil {
			w.hook(step)
		}
	}}
	oreq := Request{Actor: "alice", Operation: OpPlaceOrder, Key: "o", Wait: 10 * time.Second}
	ocmd := PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"}
	first := make(chan OrderResult, 1)
	go func() {
		o, err := h.PlaceOrder(ctx, oreq, ocmd)
		if err != nil {
			t.Errorf("first PlaceOrder = %v", err)
		}
		first <- o
	}()
	claim.waitParked(t)

	start := time.Now()
	_, err = h.PlaceOrder(ctx, oreq, ocmd)
	var inUse *InUseError
	if !errors.As(err, &inUse) || inUse.RetryAfter < time.Second {
		t.Fatalf("repeat while parked = %v, want *InUseError with Retry-After of at least 1 s", err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("repeat answered 409 after %v, want after the 200 ms wait", took)
	}
	other := ocmd
	other.PaymentToken = "tok_decline"
	if _, err := h.PlaceOrder(ctx, oreq, other); !errors.As(err, &inUse) {
		t.Errorf("another body while parked = %v, want *InUseError: no body is recorded yet", err)
	}
	recs, err := p.mem.ReadStream(ctx, IntentStream(oreq.Actor, oreq.Operation, oreq.Key), 0, 0)
	if len(recs) != 0 {
		t.Fatalf("intent stream while parked: %d events (%v), want none", len(recs), err)
	}

	// A repeat parked at intent.waiting, its flight found, is let go once
	// the first request was answered: its wait ends at once, and it reads.
	w := newParkAt("intent.waiting")
	waiting.Store(w)
	repeat := make(chan OrderResult, 1)
	go func() {
		o, err := h.PlaceOrder(ctx, oreq, ocmd)
		if err != nil {
			t.Errorf("waiting repeat = %v", err)
		}
		repeat <- o
	}()
	w.waitParked(t)
	close(claim.release)
	f := <-first
	close(w.release)
	r := <-repeat
	if f.Replayed || f.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("first = %+v, want a new confirmed order", f)
	}
	if !r.Replayed || r.Order.ID != f.Order.ID {
		t.Fatalf("waiting repeat = %+v, want order %s replayed", r, f.Order.ID)
	}
	if _, err := h.PlaceOrder(ctx, oreq, other); !errors.Is(err, domain.ErrKeyReused) {
		t.Errorf("another body once the intent is recorded = %v, want the key-reused error", err)
	}
	if net, n := p.pay.net(); net != payPrice.Amount || n != 1 {
		t.Errorf("provider: net %d over %d charges, want %d over 1", net, n, payPrice.Amount)
	}
}

// TestInFlightOtherBodyNeverDecidesARepeat: an order is placed on process
// B under key o; on process A, which has not seen the key, a request with
// another body under o (another reservation) parks before its unit
// (order.claiming). A repeat of
// B's request on A waits for that flight, then answers from the recorded
// intent: B's order, replayed — never 422 for a body that nothing
// recorded. Released, A's flight loses on the intent stream and answers
// the key-reused error. One order, one charge, one IntentRecorded.
func TestInFlightOtherBodyNeverDecidesARepeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProcesses()
	a := p.handler(execA, nil, func(c *Config) { c.InUseWait = 200 * time.Millisecond })
	b := p.handler(execB, nil, nil)
	show := scheduleShow(t, b, 3, 48*time.Hour)
	req, cmd := aliceReserves(show.ID, "r", 1)
	res, _, err := b.ReserveSeats(ctx, req, cmd)
	if err != nil {
		t.Fatal(err)
	}
	oreq := Request{Actor: "alice", Operation: OpPlaceOrder, Key: "o", Wait: 10 * time.Second}
	ocmd := PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"}
	placed, err := b.PlaceOrder(ctx, oreq, ocmd)
	if err != nil || placed.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder on B = %+v, %v; want a confirmed order", placed, err)
	}

	req2, cmd2 := aliceReserves(show.ID, "r2", 1)
	res2, _, err := b.ReserveSeats(ctx, req2, cmd2)
	if err != nil {
		t.Fatal(err)
	}
	claim := newParkAt("order.claiming")
	a.hooks = Hooks{Step: claim.hook}
	other := PlaceOrderCommand{ReservationID: res2.ID, PaymentToken: "tok_visa"}
	otherErr := make(chan error, 1)
	go func() {
		_, err := a.PlaceOrder(ctx, oreq, other)
		otherErr <- err
	}()
	claim.waitParked(t)
	r, err := a.PlaceOrder(ctx, oreq, ocmd)
	if err != nil || !r.Replayed || r.Order.ID != placed.Order.ID {
		t.Errorf("repeat on A beside another body's flight = %+v, %v; want order %s replayed", r, err, placed.Order.ID)
	}
	close(claim.release)
	if err := <-otherErr; !errors.Is(err, domain.ErrKeyReused) {
		t.Errorf("the other body on A = %v, want the key-reused error", err)
	}
	recs, err := p.mem.ReadStream(ctx, IntentStream(oreq.Actor, oreq.Operation, oreq.Key), 0, 0)
	if n := countTypes(recs, domain.TypeIntentRecorded); err != nil || n != 1 {
		t.Errorf("intent stream: %d IntentRecorded (%v), want 1", n, err)
	}
	if net, n := p.pay.net(); net != payPrice.Amount || n != 1 {
		t.Errorf("provider: net %d over %d charges, want %d over 1", net, n, payPrice.Amount)
	}
}

// countTypes counts the records of event type typ.
func countTypes(recs []eventstore.RecordedEvent, typ string) int {
	n := 0
	for _, r := range recs {
		if r.Type == typ {
			n++
		}
	}
	return n
}
