package commands

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
)

// callCountingStore counts every call of the event store, by method.
type callCountingStore struct {
	EventStore
	mu    sync.Mutex
	calls map[string]int
}

func (s *callCountingStore) count(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[method]++
}

// snapshot returns the calls so far, by method.
func (s *callCountingStore) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for m, n := range s.calls {
		out[m] = n
	}
	return out
}

func (s *callCountingStore) Append(ctx context.Context, stream string, exp eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	s.count("Append")
	return s.EventStore.Append(ctx, stream, exp, events...)
}

func (s *callCountingStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	s.count("AppendMulti")
	return s.EventStore.AppendMulti(ctx, appends...)
}

func (s *callCountingStore) ReadStream(ctx context.Context, name string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error) {
	s.count("ReadStream")
	return s.EventStore.ReadStream(ctx, name, from, limit)
}

func (s *callCountingStore) Truncate(ctx context.Context, stream string, before eventstore.Revision) error {
	s.count("Truncate")
	return s.EventStore.Truncate(ctx, stream, before)
}

// countingProcessed is a memProcessed that counts its look-ups and marks.
type countingProcessed struct {
	memProcessed
	mu             sync.Mutex
	lookups, marks int
}

func (c *countingProcessed) Processed(ctx context.Context, id string) (bool, error) {
	c.mu.Lock()
	c.lookups++
	c.mu.Unlock()
	return c.memProcessed.Processed(ctx, id)
}

func (c *countingProcessed) MarkProcessed(ctx context.Context, id string, at time.Time) error {
	c.mu.Lock()
	c.marks++
	c.mu.Unlock()
	return c.memProcessed.MarkProcessed(ctx, id, at)
}

// webhookCost is what one delivery of a webhook cost: event store calls by
// method, look-ups and marks of processed events, clock reads, payment
// fetches, order events appended, and the webhook_duplicate count.
type webhookCost struct {
	store                    map[string]int
	lookups, marks, clock    int
	gets, appended, dupCount int
}

// paidWorld is an order confirmed and paid by process a of shared
// processes whose store calls and processed-event look-ups are counted.
type paidWorld struct {
	p         *processes
	store     *callCountingStore
	processed *countingProcessed
	metrics   *recordingMetrics
	a         *Handler
	order     OrderResult
	pay       provider.Payment
}

// newPaidWorld places and pays alice's order of one seat through process
// a (executor execA).
func newPaidWorld(t *testing.T) *paidWorld {
	t.Helper()
	ctx := context.Background()
	p := newProcesses()
	w := &paidWorld{p: p, store: &callCountingStore{EventStore: p.mem}, processed: &countingProcessed{}, metrics: newRecordingMetrics()}
	w.a = w.handler(execA)
	show := scheduleShow(t, w.a, 4, 72*time.Hour)
	req, cmd := aliceReserves(show.ID, "k", 1)
	res, _, err := w.a.ReserveSeats(ctx, req, cmd)
	if err != nil {
		t.Fatal(err)
	}
	w.order, err = w.a.PlaceOrder(ctx, Request{Actor: "alice", Operation: OpPlaceOrder, Key: "o", Wait: 10 * time.Second},
		PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"})
	if err != nil || w.order.Order.Status != domain.OrderStatusConfirmed || w.order.Order.ChargeID == "" {
		t.Fatalf("PlaceOrder = %+v, %v; want confirmed, paid", w.order, err)
	}
	if w.pay, err = p.pay.GetPayment(ctx, w.order.Order.ChargeID); err != nil {
		t.Fatal(err)
	}
	return w
}

// handler returns a process of w with executor exec.
func (w *paidWorld) handler(exec string) *Handler {
	cfg := DefaultConfig()
	cfg.Executor = exec
	return New(cfg, w.store, w.p.clock, w.p.pay, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithKeys(w.p.keys), WithProcessedEvents(w.processed), WithMetrics(w.metrics))
}

// TestHandleProviderEventAnswersFromMemory: a payment_intent.succeeded
// whose payment the process recorded as succeeded, or whose order stream it
// keeps with that charge succeeded, is acknowledged from memory — no event
// store call, no clock read, no look-up of the processed events, no fetch,
// nothing appended — and its id is still marked processed, so another
// process recognises its redelivery by id. A process that holds neither
// takes the full path: one look-up, one read of the order, no fetch (the
// order records the payment), nothing appended; it keeps the order it read,
// and answers the next notice from memory. Every delivery reports nothing
// appended, not ignored (booking_webhooks_total's duplicate).
func TestHandleProviderEventAnswersFromMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newPaidWorld(t)
	p, store, processed, metrics, pay, placed := w.p, w.store, w.processed, w.metrics, w.pay, w.order
	a, b := w.a, w.handler(execB)
	order := domain.OrderStream(placed.Order.ID)

	state := func() webhookCost {
		processed.mu.Lock()
		defer processed.mu.Unlock()
		return webhookCost{store: store.snapshot(), lookups: processed.lookups, marks: processed.marks, clock: p.clock.reads(),
			gets: p.pay.count("get"), appended: len(p.mem.Types(order)), dupCount: metrics.get("webhook_duplicate")}
	}
	deliver := func(h *Handler, id string) webhookCost {
		t.Helper()
		// ReceiveWebhook reads the service clock before (the signature's
		// tolerance): the process's reading is fresh.
		if _, err := h.streams.now(ctx); err != nil {
			t.Fatal(err)
		}
		before := state()
		rctx, rep := WithWebhookReport(ctx)
		if err := h.HandleProviderEvent(rctx, payEvent(id, provider.EventPaymentIntentSucceeded, pay)); err != nil {
			t.Fatalf("HandleProviderEvent(%s) = %v", id, err)
		}
		if rep.Appended() != 0 || rep.Ignored() {
			t.Errorf("%s: report appended %d, ignored %t; want 0, false (a duplicate)", id, rep.Appended(), rep.Ignored())
		}
		after := state()
		d := webhookCost{store: map[string]int{}, lookups: after.lookups - before.lookups, marks: after.marks - before.marks,
			clock: after.clock - before.clock, gets: after.gets - before.gets, appended: after.appended - before.appended,
			dupCount: after.dupCount - before.dupCount}
		for m, n := range after.store {
			if n -= before.store[m]; n != 0 {
				d.store[m] = n
			}
		}
		return d
	}
	memory := webhookCost{store: map[string]int{}, marks: 1}
	steps := []struct {
		name string
		h    *Handler
		id   string
		want webhookCost
	}{
		{"the process that recorded the payment: answered from memory", a, "evt_1", memory},
		{"its redelivery to that process: answered from memory again", a, "evt_1", memory},
		{"its redelivery to another process: recognised by id", b, "evt_1",
			webhookCost{store: map[string]int{}, lookups: 1, dupCount: 1}},
		{"another notice to that process, which holds nothing: the full path", b, "evt_2",
			webhookCost{store: map[string]int{"ReadStream": 1}, lookups: 1, marks: 1}},
		{"a third notice to it, which keeps the order it read: answered from memory", b, "evt_3", memory},
	}
	for _, s := range steps {
		if diff := cmp.Diff(s.want, deliver(s.h, s.id), cmp.AllowUnexported(webhookCost{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: cost (-want +got):\n%s", s.name, diff)
		}
	}
	if o, _, err := a.LoadOrder(ctx, placed.Order.ID); err != nil || o.Status != domain.OrderStatusConfirmed || o.ChargeID != pay.ID {
		t.Errorf("order after the notices = %+v, %v; want confirmed by %s", o, err, pay.ID)
	}
}

// TestHandleProviderEventWaitsForTheDriveOfItsOrder: a success notice that
// reaches a process while that process drives the order's payment waits
// for the drive: once the drive has recorded the payment and ended, the
// notice is answered from memory (no event store call, no look-up of the
// processed events, no fetch; its id marked processed). A drive still
// running after noticeDriveWait leaves the notice to the full path (one
// look-up, one read of the order, which records the payment: no fetch).
func TestHandleProviderEventWaitsForTheDriveOfItsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newPaidWorld(t)
	p, store, processed, pay := w.p, w.store, w.processed, w.pay
	orderID := w.order.Order.ID
	type cost struct{ reads, lookups, marks, gets int }
	costOf := func() cost {
		processed.mu.Lock()
		defer processed.mu.Unlock()
		return cost{store.snapshot()["ReadStream"], processed.lookups, processed.marks, p.pay.count("get")}
	}
	deliver := func(h *Handler, id string) (cost, error) {
		before := costOf()
		err := h.HandleProviderEvent(ctx, payEvent(id, provider.EventPaymentIntentSucceeded, pay))
		after := costOf()
		return cost{after.reads - before.reads, after.lookups - before.lookups, after.marks - before.marks, after.gets - before.gets}, err
	}

	// A process driving the order's payment: the notice waits for the drive.
	b := w.handler(execB)
	unlock := b.sends.TryLock(orderID)
	got := make(chan cost, 1)
	go func() {
		c, err := deliver(b, "evt_w1")
		if err != nil {
			t.Errorf("HandleProviderEvent(evt_w1) = %v", err)
		}
		got <- c
	}()
	waiting := func() bool {
		b.sends.mu.Lock()
		defer b.sends.mu.Unlock()
		e := b.sends.locks[orderID]
		return e != nil && e.gone != nil
	}
	for deadline := time.Now().Add(10 * time.Second); !waiting(); {
		if time.Now().After(deadline) {
			t.Fatal("the notice did not wait for the drive of its order")
		}
		runtime.Gosched()
	}
	b.streams.noteDone(succeededID(orderID, pay.ID)) // what the drive's append of PaymentSucceeded teaches
	unlock()
	if c := <-got; c != (cost{marks: 1}) {
		t.Errorf("notice during the drive: cost %+v, want only its mark (answered from memory)", c)
	}

	// A drive that outlasts the wait: the full path.
	c := w.handler("exec-c")
	unlock = c.sends.TryLock(orderID)
	defer unlock()
	if got, err := deliver(c, "evt_w2"); err != nil || got != (cost{reads: 1, lookups: 1, marks: 1}) {
		t.Errorf("notice during a drive that outlasts the wait: cost %+v, %v; want one read, one look-up, one mark, no fetch", got, err)
	}
}
