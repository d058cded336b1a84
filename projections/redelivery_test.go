package projections

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// envelopes encodes events as revisions 0.. of stream, one second apart.
func envelopes(t *testing.T, stream string, events ...domain.Event) []envelope {
	t.Helper()
	out := make([]envelope, len(events))
	for i, e := range events {
		d, err := eventstore.Encode(newID(), e, eventstore.Metadata{OccurredAt: epoch.Add(time.Duration(i) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		r := eventstore.RecordedEvent{Stream: stream, Type: d.Type, Revision: uint64(i), Data: d.Data, Metadata: d.Metadata,
			Position: eventstore.Position{Commit: uint64(100 + i), Prepare: uint64(i)}}
		out[i] = newEnvelope(&r)
	}
	return out
}

// scratch binds p to fresh empty copies of its tables.
func scratch(t *testing.T, db *testDB, p *Projection, tag string) *bound {
	t.Helper()
	rename := map[string]string{}
	for _, table := range p.tables {
		name := fmt.Sprintf("%s_%s", table, tag)
		if _, err := db.pool.Exec(context.Background(), fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)", name, table)); err != nil {
			t.Fatal(err)
		}
		rename[table] = name
	}
	return bind(p, rename)
}

// deliver applies each delivery (a list of revisions of envs) in its own
// transaction, in order.
func deliver(t *testing.T, db *testDB, b *bound, envs []envelope, deliveries ...[]int) {
	t.Helper()
	for _, d := range deliveries {
		batch := make([]envelope, len(d))
		for i, rev := range d {
			batch[i] = envs[rev]
		}
		if _, err := applyBatch(context.Background(), db.pool, []*bound{b}, batch, checkpoint{}, applyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func rows(t *testing.T, db *testDB, b *bound) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, table := range b.p.tables {
		r, err := db.pool.Query(context.Background(), `SELECT to_jsonb(t)::text FROM `+pgx.Identifier{b.rename[table]}.Sanitize()+` t ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		out[table] = s
	}
	return out
}

// TestRedeliveryAndOutOfOrder delivers the events of one stream twice and
// out of order: rows reflect the highest revision applied only, events at
// or below it are no-ops (never an overwrite, never counted twice).
func TestRedeliveryAndOutOfOrder(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	orderID, resID, showID := newID(), newID(), newID()
	amount := domain.Money{Amount: 9000, Currency: "EUR"}
	start := func(n int) domain.PaymentAttemptStarted {
		return domain.PaymentAttemptStarted{OrderID: orderID, Attempt: n, LeaseUntil: epoch, Amount: amount,
			Private: &domain.AttemptPrivate{RequestBody: "secret-body"}}
	}
	order := envelopes(t, domain.OrderStream(orderID),
		domain.OrderPlaced{OrderID: orderID, ReservationID: resID, ShowID: showID, Actor: "alice", Intent: "intent-x", Quantity: 2,
			Amount: amount, PaymentDeadline: epoch.Add(time.Hour), Private: &domain.OrderPrivate{PaymentToken: "tok_secret"}},
		start(1),
		domain.PaymentOutcomeUnknown{OrderID: orderID, Attempt: 1, Reason: "timeout"},
		start(1),
		domain.PaymentSucceeded{OrderID: orderID, Attempt: 1, ChargeID: "ch_1", Amount: amount},
		domain.OrderConfirmed{OrderID: orderID, Tickets: []domain.Ticket{{ID: "t1"}, {ID: "t2"}}},
		domain.RefundRequested{OrderID: orderID, ChargeID: "ch_1", Amount: amount, Key: "refund-ch_1", Reason: "cancelled"},
		domain.OrderCancelled{OrderID: orderID, VoidedTickets: []string{"t1", "t2"}},
	)
	show := envelopes(t, domain.ShowStream(showID),
		domain.ShowScheduled{ShowID: showID, Name: "S", StartsAt: epoch.Add(time.Hour), Capacity: 10, Price: amount},
		domain.SeatsHeld{ShowID: showID, ReservationID: resID, Quantity: 2},
		domain.SeatsHeld{ShowID: showID, ReservationID: newID(), Quantity: 3},
		domain.SeatsReleased{ShowID: showID, ReservationID: resID, Quantity: 2},
		domain.SeatsHeld{ShowID: showID, ReservationID: newID(), Quantity: 1},
	)
	res := envelopes(t, domain.ReservationStream(resID),
		domain.ReservationHeld{ReservationID: resID, ShowID: showID, Actor: "alice", Quantity: 2, Amount: amount},
		domain.ReservationOrdered{ReservationID: resID, OrderID: orderID},
		domain.ReservationReleased{ReservationID: resID, OrderID: orderID, Reason: "cancelled"},
	)
	all := func(envs []envelope) []int {
		out := make([]int, len(envs))
		for i := range out {
			out[i] = i
		}
		return out
	}
	reversed := func(envs []envelope) []int {
		out := all(envs)
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return out
	}
	cases := []struct {
		name       string
		p          *Projection
		envs       []envelope
		deliveries [][]int
		want       [][]int // the in-order deliveries with the same result
	}{
		{"orders: twice, then reversed", Orders(), order, [][]int{all(order), all(order), reversed(order), {3, 4}}, [][]int{all(order)}},
		{"orders: out of order", Orders(), order, [][]int{{0}, {4}, {1, 2, 3}, {6}, {5}, {7}}, [][]int{{0, 4, 6, 7}}},
		{"orders: one batch with duplicates", Orders(), order, [][]int{{0, 1, 1, 2, 0, 3, 2}}, [][]int{{0, 1, 2, 3}}},
		{"shows: twice, then reversed", Shows(), show, [][]int{all(show), all(show), reversed(show)}, [][]int{all(show)}},
		{"shows: out of order", Shows(), show, [][]int{{0, 2}, {1}, {4}, {3}}, [][]int{{0, 2, 4}}},
		{"shows: reservation ordered twice counts once", Shows(), res, [][]int{{0, 1}, {0, 1}, {1}}, [][]int{{0, 1}}},
		{"shows: reservation out of order", Shows(), res, [][]int{{0}, {2}, {1}, {1, 2}}, [][]int{{0, 2}}},
		{"reservations: twice, then reversed", Reservations(), res, [][]int{all(res), all(res), reversed(res)}, [][]int{all(res)}},
		{"intents: order targets twice", Intents(0), order, [][]int{all(order), reversed(order), all(order)}, [][]int{all(order)}},
	}
	for i, c := range cases {
		got := scratch(t, db, c.p, fmt.Sprintf("got%d", i))
		want := scratch(t, db, c.p, fmt.Sprintf("want%d", i))
		deliver(t, db, got, c.envs, c.deliveries...)
		deliver(t, db, want, c.envs, c.want...)
		if diff := cmp.Diff(rows(t, db, want), rows(t, db, got)); diff != "" {
			t.Errorf("%s: rows differ from the in-order deliveries %v (-want +got):\n%s", c.name, c.want, diff)
		}
	}
	// And the in-order rows are right.
	b := scratch(t, db, Orders(), "check")
	deliver(t, db, b, order, all(order))
	var status, pay, charge string
	var rev int64
	var tickets int
	err := db.pool.QueryRow(context.Background(), `SELECT status, payment_status, charge_id, revision, ticket_count FROM rm_orders_check`).
		Scan(&status, &pay, &charge, &rev, &tickets)
	if err != nil {
		t.Fatal(err)
	}
	if status != "cancelled" || pay != "refund_pending" || charge != "ch_1" || rev != 7 || tickets != 2 {
		t.Errorf("order row = %s %s %s rev %d tickets %d, want cancelled refund_pending ch_1 rev 7 tickets 2", status, pay, charge, rev, tickets)
	}
	sb := scratch(t, db, Shows(), "check")
	deliver(t, db, sb, show, all(show), all(show))
	deliver(t, db, sb, res, all(res)[:2], all(res)[:2])
	var taken, holds, ordered int
	if err := db.pool.QueryRow(context.Background(), `SELECT s.taken, s.holds, ss.ordered FROM rm_shows_check s JOIN rm_show_sales_check ss ON ss.show_id = s.id`).
		Scan(&taken, &holds, &ordered); err != nil {
		t.Fatal(err)
	}
	if taken != 4 || holds != 2 || ordered != 2 {
		t.Errorf("show row = taken %d holds %d ordered %d, want 4 2 2", taken, holds, ordered)
	}
}

func TestOccurredAt(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	enc, _ := eventstore.Encode(newID(), domain.OrderCancelled{}, eventstore.Metadata{Actor: `x"occurred_at":"1999`, OccurredAt: at})
	cases := []struct {
		meta string
		want time.Time
		ok   bool
	}{
		{string(enc.Metadata), at, true},
		{`{"occurred_at": "2026-03-01T12:00:00Z"}`, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), true},
		{`{"occurred_at":"0001-01-01T00:00:00Z"}`, time.Time{}, false},
		{`{"actor":"a"}`, time.Time{}, false},
		{``, time.Time{}, false},
		{`not json`, time.Time{}, false},
	}
	for _, c := range cases {
		got, ok := occurredAt([]byte(c.meta))
		if !got.Equal(c.want) || ok != c.ok {
			t.Errorf("occurredAt(%s) = %v, %v; want %v, %v", c.meta, got, ok, c.want, c.ok)
		}
	}
}
