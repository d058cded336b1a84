package projections

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
)

// TestReaderPages pages through shows and an actor's orders: every row
// once, in order, capacity = available + held + ordered, and the position is
// the projection's checkpoint.
func TestReaderPages(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx := context.Background()
	workload{shows: 5, perShow: 30, workers: 5, seed: 8}.appendTo(t, ctx, db.fast)
	waitHorizon(t, ctx, db)
	if _, err := Rebuild(ctx, db.pool, db.store, All(24*time.Hour), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	r := NewReader(db.pool)
	m := mustModel(t, ctx, db)

	var (
		after *ShowKey
		seen  = map[string]bool{}
		prev  *Show
	)
	for page := 0; ; page++ {
		p, err := r.Shows(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		cp, _ := r.Checkpoint(ctx, NameShows)
		if p.Position != cp || p.Position.IsZero() {
			t.Errorf("Shows position = %s, want the checkpoint %s", p.Position, cp)
		}
		for _, s := range p.Items {
			if seen[s.ID] {
				t.Errorf("show %s listed twice", s.ID)
			}
			seen[s.ID] = true
			if s.Available+s.Held+s.Ordered != s.Capacity || s.Available != m.shows[s.ID].Available() {
				t.Errorf("show %s: available %d + held %d + ordered %d, capacity %d (store: available %d)", s.ID, s.Available, s.Held, s.Ordered,
					s.Capacity, m.shows[s.ID].Available())
			}
			if prev != nil && (s.StartsAt.Before(prev.StartsAt) || (s.StartsAt.Equal(prev.StartsAt) && s.ID <= prev.ID)) {
				t.Errorf("show %s listed after %s", s.ID, prev.ID)
			}
			prev = &s
		}
		if p.Next == nil {
			break
		}
		if len(p.Items) != 2 {
			t.Errorf("page %d has %d shows and a next key", page, len(p.Items))
		}
		after = p.Next
	}
	if len(seen) != len(m.shows) {
		t.Errorf("listed %d shows, the store has %d", len(seen), len(m.shows))
	}

	want := 0
	for _, o := range m.orders {
		if o.Actor == "actor-3" {
			want++
		}
	}
	var (
		okey *OrderKey
		got  = map[string]bool{}
	)
	for {
		p, err := r.Orders(ctx, "actor-3", okey, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Items {
			if got[o.ID] || o.Actor != "actor-3" || m.orders[o.ID].Status != o.Status {
				t.Errorf("order %s: listed twice, another actor's, or status %s (store %s)", o.ID, o.Status, m.orders[o.ID].Status)
			}
			got[o.ID] = true
		}
		if p.Next == nil {
			break
		}
		okey = p.Next
	}
	if len(got) != want || want == 0 {
		t.Errorf("listed %d orders of actor-3, the store has %d", len(got), want)
	}
	if _, _, err := r.PendingIntents(ctx, 10); err != nil {
		t.Errorf("PendingIntents: %v", err)
	}
	unknown, _, err := r.UnknownOutcomes(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	wantUnknown := 0
	for _, o := range m.orders {
		if last := o.LastAttempt(); last != nil && last.Outcome == "unknown" {
			wantUnknown++
		}
	}
	if len(unknown) != wantUnknown || wantUnknown == 0 {
		t.Errorf("UnknownOutcomes = %d orders, the store has %d", len(unknown), wantUnknown)
	}
	backlog, pos, err := r.RefundBacklog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wantBacklog RefundBacklog
	for _, o := range m.orders {
		wantBacklog.Pending += len(o.PendingRefunds())
		wantBacklog.InReview += refusedRefunds(o)
		if o.Status == domain.OrderStatusNeedsReview {
			wantBacklog.NeedsReview++
		}
	}
	if backlog.Pending != wantBacklog.Pending || backlog.InReview != wantBacklog.InReview || backlog.NeedsReview != wantBacklog.NeedsReview ||
		wantBacklog.Pending == 0 || wantBacklog.InReview == 0 || backlog.OldestPending.IsZero() {
		t.Errorf("RefundBacklog = %+v, the store has %d pending, %d refused, %d orders in review (each > 0, and an oldest time)",
			backlog, wantBacklog.Pending, wantBacklog.InReview, wantBacklog.NeedsReview)
	}
	if cp, _ := r.Checkpoint(ctx, NameOrders); pos != cp {
		t.Errorf("RefundBacklog position = %s, want the orders checkpoint %s", pos, cp)
	}
}

// TestRefundBacklog: the backlog counts refunds still to send (with the
// request time of the oldest, from event metadata), refunds the provider
// refused, and orders in review; a refund made after its refusal leaves both.
func TestRefundBacklog(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx := context.Background()
	a := &appender{tb: t, store: db.store, clock: &clock{}}
	amount := domain.Money{Amount: 3000, Currency: "EUR"}
	t0 := epoch.Add(time.Hour)
	order := func(at time.Time, evs ...domain.Event) string {
		id := newID()
		claim := domain.OrderClaimed{ReservationID: newID(), OrderID: id, ShowID: newID(), Actor: "actor-1", Intent: "intent-x", Quantity: 1, Amount: amount}
		a.addAt(ctx, domain.OrderStream(id), at, domain.PlacedFrom(claim, at.Add(15*time.Minute), nil))
		return id
	}
	requested := func(id, charge string) domain.RefundRequested {
		return domain.RefundRequested{OrderID: id, ChargeID: charge, Amount: amount, Key: domain.RefundKey(charge), Reason: domain.RefundCancelled}
	}
	refused := func(id, charge string) []domain.Event {
		return []domain.Event{domain.RefundRefused{OrderID: id, ChargeID: charge, Code: "resource_missing", Reason: "No such charge."},
			domain.OrderNeedsReview{OrderID: id, Reason: "unknown charge"}}
	}
	// Still due since t0+2m and t0+3m (two charges of one order), and since t0+5m.
	twice := order(t0)
	a.addAt(ctx, domain.OrderStream(twice), t0.Add(2*time.Minute), requested(twice, "ch_a1"))
	a.addAt(ctx, domain.OrderStream(twice), t0.Add(3*time.Minute), requested(twice, "ch_a2"))
	later := order(t0)
	a.addAt(ctx, domain.OrderStream(later), t0.Add(5*time.Minute), requested(later, "ch_b"))
	// Requested first (t0+1m) and refunded: not due.
	done := order(t0)
	a.addAt(ctx, domain.OrderStream(done), t0.Add(time.Minute), requested(done, "ch_c"),
		domain.RefundSucceeded{OrderID: done, ChargeID: "ch_c", RefundID: "re_c", Amount: amount})
	// Refused: in review, not due.
	gone := order(t0)
	a.addAt(ctx, domain.OrderStream(gone), t0, requested(gone, "ch_d"))
	a.addAt(ctx, domain.OrderStream(gone), t0.Add(time.Minute), refused(gone, "ch_d")...)
	// Refused, then made after all: in review, neither due nor refused.
	late := order(t0)
	a.addAt(ctx, domain.OrderStream(late), t0, requested(late, "ch_e"))
	a.addAt(ctx, domain.OrderStream(late), t0.Add(time.Minute), refused(late, "ch_e")...)
	a.addAt(ctx, domain.OrderStream(late), t0.Add(2*time.Minute), domain.RefundSucceeded{OrderID: late, ChargeID: "ch_e", RefundID: "re_e", Amount: amount})
	waitHorizon(t, ctx, db)

	r := NewReader(db.pool)
	want := RefundBacklog{Pending: 3, OldestPending: t0.Add(2 * time.Minute), InReview: 1, NeedsReview: 2}
	check := func(when string) {
		t.Helper()
		got, _, err := r.RefundBacklog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("RefundBacklog() %s = %+v, want %+v", when, got, want)
		}
	}
	if _, err := Rebuild(ctx, db.pool, db.store, All(24*time.Hour), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	check("after a rebuild")
	// The first of the two charges is refunded: the oldest due is now t0+3m.
	a.addAt(ctx, domain.OrderStream(twice), t0.Add(6*time.Minute), domain.RefundSucceeded{OrderID: twice, ChargeID: "ch_a1", RefundID: "re_a1", Amount: amount})
	waitHorizon(t, ctx, db)
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	orders := Orders()
	go func() { ran <- NewProjector(db.pool, orders).Run(rctx, db.store) }()
	waitCaughtUp(t, ctx, db, []*Projection{orders})
	stop()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("orders projector: %v", err)
	}
	want.Pending, want.OldestPending = 2, t0.Add(3*time.Minute)
	check("after the live projector applied a refund")
}

// TestOrdersPaymentStatusOfRefunds: an order's payment status in the read
// model follows its paying charge's refund — refund_pending while the
// refund is still sent, refunded once recorded, and succeeded once the
// provider refused it (the charge stands; the order is in needs_review).
func TestOrdersPaymentStatusOfRefunds(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx := context.Background()
	a := &appender{tb: t, store: db.store, clock: &clock{}}
	amount := domain.Money{Amount: 3000, Currency: "EUR"}
	t0 := epoch.Add(time.Hour)
	actor := "actor-" + newID()
	// paid places an order of actor paid by charge, cancelled with its
	// refund requested, then the events then makes for the order's id.
	paid := func(charge string, then func(id string) []domain.Event) string {
		id := newID()
		claim := domain.OrderClaimed{ReservationID: newID(), OrderID: id, ShowID: newID(), Actor: actor, Intent: "intent-x", Quantity: 1, Amount: amount}
		a.addAt(ctx, domain.OrderStream(id), t0, domain.PlacedFrom(claim, t0.Add(15*time.Minute), nil),
			domain.PaymentSucceeded{OrderID: id, Attempt: 1, ChargeID: charge, Amount: amount},
			domain.RefundRequested{OrderID: id, ChargeID: charge, Amount: amount, Key: domain.RefundKey(charge), Reason: domain.RefundCancelled},
			domain.OrderCancelled{OrderID: id})
		if then != nil {
			a.addAt(ctx, domain.OrderStream(id), t0.Add(time.Minute), then(id)...)
		}
		return id
	}
	want := map[string]string{
		paid("ch_p", nil): "refund_pending",
		paid("ch_s", func(id string) []domain.Event {
			return []domain.Event{domain.RefundSucceeded{OrderID: id, ChargeID: "ch_s", RefundID: "re_s", Amount: amount}}
		}): "refunded",
		paid("ch_r", func(id string) []domain.Event {
			return []domain.Event{domain.RefundRefused{OrderID: id, ChargeID: "ch_r", Code: "resource_missing", Reason: "No such charge."},
				domain.OrderNeedsReview{OrderID: id, Reason: "the provider does not know charge ch_r"}}
		}): "succeeded",
	}
	waitHorizon(t, ctx, db)
	if _, err := Rebuild(ctx, db.pool, db.store, All(24*time.Hour), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	page, err := NewReader(db.pool).Orders(ctx, actor, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != len(want) {
		t.Fatalf("Orders(%s) = %d orders, want %d", actor, len(page.Items), len(want))
	}
	for _, o := range page.Items {
		if o.PaymentStatus != want[o.ID] {
			t.Errorf("order %s (status %s): payment status %s, want %s", o.ID, o.Status, o.PaymentStatus, want[o.ID])
		}
	}
}
