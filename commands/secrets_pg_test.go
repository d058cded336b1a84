package commands

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

// Integration tests of secrets at rest: real PostgreSQL (events and the
// order_keys table), the real simulator, tokens that no test reuses.

// distinctToken returns the simulator token prefix followed by a random
// suffix (it behaves as the prefix), so a grep finds exactly this order's.
func distinctToken(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// heldBeforeIntent is the event store with a check: when an order intent is
// appended, the key table must already hold the sealed token of its order.
type heldBeforeIntent struct {
	EventStore
	t       *testing.T
	keys    Keys
	checked atomic.Int64
}

func (s *heldBeforeIntent) Append(ctx context.Context, stream string, exp eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	s.check(ctx, events)
	return s.EventStore.Append(ctx, stream, exp, events...)
}

// AppendMulti checks every part as Append does: an order's intent is
// recorded in the unit that claims the order.
func (s *heldBeforeIntent) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	for _, a := range appends {
		s.check(ctx, a.Events)
	}
	return s.EventStore.AppendMulti(ctx, appends...)
}

// check fails the test for an order's IntentRecorded among events while
// the key table does not hold its sealed token, and counts those checked.
func (s *heldBeforeIntent) check(ctx context.Context, events []eventstore.EventData) {
	for _, e := range events {
		if e.Type != "IntentRecorded" {
			continue
		}
		var rec domain.IntentRecorded
		if err := json.Unmarshal(e.Data, &rec); err != nil {
			s.t.Errorf("IntentRecorded does not decode: %v", err)
		}
		if rec.Operation != OpPlaceOrder {
			continue
		}
		held, exists, err := s.keys.HeldToken(ctx, rec.TargetID)
		if err != nil || !exists || len(held) == 0 {
			s.t.Errorf("IntentRecorded of order %s appended while the key table holds %x (exists %v, %v); want its sealed token first",
				rec.TargetID, held, exists, err)
		}
		if rec.Private != nil {
			s.t.Errorf("IntentRecorded of order %s has a private part %v", rec.TargetID, rec.Private)
		}
		s.checked.Add(1)
	}
}

// rawEvents returns every event's type, data and metadata as stored.
func (f *pgFix) rawEvents() []eventstore.RecordedEvent {
	f.t.Helper()
	rows, err := f.pool.Query(context.Background(), `SELECT stream, type, data, metadata FROM events ORDER BY tx, seq`)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []eventstore.RecordedEvent
	for rows.Next() {
		var r eventstore.RecordedEvent
		if err := rows.Scan(&r.Stream, &r.Type, &r.Data, &r.Metadata); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *pgFix) keyRows() int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM order_keys`).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestPGPaymentSecretsAtRest: confirmed, declined and cancelled orders with
// distinct tokens, and one whose payment requires the customer's action
// (its client secret shown to the customer, then cancelled). The token is
// held in the key table before each intent is recorded; no event holds a
// token or a client secret in clear (data or metadata); the changed events
// are written at their schema versions; every key is deleted once its
// order ended; and every order still replays and loads after that.
func TestPGPaymentSecretsAtRest(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	store := &heldBeforeIntent{EventStore: f.events(), t: t, keys: f.keys}
	cfg := DefaultConfig()
	cfg.Executor = "pg-secrets"
	h := New(cfg, store, f.clock, f.client, newTestRegistry(), f.log, WithKeys(f.keys))
	t.Cleanup(func() { h.FlushShreds(context.Background()) }) // before the pool closes
	f.recv.Store(h)
	ctx := context.Background()

	visa, decline, cancelled := distinctToken(providersim.TokenVisa), distinctToken(providersim.TokenDecline), distinctToken(providersim.TokenVisa)
	action := distinctToken(providersim.TokenAuthenticationRequired)
	type placed struct {
		req    Request
		cmd    PlaceOrderCommand
		res    OrderResult
		status string
	}
	var orders []placed
	for _, tok := range []string{visa, decline, cancelled, action} {
		res, _, err := h.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: f.mustShow(h), Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		req := f.req(OpPlaceOrder)
		req.Wait = 10 * time.Second
		cmd := PlaceOrderCommand{ReservationID: res.ID, PaymentToken: tok}
		out, err := h.PlaceOrder(ctx, req, cmd)
		if err != nil || out.Final != (tok != action) {
			t.Fatalf("PlaceOrder(%s) = final %v, %v", tok, out.Final, err)
		}
		orders = append(orders, placed{req: req, cmd: cmd, res: out})
	}
	// The order whose payment requires action shows its client secret
	// (opened from the sealed event) until it is cancelled.
	waiting := orders[3].res.Order
	pa, err := h.PaymentAction(ctx, waiting)
	if err != nil || pa == nil || !strings.Contains(pa.ClientSecret, "_secret_") {
		t.Fatalf("PaymentAction(%s) = %v, %v; want the client secret", waiting.Status, pa, err)
	}
	secret := pa.ClientSecret
	if c, err := h.CancelOrder(ctx, f.req(OpCancelOrder), waiting.ID); err != nil {
		t.Fatalf("CancelOrder(requires_action) = %v", err)
	} else {
		f.eventually(30*time.Second, "the cancelled payment", func() bool {
			_ = h.ReconcileOrder(ctx, c.Order.ID)
			return f.order(h, c.Order.ID).Status == domain.OrderStatusCancelled
		})
	}
	if got := orders[0].res.Order.Status; got != domain.OrderStatusConfirmed {
		t.Errorf("tok_visa order is %s, want confirmed", got)
	}
	if got := orders[1].res.Order.Status; got != domain.OrderStatusFailed {
		t.Errorf("tok_decline order is %s, want failed", got)
	}
	c, err := h.CancelOrder(ctx, f.req(OpCancelOrder), orders[2].res.Order.ID)
	if err != nil || c.Order.Status != domain.OrderStatusCancelled {
		t.Fatalf("CancelOrder = %s, %v; want cancelled", c.Order.Status, err)
	}
	f.eventually(10*time.Second, "the cancelled order's refund", func() bool {
		o := f.order(h, orders[2].res.Order.ID)
		return len(o.PendingRefunds()) == 0
	})
	orders[0].status, orders[1].status, orders[2].status, orders[3].status = domain.OrderStatusConfirmed, domain.OrderStatusFailed,
		domain.OrderStatusCancelled, domain.OrderStatusCancelled
	if n := store.checked.Load(); n != 4 {
		t.Errorf("%d order intents checked at append, want 4", n)
	}

	// Counts at the simulator: one charge kept, one declined, one refunded,
	// one cancelled.
	wantNet := []int64{1500, 0, 0, 0}
	for i, o := range orders {
		if net, _ := f.charges(o.res.Order.ID); net != wantNet[i] {
			t.Errorf("order %d: net charged %d, want %d", i, net, wantNet[i])
		}
	}

	// No token in clear anywhere in the log; versions as documented.
	evs := f.rawEvents()
	versions := map[string]int{}
	for _, e := range evs {
		for _, tok := range []string{visa, decline, cancelled, action, secret, "_secret_"} {
			if bytes.Contains(e.Data, []byte(tok)) || bytes.Contains(e.Metadata, []byte(tok)) {
				t.Errorf("%s %s holds the secret %s in clear", e.Stream, e.Type, tok)
			}
		}
		md, err := eventstore.DecodeMetadata(e.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		versions[e.Type] = md.SchemaVersion
	}
	for typ, want := range map[string]int{"IntentRecorded": 2, "OrderPlaced": 2, "PaymentAttemptStarted": 3, "PaymentActionRequired": 1,
		"OrderConfirmed": 1, "SeatsHeld": 1} {
		if versions[typ] != want {
			t.Errorf("%s written at schema version %d, want %d", typ, versions[typ], want)
		}
	}

	// Every key is gone: nothing sealed in the log can be opened any more
	// (an ended order's key within the shredder's delay).
	f.eventually(30*time.Second, "order_keys to have no row once every order ended", func() bool { return f.keyRows() == 0 })
	for i, o := range orders {
		got := f.order(h, o.res.Order.ID)
		a := got.LastAttempt()
		if len(got.SealedPaymentToken) == 0 || got.PaymentToken != "" {
			t.Errorf("order %d: sealed token %d bytes, clear %q; want sealed only", i, len(got.SealedPaymentToken), got.PaymentToken)
		}
		if a == nil || a.Legacy() || a.RequestSHA256 == "" {
			t.Errorf("order %d: last attempt %+v; want its inputs and their digest, no request bytes", i, a)
		}
		if i == 3 && (len(a.SealedAction) == 0 || a.Outcome != domain.OutcomeFailed) {
			t.Errorf("order 3: last attempt %s with %d sealed action bytes; want failed (cancelled) with the sealed secret kept", a.Outcome, len(a.SealedAction))
		}
		if pa, err := h.PaymentAction(ctx, got); pa != nil || err != nil {
			t.Errorf("order %d: PaymentAction after the end = %v, %v; want nothing", i, pa, err)
		}
		if _, ok, err := f.keys.Key(ctx, o.res.Order.ID); ok || err != nil {
			t.Errorf("order %d: key still readable (ok %v, %v)", i, ok, err)
		}
		// The shredded order replays: same order, same status, nothing new.
		before := len(f.types(o.res.Order.ID))
		again, err := h.PlaceOrder(ctx, o.req, o.cmd)
		if err != nil || !again.Replayed || again.Order.ID != o.res.Order.ID || again.Order.Status != o.status {
			t.Errorf("order %d: replay after shredding = %s %s replayed %v, %v; want %s %s replayed", i,
				again.Order.ID, again.Order.Status, again.Replayed, err, o.res.Order.ID, o.status)
		}
		if _, err := h.GetOrder(ctx, pgActor, o.res.Order.ID); err != nil {
			t.Errorf("order %d: GetOrder after shredding: %v", i, err)
		}
		if err := h.ReconcileOrder(ctx, o.res.Order.ID); err != nil {
			t.Errorf("order %d: ReconcileOrder after shredding: %v", i, err)
		}
		if after := len(f.types(o.res.Order.ID)); after != before {
			t.Errorf("order %d: %d events after the replay, want %d", i, after, before)
		}
	}
	if n := f.keyRows(); n != 0 {
		t.Errorf("order_keys has %d rows after the replays, want 0 (a replay must not hold the token again)", n)
	}
}

// mustShow schedules the fixture's show once and returns its id.
func (f *pgFix) mustShow(h *Handler) string {
	f.t.Helper()
	if f.show == "" {
		f.show = f.scheduleShow(f.t, h, "PG Show", 100).ID
	}
	return f.show
}

// TestPGOrderWithoutKeyFailsUncharged: the key row disappears after the
// intent is recorded and before the order is placed (the hook deletes it
// at order.claiming, before the unit that places the order): the order is
// claimed on reads and placed without a token, and fails as no attempt is
// possible; nothing is charged. With key units there is no key row to
// delete there: the order's intent, its key and the order are written in
// one unit, so the hook deletes nothing and the order is confirmed, paid
// once.
func TestPGOrderWithoutKeyFailsUncharged(t *testing.T) {
	t.Parallel()
	for _, units := range []bool{false, true} {
		t.Run(fmt.Sprintf("key units %v", units), func(t *testing.T) {
			t.Parallel()
			f := newPGFix(t, providersim.Config{})
			var deleted atomic.Int64
			hooks := Hooks{Step: func(step string) {
				if step == "order.claiming" {
					tag, err := f.pool.Exec(context.Background(), `DELETE FROM order_keys`)
					if err != nil {
						t.Error(err)
					}
					deleted.Add(tag.RowsAffected())
				}
			}}
			opts := []Option{WithHooks(hooks)}
			if units {
				opts = append(opts, WithKeyUnits(keystore.Units{Events: f.store, Keys: f.keys}))
			}
			h := f.handler("pg-a", nil, opts...)
			res := f.placeOrder(h, distinctToken(providersim.TokenVisa), 10*time.Second)
			o := res.Order
			if units {
				if n := deleted.Load(); n != 0 {
					t.Errorf("the hook deleted %d key rows at order.claiming, want 0 (the key is written with the order)", n)
				}
				if !res.Final || o.Status != domain.OrderStatusConfirmed {
					t.Fatalf("PlaceOrder = final %v, %s; want confirmed", res.Final, o.Status)
				}
				if net, n := f.charges(o.ID); net != 1500 || n != 1 {
					t.Errorf("simulator: net %d over %d charges, want 1500 over 1", net, n)
				}
				return
			}
			if n := deleted.Load(); n != 1 {
				t.Errorf("the hook deleted %d key rows at order.claiming, want 1", n)
			}
			if !res.Final || o.Status != domain.OrderStatusFailed || o.FailReason != domain.FailNoAttempt {
				t.Fatalf("PlaceOrder = final %v, %s (%s); want failed, %s", res.Final, o.Status, o.FailReason, domain.FailNoAttempt)
			}
			if o.HasPaymentToken() || len(o.Attempts) != 0 {
				t.Errorf("order has a token %v and %d attempts, want none", o.HasPaymentToken(), len(o.Attempts))
			}
			if net, n := f.charges(o.ID); net != 0 || n != 0 {
				t.Errorf("simulator: net %d over %d charges, want none", net, n)
			}
		})
	}
}

// noPending lists no order: a reconciler pass then only deletes due keys.
type noPending struct{}

func (noPending) PendingOrders(context.Context, string, int) ([]string, error) { return nil, nil }

// TestPGDeadlineShredsKey: a placed order keeps its key until its payment
// deadline; then a reconciler pass deletes the key even though nothing has
// ended the order yet, and the order then fails past its deadline,
// uncharged. The placing request is held after OrderPlaced, so no payment
// runs meanwhile.
func TestPGDeadlineShredsKey(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	hooks, reached, release := blockAt("order.placed")
	h := f.handler("pg-a", nil, WithHooks(hooks))
	ctx := context.Background()
	done := make(chan OrderResult)
	go func() { done <- f.placeOrder(h, distinctToken(providersim.TokenVisa), 10*time.Second) }()
	<-reached
	id := f.claimedOrder()
	if n, err := h.ReconcilePass(ctx, noPending{}); n != 0 || err != nil {
		t.Fatalf("ReconcilePass = %d, %v", n, err)
	}
	if _, ok, err := f.keys.Key(ctx, id); !ok || err != nil {
		t.Fatalf("before the deadline the key is gone (ok %v, %v)", ok, err)
	}

	f.clock.Advance(h.Config().PaymentDeadline)
	if _, err := h.ReconcilePass(ctx, noPending{}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.keys.Key(ctx, id); ok || err != nil {
		t.Fatalf("at the deadline the key is still there (ok %v, %v)", ok, err)
	}
	// The unit that placed the order started its first attempt, unsent.
	if o := f.order(h, id); o.Status != domain.OrderStatusPending || len(o.Attempts) != 1 || o.Attempts[0].Outcome != domain.OutcomeNone {
		t.Fatalf("the key pass changed the order: %s with attempts %+v; want pending with attempt 1 started, no outcome", o.Status, o.Attempts)
	}
	close(release)
	res := <-done
	if o := res.Order; !res.Final || o.ID != id || o.Status != domain.OrderStatusFailed || o.FailReason != domain.FailPaymentDeadline {
		t.Errorf("PlaceOrder = %s %s (%s) final %v, want %s failed (%s)", o.ID, o.Status, o.FailReason, res.Final, id, domain.FailPaymentDeadline)
	}
	if net, n := f.charges(id); net != 0 || n != 0 {
		t.Errorf("simulator: net %d over %d charges, want none", net, n)
	}
}

// claimedOrder returns the id of the only order claimed so far.
func (f *pgFix) claimedOrder() string {
	f.t.Helper()
	var id string
	err := f.pool.QueryRow(context.Background(),
		`SELECT convert_from(data, 'UTF8')::jsonb->>'order_id' FROM events WHERE type = 'OrderClaimed'`).Scan(&id)
	if err != nil {
		f.t.Fatalf("the claimed order: %v", err)
	}
	return id
}

// blockedPayments holds every payment until release is closed.
type blockedPayments struct {
	Payments
	release chan struct{}
}

func (p blockedPayments) CreatePayment(ctx context.Context, key string, req provider.PaymentRequest) (provider.Payment, error) {
	<-p.release
	return p.Payments.CreatePayment(ctx, key, req)
}

// TestPGConcurrentFirstRequestsLeaveOneKey: ten identical first requests
// at once record one intent; the nine that lost the race delete the keys
// they made, so the table holds one row (its token dropped once the order
// carries it) until the order ends, then none.
func TestPGConcurrentFirstRequestsLeaveOneKey(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	release := make(chan struct{})
	cfg := DefaultConfig()
	cfg.Executor = "pg-dup"
	h := New(cfg, f.events(), f.clock, blockedPayments{Payments: f.client, release: release}, newTestRegistry(), f.log, WithKeys(f.keys))
	t.Cleanup(func() { h.FlushShreds(context.Background()) }) // before the pool closes
	ctx := context.Background()
	res, _, err := h.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: f.mustShow(h), Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	req := f.req(OpPlaceOrder)
	cmd := PlaceOrderCommand{ReservationID: res.ID, PaymentToken: distinctToken(providersim.TokenVisa)}
	var wg sync.WaitGroup
	ids := make([]string, 10)
	for i := range ids {
		wg.Go(func() {
			out, err := h.PlaceOrder(ctx, req, cmd)
			var inUse *InUseError
			switch {
			case err == nil:
				ids[i] = out.Order.ID
			case !errors.As(err, &inUse):
				t.Errorf("request %d: PlaceOrder = %v", i, err)
			}
		})
	}
	wg.Wait()
	var orderID string
	for _, id := range ids {
		if id != "" && orderID != "" && id != orderID {
			t.Fatalf("two orders for one intent: %v", ids)
		}
		if id != "" {
			orderID = id
		}
	}
	if orderID == "" {
		t.Fatalf("no request answered the order: %v", ids)
	}
	// The losers' keys are deleted within the shredder's delay.
	f.eventually(30*time.Second, "order_keys to hold the pending order's row only", func() bool { return f.keyRows() == 1 })
	if held, exists, err := f.keys.HeldToken(ctx, orderID); err != nil || !exists || held != nil {
		t.Errorf("HeldToken(placed order) = %x, %v, %v; want nil, true (the order stream carries it)", held, exists, err)
	}
	close(release)
	f.eventually(10*time.Second, "the order to confirm", func() bool {
		return f.order(h, orderID).Status == domain.OrderStatusConfirmed
	})
	f.eventually(30*time.Second, "the key to be deleted (within the shredder's delay)", func() bool { return f.keyRows() == 0 })
	if net, n := f.charges(orderID); net != 1500 || n != 1 {
		t.Errorf("simulator: net %d over %d charges, want 1500 over 1", net, n)
	}
}

// TestPGRefusedOrderIntentLeavesNoKey: a second order intent for a
// reservation already ordered is refused; the key it held for its
// order, which never exists, is deleted at once, and the refusal replays.
func TestPGRefusedOrderIntentLeavesNoKey(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	h := f.handler("pg-a", nil)
	ctx := context.Background()
	res, _, err := h.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: f.mustShow(h), Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := f.req(OpPlaceOrder)
	first.Wait = 10 * time.Second
	out, err := h.PlaceOrder(ctx, first, PlaceOrderCommand{ReservationID: res.ID, PaymentToken: distinctToken(providersim.TokenVisa)})
	if err != nil || out.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder = %s, %v; want confirmed", out.Order.Status, err)
	}
	second := f.req(OpPlaceOrder)
	cmd := PlaceOrderCommand{ReservationID: res.ID, PaymentToken: distinctToken(providersim.TokenVisa)}
	for i := range 2 {
		_, err = h.PlaceOrder(ctx, second, cmd)
		var rej *Rejection
		if !errors.As(err, &rej) || !errors.Is(err, domain.ErrReservationAlreadyOrdered) || rej.Replayed != (i == 1) {
			t.Fatalf("PlaceOrder #%d with a new key = %v, want the reservation-already-ordered rejection (replayed the second time)", i+1, err)
		}
	}
	f.eventually(30*time.Second, "order_keys to have no row (the confirmed order's and the refused intent's keys deleted)",
		func() bool { return f.keyRows() == 0 })
	if net, n := f.charges(out.Order.ID); net != 1500 || n != 1 {
		t.Errorf("simulator: net %d over %d charges, want 1500 over 1", net, n)
	}
}

// lossyUnits are key units whose AppendShreddingKey loses its answer (an
// error of unknown outcome, as pgstore returns when the connection drops)
// lose times: after committing when commit, else before sending.
type lossyUnits struct {
	keystore.Units
	commit bool
	lose   atomic.Int64
	calls  atomic.Int64
}

func (u *lossyUnits) AppendShreddingKey(ctx context.Context, orderID string, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	u.calls.Add(1)
	if u.lose.Add(-1) < 0 {
		return u.Units.AppendShreddingKey(ctx, orderID, appends...)
	}
	if u.commit {
		if _, err := u.Units.AppendShreddingKey(ctx, orderID, appends...); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("pgstore: append to %d streams (outcome unknown): %w", len(appends), io.ErrUnexpectedEOF)
}

// TestPGOrderEndDeletesKeyInItsUnit: with key units, the unit that records
// an order's payment result and ends the order (confirmed or failed)
// deletes the order's key and leaves its erasure to record in its own
// transaction: before it (at payment.fenced, the order placed and its
// attempt started) the key is there and no erasure; once the request
// answers, the key is gone, one erasure is left, the order ended once and
// nothing waits in the batched shredder. When the unit's answer is lost,
// before or after it committed, the repeat of the same unit leaves the
// same: one ending event, one erasure.
func TestPGOrderEndDeletesKeyInItsUnit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, token  string
		lose         int64
		commit       bool
		status, ends string
	}{
		{"confirmed", providersim.TokenVisa, 0, false, domain.OrderStatusConfirmed, domain.TypeOrderConfirmed},
		{"failed", providersim.TokenDecline, 0, false, domain.OrderStatusFailed, domain.TypeOrderFailed},
		{"answer lost after the commit", providersim.TokenVisa, 1, true, domain.OrderStatusConfirmed, domain.TypeOrderConfirmed},
		{"answer lost before the commit", providersim.TokenVisa, 1, false, domain.OrderStatusConfirmed, domain.TypeOrderConfirmed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newPGFix(t, providersim.Config{})
			f.pauseWebhooks(true) // the request records the result, not a webhook
			ctx := context.Background()
			count := func(q string) int {
				var n int
				if err := f.pool.QueryRow(ctx, q).Scan(&n); err != nil {
					t.Error(err)
				}
				return n
			}
			var fenced atomic.Bool
			hooks := Hooks{Step: func(step string) {
				if step == "payment.fenced" && fenced.CompareAndSwap(false, true) {
					if k, e := count(`SELECT count(*) FROM order_keys`), count(`SELECT count(*) FROM order_key_erasures`); k != 1 || e != 0 {
						t.Errorf("at payment.fenced: %d keys, %d erasures; want the order's key and no erasure", k, e)
					}
				}
			}}
			units := &lossyUnits{Units: keystore.Units{Events: f.store, Keys: f.keys}, commit: tc.commit}
			units.lose.Store(tc.lose)
			h := f.handler("pg-a", nil, WithHooks(hooks), WithKeyUnits(units))
			res := f.placeOrder(h, distinctToken(tc.token), 10*time.Second)
			o := res.Order
			if !res.Final || o.Status != tc.status {
				t.Fatalf("PlaceOrder = final %v, %s; want %s", res.Final, o.Status, tc.status)
			}
			if !fenced.Load() {
				t.Error("payment.fenced was never reached")
			}
			if _, ok, err := f.keys.Key(ctx, o.ID); ok || err != nil {
				t.Errorf("order %s's key after the answer: present %v (%v), want deleted", o.ID, ok, err)
			}
			if e, _ := f.keys.Erasures(ctx, 10); len(e) != 1 || e[o.ID].IsZero() {
				t.Errorf("erasures to record = %v, want the order's only", e)
			}
			if n := count(fmt.Sprintf(`SELECT count(*) FROM events WHERE type = '%s'`, tc.ends)); n != 1 {
				t.Errorf("%d %s, want 1", n, tc.ends)
			}
			if n := units.calls.Load(); n != 1+tc.lose {
				t.Errorf("AppendShreddingKey called %d times, want %d (the unit and its repeats)", n, 1+tc.lose)
			}
			h.shredder.mu.Lock()
			waiting := len(h.shredder.of)
			h.shredder.mu.Unlock()
			if waiting != 0 {
				t.Errorf("%d keys wait in the batched shredder, want none", waiting)
			}
		})
	}
}
