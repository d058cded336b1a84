package commands

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider/providersim"
)

// Adversarial integration tests of the round-trip work (record-first
// intents, the process-wide clock reading, the hold batch's own snapshot,
// the placing drive's skipped tail read, the batched key shredder) across
// two Handlers on one database: the promise is one reservation, one order,
// one charge per intent whatever process a repeat reaches.

// settle waits until order id has ended (cancelled with no refund pending,
// confirmed or failed) and returns it.
func (f *pgFix) settle(h *Handler, id string) domain.Order {
	f.t.Helper()
	var o domain.Order
	f.eventually(60*time.Second, "order "+id+" to settle", func() bool {
		_ = h.ReconcileOrder(context.Background(), id)
		o = f.order(h, id)
		switch o.Status {
		case domain.OrderStatusCancelled:
			return len(o.PendingRefunds()) == 0
		case domain.OrderStatusConfirmed, domain.OrderStatusFailed:
			return true
		}
		return false
	})
	return o
}

// TestPGBreakCancelBetweenPlacingLeaseAndSend: the placing request goes on
// from its first lease to the send without reading the order's tail
// (driveState.placing). A cancel committed on another process right in
// that gap must still end the order cancelled, net 0, at most one charge.
func TestPGBreakCancelBetweenPlacingLeaseAndSend(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	hooks, reached, release := blockAt("payment.fenced")
	a := f.handler("pg-a", nil, WithHooks(hooks))
	b := f.handler("pg-b", nil)
	ctx := context.Background()
	res, _, err := a.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: f.mustShow(a), Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	req := f.req(OpPlaceOrder)
	req.Wait = 30 * time.Second
	placed := make(chan error, 1)
	var out OrderResult
	go func() {
		var err error
		out, err = a.PlaceOrder(ctx, req, PlaceOrderCommand{ReservationID: res.ID, PaymentToken: distinctToken(providersim.TokenVisa)})
		placed <- err
	}()
	select {
	case <-reached:
	case err := <-placed:
		t.Fatalf("PlaceOrder returned before its send: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the placing request never reached payment.fenced")
	}
	id := f.claimedOrderOf(res.ID)
	c, err := b.CancelOrder(ctx, f.req(OpCancelOrder), id)
	if err != nil {
		t.Fatalf("CancelOrder on B = %v", err)
	}
	if c.Order.Status != domain.OrderStatusCancelling && c.Order.Status != domain.OrderStatusCancelled {
		t.Fatalf("CancelOrder on B answered %s, want cancelling or cancelled", c.Order.Status)
	}
	close(release)
	if err := <-placed; err != nil {
		t.Fatalf("PlaceOrder = %v", err)
	}
	if out.Order.ID != id {
		t.Fatalf("PlaceOrder answered order %s, want %s", out.Order.ID, id)
	}
	o := f.settle(a, id)
	net, n := f.charges(id)
	if o.Status != domain.OrderStatusCancelled || net != 0 || n > 1 || o.NetCharged() != 0 {
		t.Fatalf("order %s, net %d over %d charges (order's own net %d), events %v; want cancelled, net 0, at most one charge",
			o.Status, net, n, o.NetCharged(), f.types(id))
	}
	t.Logf("events %v, %d charges", f.types(id), n)
}

// claimedOrderOf returns the id of the order that claimed reservation resID.
func (f *pgFix) claimedOrderOf(resID string) string {
	f.t.Helper()
	recs, err := f.store.ReadStream(context.Background(), domain.ClaimStream(resID), 0, 0)
	if err != nil || len(recs) == 0 {
		f.t.Fatalf("claim stream of %s: %d events, %v", resID, len(recs), err)
	}
	ev, err := newTestRegistry().Decode(recs[0].Type, recs[0].Data)
	if err != nil {
		f.t.Fatal(err)
	}
	c, ok := ev.(domain.OrderClaimed)
	if !ok {
		f.t.Fatalf("claim stream of %s starts with %s", resID, recs[0].Type)
	}
	return c.OrderID
}

// TestPGBreakDuplicateOrderOnTwoProcesses: the same order request, eight
// times at once on two fresh processes (neither has a hint of the intent:
// all record first). One order, one charge; every answer names it; the key
// rows of the losers are deleted, and the order's once it ended.
func TestPGBreakDuplicateOrderOnTwoProcesses(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	a := f.handler("pg-a", nil)
	b := f.handler("pg-b", nil)
	ctx := context.Background()
	for round := range 5 {
		res, _, err := a.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: f.mustShow(a), Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		req := f.req(OpPlaceOrder)
		req.Wait = 20 * time.Second
		cmd := PlaceOrderCommand{ReservationID: res.ID, PaymentToken: distinctToken(providersim.TokenVisa)}
		var wg sync.WaitGroup
		ids := make([]string, 8)
		for i := range ids {
			h := a
			if i%2 == 1 {
				h = b
			}
			wg.Go(func() {
				out, err := h.PlaceOrder(ctx, req, cmd)
				var inUse *InUseError
				switch {
				case err == nil:
					ids[i] = out.Order.ID
				case errors.As(err, &inUse), errors.Is(err, domain.ErrContention):
				default:
					t.Errorf("round %d request %d: PlaceOrder = %v", round, i, err)
				}
			})
		}
		wg.Wait()
		var id string
		for _, x := range ids {
			if x != "" && id != "" && x != id {
				t.Fatalf("round %d: two orders for one intent: %v", round, ids)
			}
			if x != "" {
				id = x
			}
		}
		if id == "" {
			id = f.claimedOrderOf(res.ID)
		}
		if claimed := f.claimedOrderOf(res.ID); claimed != id {
			t.Fatalf("round %d: answers name %s, the claim %s", round, id, claimed)
		}
		o := f.settle(a, id)
		if net, n := f.charges(id); o.Status != domain.OrderStatusConfirmed || net != 1500 || n != 1 {
			t.Fatalf("round %d: order %s, net %d over %d charges; want confirmed, 1500 over 1", round, o.Status, net, n)
		}
		recs, err := f.store.ReadStream(ctx, IntentStream(req.Actor, req.Operation, req.Key), 0, 0)
		if err != nil || len(recs) == 0 || recs[0].Type != "IntentRecorded" {
			t.Fatalf("round %d: intent stream %d events, %v", round, len(recs), err)
		}
		for _, r := range recs[1:] {
			if r.Type == "IntentRecorded" {
				t.Fatalf("round %d: the intent was recorded twice", round)
			}
		}
	}
	f.eventually(30*time.Second, "every key row to be deleted", func() bool { return f.keyRows() == 0 })
}

// TestPGBreakTwoProcessesHoldOneSmallShow: two processes hold seats on one
// show of 7 seats, in waves of 24 concurrent single-seat holds (each
// process trusts the snapshot its own last batch left for ownHoldTrust).
// Exactly 7 holds succeed, all others are refused sold out, and the show
// stream's SeatsHeld count is 7.
func TestPGBreakTwoProcessesHoldOneSmallShow(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	a := f.handler("pg-a", nil)
	b := f.handler("pg-b", nil)
	ctx := context.Background()
	show := f.scheduleShow(t, a, "Small", 7)
	var mu sync.Mutex
	held, soldOut := 0, 0
	for wave := range 3 {
		// A hold on each first, so both trust their own snapshot.
		for _, h := range []*Handler{a, b} {
			if wave > 0 {
				break
			}
			if _, _, err := h.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1}); err != nil {
				t.Fatal(err)
			}
			held++
		}
		var wg sync.WaitGroup
		for i := range 24 {
			h := a
			if i%2 == 1 {
				h = b
			}
			wg.Go(func() {
				for {
					_, _, err := h.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
					var rej *Rejection
					mu.Lock()
					switch {
					case err == nil:
						held++
					case errors.As(err, &rej) && rej.Err.Code == domain.ErrSoldOut.Code:
						soldOut++
					case errors.Is(err, domain.ErrContention):
						mu.Unlock()
						continue // never stored: a new key tries again
					default:
						t.Errorf("wave %d: ReserveSeats = %v", wave, err)
					}
					mu.Unlock()
					return
				}
			})
		}
		wg.Wait()
	}
	recs, err := f.store.ReadStream(ctx, domain.ShowStream(show.ID), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	seats := 0
	for _, r := range recs {
		if r.Type == "SeatsHeld" {
			seats++
		}
	}
	if held != 7 || seats != 7 || soldOut != 3*24-5 {
		t.Fatalf("held %d (stream %d SeatsHeld), sold out %d; want 7 (7), %d", held, seats, soldOut, 3*24-5)
	}
}

// TestPGBreakRepeatsOnAnotherProcess: repeats that reach a process which
// has not seen their intent (recordFirst) answer what the intent decided:
// a recorded rejection is replayed as that rejection; a show scheduled
// before its start passed replays (not a validation error); an expired
// intent's key starts a new intent (not 422) there.
func TestPGBreakRepeatsOnAnotherProcess(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	a := f.handler("pg-a", nil)
	b := f.handler("pg-b", nil)
	ctx := context.Background()

	// A rejection (sold out), replayed on B.
	full := f.scheduleShow(t, a, "Full", 1)
	if _, _, err := a.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: full.ID, Quantity: 1}); err != nil {
		t.Fatalf("hold of the only seat on A = %v", err)
	}
	rreq := f.req(OpReserveSeats)
	_, _, err := a.ReserveSeats(ctx, rreq, ReserveSeatsCommand{ShowID: full.ID, Quantity: 1})
	var rej *Rejection
	if !errors.As(err, &rej) || rej.Err.Code != domain.ErrSoldOut.Code {
		t.Fatalf("ReserveSeats of a full show on A = %v, want sold-out", err)
	}
	_, out, err := b.ReserveSeats(ctx, rreq, ReserveSeatsCommand{ShowID: full.ID, Quantity: 1})
	if !errors.As(err, &rej) || rej.Err.Code != domain.ErrSoldOut.Code || !rej.Replayed {
		t.Fatalf("its repeat on B = %+v, %v; want the replayed sold-out", out, err)
	}

	// A show that starts soon, repeated on B after its start passed.
	soon := f.scheduleShowIn(t, a, "Soon", 2*time.Hour, 3)
	f.clock.Advance(3 * time.Hour)
	again, sout, err := b.ScheduleShow(ctx, soon.req, soon.cmd)
	if err != nil || !sout.Replayed || again.ID != soon.show.ID {
		t.Fatalf("repeat on B after the start passed = %s, replayed %t, %v; want a replay of %s", again.ID, sout.Replayed, err, soon.show.ID)
	}

}

// TestPGBreakExpiredKeyReuseStartsANewIntent: once an intent's retention
// passed, its key starts a new intent, with another body too, on a process
// that has not seen it (recordFirst) and on one that has; the old body is
// then a different request (422).
func TestPGBreakExpiredKeyReuseStartsANewIntent(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	a := f.handler("pg-a", nil)
	b := f.handler("pg-b", nil)
	c := f.handler("pg-c", nil)
	ctx := context.Background()
	soon := f.scheduleShowIn(t, a, "Soon", 2*time.Hour, 3)
	now, sreq := soon.now, soon.req
	f.clock.Advance(28 * time.Hour)
	// An expired intent: the key starts anew on C, even with another body.
	f.clock.Advance(25 * time.Hour)
	s2 := ScheduleShowCommand{Name: "Later", StartsAt: now.Add(100 * time.Hour), Capacity: 4, Price: domain.Money{Amount: 1500, Currency: "EUR"}}
	fresh, fout, err := c.ScheduleShow(ctx, sreq, s2)
	if err != nil || fout.Replayed || fresh.ID == soon.show.ID {
		t.Fatalf("expired key reused on C = %s, replayed %t, %v; want a new show", fresh.ID, fout.Replayed, err)
	}
	// ... and its repeat on A (which saw the old intent) replays the new one.
	rep, rout, err := a.ScheduleShow(ctx, sreq, s2)
	if err != nil || !rout.Replayed || rep.ID != fresh.ID {
		t.Fatalf("repeat on A = %s, replayed %t, %v; want a replay of %s", rep.ID, rout.Replayed, err, fresh.ID)
	}
	// The old body on B is now a different request: 422.
	if _, _, err := b.ScheduleShow(ctx, sreq, soon.cmd); !errors.Is(err, domain.ErrKeyReused) {
		t.Fatalf("old body on B = %v, want key reused (422)", err)
	}

	// The same for a reservation, an order and a cancel: each key reused
	// after the retention, on a process that has not seen it, starts a
	// new intent whose deterministic events are its own.
	venue, _, err := a.ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "venue"},
		ScheduleShowCommand{Name: "Venue", StartsAt: now.Add(400 * time.Hour), Capacity: 5, Price: domain.Money{Amount: 1500, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	rreq := f.req(OpReserveSeats)
	oreq := f.req(OpPlaceOrder)
	oreq.Wait = 20 * time.Second
	creq := f.req(OpCancelOrder)
	var orders []string
	for round, h := range []*Handler{a, b, c} {
		res, rout, err := h.ReserveSeats(ctx, rreq, ReserveSeatsCommand{ShowID: venue.ID, Quantity: 1})
		if err != nil || rout.Replayed {
			t.Fatalf("round %d: ReserveSeats = %+v, %v; want a new reservation", round, rout, err)
		}
		o, err := h.PlaceOrder(ctx, oreq, PlaceOrderCommand{ReservationID: res.ID, PaymentToken: distinctToken(providersim.TokenVisa)})
		if err != nil || o.Replayed || o.Order.Status != domain.OrderStatusConfirmed {
			t.Fatalf("round %d: PlaceOrder = %+v, %v; want a new confirmed order", round, o, err)
		}
		cn, err := h.CancelOrder(ctx, creq, o.Order.ID)
		if err != nil || cn.Replayed {
			t.Fatalf("round %d: CancelOrder = %+v, %v; want a new cancel", round, cn, err)
		}
		ended := f.settle(h, o.Order.ID)
		if net, n := f.charges(o.Order.ID); ended.Status != domain.OrderStatusCancelled || net != 0 || n != 1 {
			t.Fatalf("round %d: order %s, net %d over %d charges; want cancelled, 0 over 1", round, ended.Status, net, n)
		}
		orders = append(orders, o.Order.ID)
		f.clock.Advance(25 * time.Hour)
	}
	if orders[0] == orders[1] || orders[1] == orders[2] {
		t.Fatalf("orders %v, want three", orders)
	}
}

// TestPGBreakReleaseByAnotherProcessIsSeenAtOnce: process A's hold batch
// trusts the snapshot its own last batch left (ownHoldTrust). A show of one
// seat, held on A; B expires the hold and releases the seat; A's next hold,
// at once, gets the seat (a sold-out refusal is never decided on the
// trusted snapshot), and no second seat is ever held.
func TestPGBreakReleaseByAnotherProcessIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	a := f.handler("pg-a", nil)
	b := f.handler("pg-b", nil)
	ctx := context.Background()
	show := f.scheduleShow(t, a, "One", 1)
	for round := range 4 {
		res, _, err := a.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
		if err != nil {
			t.Fatalf("round %d: hold on A = %v", round, err)
		}
		var rej *Rejection
		if _, _, err := a.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1}); !errors.As(err, &rej) || rej.Err.Code != domain.ErrSoldOut.Code {
			t.Fatalf("round %d: second hold on A = %v, want sold out", round, err)
		}
		f.clock.Advance(DefaultConfig().HoldFor + time.Minute)
		if err := b.ExpireReservation(ctx, res.ID); err != nil {
			t.Fatalf("round %d: ExpireReservation on B = %v", round, err)
		}
	}
	recs, err := f.store.ReadStream(ctx, domain.ShowStream(show.ID), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	held, released := 0, 0
	for _, r := range recs {
		switch r.Type {
		case "SeatsHeld":
			held++
		case "SeatsReleased":
			released++
		}
	}
	if held != 4 || released != 4 {
		t.Fatalf("show stream: %d SeatsHeld, %d SeatsReleased; want 4 and 4", held, released)
	}
}

// TestPGBreakDuplicateHoldsOnTwoProcesses: twelve reservation intents on a
// show of six seats, each sent three times at once across two processes.
// Every intent holds at most once (one SeatsHeld per intent in the show
// stream), the answers of one intent agree, and exactly six intents hold.
func TestPGBreakDuplicateHoldsOnTwoProcesses(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	hs := []*Handler{f.handler("pg-a", nil), f.handler("pg-b", nil)}
	ctx := context.Background()
	show := f.scheduleShow(t, hs[0], "Six", 6)
	type answer struct {
		id      string
		soldOut bool
	}
	const intents, copies = 12, 3
	answers := make([][]answer, intents)
	reqs := make([]Request, intents)
	var wg sync.WaitGroup
	for i := range intents {
		reqs[i] = f.req(OpReserveSeats)
		answers[i] = make([]answer, copies)
		for j := range copies {
			h := hs[(i+j)%2]
			wg.Go(func() {
				for attempt := 0; ; attempt++ {
					res, _, err := h.ReserveSeats(ctx, reqs[i], ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
					var rej *Rejection
					var inUse *InUseError
					switch {
					case err == nil:
						answers[i][j] = answer{id: res.ID}
					case errors.As(err, &rej) && rej.Err.Code == domain.ErrSoldOut.Code:
						answers[i][j] = answer{soldOut: true}
					case (errors.As(err, &inUse) || errors.Is(err, domain.ErrContention)) && attempt < 50:
						time.Sleep(50 * time.Millisecond) // a repeat after the answer's Retry-After
						continue
					default:
						t.Errorf("intent %d copy %d: ReserveSeats = %v", i, j, err)
					}
					return
				}
			})
		}
	}
	wg.Wait()
	holding := 0
	for i, as := range answers {
		for _, a := range as[1:] {
			if a != as[0] {
				t.Fatalf("intent %d: answers disagree: %+v", i, as)
			}
		}
		if as[0].id != "" {
			holding++
		}
	}
	recs, err := f.store.ReadStream(ctx, domain.ShowStream(show.ID), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	perIntent := map[string]int{}
	for _, r := range recs {
		if r.Type == "SeatsHeld" {
			m, _ := eventstore.DecodeMetadata(r.Metadata)
			perIntent[m.Intent]++
		}
	}
	for in, n := range perIntent {
		if n != 1 {
			t.Errorf("intent %s: %d SeatsHeld, want 1", in, n)
		}
	}
	if holding != 6 || len(perIntent) != 6 {
		t.Fatalf("%d intents hold (%d with SeatsHeld), want 6", holding, len(perIntent))
	}
}

// TestPGBreakHoldsRaceReleasesOnTwoProcesses: a show of three seats, full;
// process B expires the three holds while both processes hold seats at
// once, twelve requests. The seats held at any revision of the show stream
// never exceed three, and every successful hold is one SeatsHeld.
func TestPGBreakHoldsRaceReleasesOnTwoProcesses(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	hs := []*Handler{f.handler("pg-a", nil), f.handler("pg-b", nil)}
	ctx := context.Background()
	show := f.scheduleShow(t, hs[0], "Three", 3)
	var first []string
	for i := range 3 {
		res, _, err := hs[i%2].ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, res.ID)
	}
	f.clock.Advance(DefaultConfig().HoldFor + time.Minute)
	var mu sync.Mutex
	ok := 0
	var wg sync.WaitGroup
	for _, id := range first {
		wg.Go(func() {
			if err := hs[1].ExpireReservation(ctx, id); err != nil {
				t.Errorf("ExpireReservation(%s) = %v", id, err)
			}
		})
	}
	for i := range 12 {
		h := hs[i%2]
		wg.Go(func() {
			for {
				_, _, err := h.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
				var rej *Rejection
				switch {
				case err == nil:
					mu.Lock()
					ok++
					mu.Unlock()
				case errors.As(err, &rej) && rej.Err.Code == domain.ErrSoldOut.Code:
				case errors.Is(err, domain.ErrContention):
					continue // never stored: the next key tries again
				default:
					t.Errorf("ReserveSeats = %v", err)
				}
				return
			}
		})
	}
	wg.Wait()
	recs, err := f.store.ReadStream(ctx, domain.ShowStream(show.ID), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	held, peak, holds := 0, 0, 0
	for _, r := range recs {
		switch r.Type {
		case "SeatsHeld":
			held++
			holds++
		case "SeatsReleased":
			held--
		}
		peak = max(peak, held)
	}
	if peak > 3 || holds != 3+ok || ok > 3 {
		t.Fatalf("show stream: peak %d seats held, %d SeatsHeld for %d successful holds after the first 3; want peak <= 3, %d", peak, holds, ok, 3+ok)
	}
	t.Logf("%d of 12 holds succeeded while the releases raced them", ok)
}

// TestPGBreakKeptIntentReusedByAShorterRetention: on PostgreSQL, a key A
// keeps (young by A's 24 h retention) is truncated and recorded again by B,
// whose retention is 2 h (a rolling change of BOOKING_INTENT_RETENTION):
// the new intent continues the stream's revisions, and A's repeat of the
// new body replays B's reservation, as a whole read answers, instead of
// the old intent's rejection (see loadKept).
func TestPGBreakKeptIntentReusedByAShorterRetention(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	a := f.handler("pg-a", nil)
	b := f.handler("pg-b", func(c *Config) { c.IntentRetention = 2 * time.Hour })
	ctx := context.Background()
	show := f.scheduleShow(t, a, "Kept", 4)
	req := f.req(OpReserveSeats)
	for i := range 2 { // the repeat reads the intent, and A keeps it
		var rej *Rejection
		if _, _, err := a.ReserveSeats(ctx, req, ReserveSeatsCommand{ShowID: show.ID, Quantity: 10}); !errors.As(err, &rej) {
			t.Fatalf("reserve 10 of 4 seats (%d) = %v, want a rejection", i+1, err)
		}
	}
	f.clock.Advance(3 * time.Hour)
	one := ReserveSeatsCommand{ShowID: show.ID, Quantity: 1}
	res, out, err := b.ReserveSeats(ctx, req, one)
	if err != nil || out.Replayed {
		t.Fatalf("key reused on B past its retention = %+v, %v; want a new reservation", out, err)
	}
	r, out, err := a.ReserveSeats(ctx, req, one)
	if err != nil || !out.Replayed || r.ID != res.ID {
		t.Fatalf("repeat on A of B's request = %s, replayed %t, %v; want a replay of %s", r.ID, out.Replayed, err, res.ID)
	}
}

// scheduleShow schedules a show named name of capacity seats at 15.00 EUR,
// starting 72 h from the database clock's now, on h, and fails t if it is
// refused.
func (f *pgFix) scheduleShow(t *testing.T, h *Handler, name string, capacity int) domain.Show {
	t.Helper()
	return f.scheduleShowIn(t, h, name, 72*time.Hour, capacity).show
}

// scheduledShow is a show the fixture scheduled, with the request and the
// command that scheduled it (so that a test can repeat them) and the
// database clock's now its start was counted from.
type scheduledShow struct {
	show domain.Show
	req  Request
	cmd  ScheduleShowCommand
	now  time.Time
}

// scheduleShowIn schedules on h, as admin under a fresh key, a show named
// name of capacity seats at 15.00 EUR starting in from the database
// clock's now, and fails t if it is refused.
func (f *pgFix) scheduleShowIn(t *testing.T, h *Handler, name string, in time.Duration, capacity int) scheduledShow {
	t.Helper()
	ctx := context.Background()
	now, err := f.clock.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := f.req(OpScheduleShow)
	req.Actor = "admin"
	cmd := ScheduleShowCommand{Name: name, StartsAt: now.Add(in), Capacity: capacity, Price: domain.Money{Amount: 1500, Currency: "EUR"}}
	show, _, err := h.ScheduleShow(ctx, req, cmd)
	if err != nil {
		t.Fatalf("ScheduleShow %s: %v", name, err)
	}
	return scheduledShow{show: show, req: req, cmd: cmd, now: now}
}

// TestPGOrderAfterTheShowStartedIsRefusedAndRecordsNothing: a reservation
// still held when its show begins cannot be ordered: 409 show-started by
// the database clock, no intent recorded, nothing charged, and the
// repeat is refused the same.
func TestPGOrderAfterTheShowStartedIsRefusedAndRecordsNothing(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	a := f.handler("pg-a", nil)
	ctx := context.Background()
	show := f.scheduleShowIn(t, a, "Soon", 5*time.Minute, 2).show
	res, _, err := a.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(6 * time.Minute) // the show began; the hold (DefaultConfig().HoldFor) runs on
	req := f.req(OpPlaceOrder)
	cmd := PlaceOrderCommand{ReservationID: res.ID, PaymentToken: distinctToken(providersim.TokenVisa)}
	for try := range 2 {
		if _, err := a.PlaceOrder(ctx, req, cmd); !errors.Is(err, domain.ErrShowStarted) {
			t.Fatalf("PlaceOrder (try %d) after the show began = %v, want show-started", try+1, err)
		}
	}
	intent := IntentStream(req.Actor, req.Operation, req.Key)
	if _, err := f.store.ReadStream(ctx, intent, 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Errorf("intent stream %s: %v, want not found (nothing recorded)", intent, err)
	}
	if _, err := f.store.ReadStream(ctx, domain.ClaimStream(res.ID), 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Errorf("claim stream of %s: %v, want not found", res.ID, err)
	}
	if n := len(f.sim.Charges()); n != 0 {
		t.Errorf("simulator: %d charges, want 0", n)
	}
}
