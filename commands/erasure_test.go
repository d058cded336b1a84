package commands

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// erasureMetrics records Metrics.Erasure by result.
type erasureMetrics struct {
	nopMetrics
	mu  sync.Mutex
	got map[string]int
}

func (m *erasureMetrics) Erasure(result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got[result]++
}

func (m *erasureMetrics) count(result string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.got[result]
}

// confirmedWithErasureMetrics returns a Handler of executor "exec" on w
// (its keys, no logger) whose Metrics.Erasure calls mx records, and the id
// of alice's confirmed order booked through it (confirmedOrder).
func confirmedWithErasureMetrics(t *testing.T, w *lineageWorld) (h *Handler, mx *erasureMetrics, id string) {
	t.Helper()
	mx = &erasureMetrics{got: map[string]int{}}
	cfg := DefaultConfig()
	cfg.Executor = "exec"
	h = New(cfg, w.store, w.clock, w.pay, newTestRegistry(), nil, WithKeys(w.keys), WithMetrics(mx))
	return h, mx, confirmedOrder(t, h)
}

// TestErasure_RecordedOnceAfterTheKeyIsGone: a confirmed order's key is
// deleted off the request (batched), which leaves its erasure to record
// and appends nothing yet; the reconciler's pass appends one
// PaymentSecretsShredded, whose shredded_at is the deletion's, and drops
// the erasure. A crash after the append and before the drop (the erasure
// left in place) makes the next pass find the event and append nothing; a
// key held for an order that never existed is dropped without a stream.
// The order replays to the same state with the event.
func TestErasure_RecordedOnceAfterTheKeyIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newLineageWorld()
	h, mx, id := confirmedWithErasureMetrics(t, w)
	stream := domain.OrderStream(id)
	shredded := func() int {
		n := 0
		for _, typ := range w.store.Types(stream) {
			if typ == "PaymentSecretsShredded" {
				n++
			}
		}
		return n
	}
	h.FlushShreds(ctx)
	if exists, _ := w.keys.has(id); exists || shredded() != 0 {
		t.Fatalf("after the batched delete: key exists %t, %d PaymentSecretsShredded; want the key gone and nothing recorded yet", exists, shredded())
	}
	due, _ := w.keys.Erasures(ctx, 10)
	deletedAt, ok := due[id]
	if !ok {
		t.Fatalf("erasures to record = %v, want the order's", due)
	}
	// A key held for an order never placed (a refused intent's) goes too.
	const never = "0197c000-0000-7000-8000-0000000000f0"
	if _, err := w.keys.Create(ctx, never, "", testDataKey(never), nil, payT0); err != nil {
		t.Fatal(err)
	}
	if err := w.keys.Shred(ctx, never); err != nil {
		t.Fatal(err)
	}

	if n := h.recordErasures(ctx); n != 1 || shredded() != 1 {
		t.Fatalf("recordErasures = %d, %d PaymentSecretsShredded; want 1 and 1", n, shredded())
	}
	if left, _ := w.keys.Erasures(ctx, 10); len(left) != 0 {
		t.Errorf("erasures left after recording = %v, want none", left)
	}
	if _, err := w.store.ReadStream(ctx, domain.OrderStream(never), 0, 0); err == nil {
		t.Errorf("an erasure of a key held for no order made its stream %s", domain.OrderStream(never))
	}
	if mx.count(ErasureRecorded) != 1 || mx.count(ErasureNoOrder) != 1 {
		t.Errorf("erasure metrics = %v, want recorded 1, no_order 1", mx.got)
	}
	recs, err := w.store.ReadStream(ctx, stream, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1]
	var ev domain.PaymentSecretsShredded
	if e, err := newTestRegistry().Decode(last.Type, last.Data); err == nil {
		ev, _ = e.(domain.PaymentSecretsShredded)
	}
	if ev.OrderID != id || !ev.ShreddedAt.Equal(deletedAt) || last.ID != DerivedID(id, "secrets-shredded") {
		t.Errorf("last event %s %s = %+v, want PaymentSecretsShredded of %s at %s with the derived id", last.Type, last.ID, ev, id, deletedAt)
	}
	if m, _ := eventstore.DecodeMetadata(last.Metadata); m.Actor != "alice" || m.CausationID == "" || m.CorrelationID == "" {
		t.Errorf("PaymentSecretsShredded metadata = %+v, want alice's, with a cause and a correlation", m)
	}

	// A crash after the append, before the erasure was dropped.
	w.keys.mu.Lock()
	w.keys.erased[id] = deletedAt
	w.keys.mu.Unlock()
	if n := h.recordErasures(ctx); n != 0 || shredded() != 1 {
		t.Errorf("recordErasures after a crash past the append = %d, %d PaymentSecretsShredded; want 0 and still 1", n, shredded())
	}
	if left, _ := w.keys.Erasures(ctx, 10); len(left) != 0 {
		t.Errorf("erasures left = %v, want none", left)
	}

	// Replays: the order folds to the same state with the event.
	o, _, err := h.LoadOrder(ctx, id)
	if err != nil || o.Status != domain.OrderStatusConfirmed || !slices.Contains(w.store.Types(stream), "OrderConfirmed") {
		t.Errorf("order after its erasure = %s, %v; want confirmed", o.Status, err)
	}
}

// TestErasureCountedOncePerKey: booking_erasures_total counts each deleted
// key once, when its row is dropped: a pass that records an order's erasure
// but whose drop of the row fails counts nothing, and the next pass, which
// finds the erasure recorded, drops the row and counts it once.
func TestErasureCountedOncePerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newLineageWorld()
	h, mx, id := confirmedWithErasureMetrics(t, w)
	h.FlushShreds(ctx)
	due, _ := w.keys.Erasures(ctx, 10)
	if _, ok := due[id]; !ok {
		t.Fatalf("erasures to record = %v, want the order's", due)
	}
	failing := &dropFailingKeys{memKeys: w.keys}
	h.keys = failing
	if n := h.recordErasures(ctx); n != 1 || mx.count(ErasureRecorded) != 0 {
		t.Fatalf("a pass whose drop failed: appended %d, counted %d; want 1 appended, nothing counted", n, mx.count(ErasureRecorded))
	}
	h.keys = w.keys
	if n := h.recordErasures(ctx); n != 0 || mx.count(ErasureRecorded) != 1 {
		t.Errorf("the next pass: appended %d, counted %d; want nothing appended, 1 counted", n, mx.count(ErasureRecorded))
	}
	if n := h.recordErasures(ctx); n != 0 || mx.count(ErasureRecorded) != 1 {
		t.Errorf("a pass with nothing left: appended %d, counted %d; want 0 and still 1", n, mx.count(ErasureRecorded))
	}
}

// dropFailingKeys is memKeys whose ForgetErasures fails (the drop lost).
type dropFailingKeys struct{ *memKeys }

func (dropFailingKeys) ForgetErasures(context.Context, []string) ([]string, error) {
	return nil, errors.New("the key table is down")
}

// confirmedOrder books and pays alice's order of one seat through h and
// returns its id.
func confirmedOrder(t *testing.T, h *Handler) string {
	t.Helper()
	ctx := context.Background()
	show, _, err := h.ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Show", StartsAt: payT0.Add(48 * time.Hour), Capacity: 10, Price: payPrice})
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := h.ReserveSeats(ctx, Request{Actor: "alice", Operation: OpReserveSeats, Key: "res"}, ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.PlaceOrder(ctx, Request{Actor: "alice", Operation: OpPlaceOrder, Key: "order", Wait: 10 * time.Second},
		PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"})
	if err != nil || out.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder = %+v, %v; want confirmed", out.Order, err)
	}
	return out.Order.ID
}
