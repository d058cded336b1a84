package projections

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// testAppendBound bounds each append of the tests' event store: far above
// the production default (5 s), because the tests append bursts on machines
// that may be fully busy.
const testAppendBound = time.Minute

// testDB is a fresh migrated database with a pool and an event store.
type testDB struct {
	url   string
	pool  *pgxpool.Pool
	store *pgstore.Store
	// fast is a pool with synchronous_commit off, for generating logs.
	fast *pgstore.Store
}

func mustDB(tb testing.TB) *testDB {
	tb.Helper()
	url := pgtest.NewDatabase(tb)
	pool := pgtest.NewPool(tb, url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 40
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	fast, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(fast.Close)
	return &testDB{url: url, pool: pool, store: pgstore.New(pool, pgstore.WithPollInterval(time.Millisecond, 20*time.Millisecond), pgstore.WithAppendTimeout(testAppendBound)),
		fast: pgstore.New(fast, pgstore.WithAppendTimeout(testAppendBound))}
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// clock is a deterministic event clock: every call is a millisecond later.
type clock struct{ n atomic.Int64 }

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func (c *clock) now() time.Time { return epoch.Add(time.Duration(c.n.Add(1)) * time.Millisecond) }

// appender appends domain events with metadata to a store.
type appender struct {
	tb    testing.TB
	store eventstore.Store
	clock *clock
	n     atomic.Int64 // events appended
}

// add appends events to stream (expected revision Any) with a fresh id each.
func (a *appender) add(ctx context.Context, stream string, events ...domain.Event) {
	a.addAt(ctx, stream, a.clock.now(), events...)
}

func (a *appender) addAt(ctx context.Context, stream string, at time.Time, events ...domain.Event) {
	a.tb.Helper()
	data := make([]eventstore.EventData, len(events))
	for i, e := range events {
		d, err := eventstore.Encode(newID(), e, eventstore.Metadata{Actor: "gen", OccurredAt: at, SchemaVersion: domain.SchemaVersion})
		if err != nil {
			a.tb.Fatal(err)
		}
		data[i] = d
	}
	if _, err := a.store.Append(ctx, stream, eventstore.Any(), data...); err != nil {
		if ctx.Err() != nil {
			return
		}
		a.tb.Errorf("append %s: %v", stream, err)
		return
	}
	a.n.Add(int64(len(events)))
}

// workload generates a realistic mix: shows, holds, expiries, orders with
// successful, declined, unknown-then-resolved, still-unknown and cancelled
// payments, refunds, intents (some rejected, some taken over).
type workload struct {
	shows   int
	perShow int // reservations per show
	workers int
	seed    uint64
}

// run appends the workload through a, shows spread over workers goroutines
// (each show's stream is appended by one goroutine). It returns when done
// or ctx is done.
// appendTo runs w against store with a new appender and a fresh clock, and
// returns the appender.
func (w workload) appendTo(tb testing.TB, ctx context.Context, store eventstore.Store) *appender {
	a := &appender{tb: tb, store: store, clock: &clock{}}
	w.run(ctx, a)
	return a
}

func (w workload) run(ctx context.Context, a *appender) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for k := range max(w.workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.seed, uint64(k)))
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= w.shows {
					return
				}
				w.show(ctx, a, rng)
			}
		}()
	}
	wg.Wait()
}

func intentOf(actor, op string) domain.IntentRecorded {
	return domain.IntentRecorded{Actor: actor, Operation: op, KeySHA256: "k", Fingerprint: "fp", CanonicalVersion: 1,
		Command: map[string]any{"x": 1}, TargetID: newID(), Executor: "ex-1", LeaseUntil: epoch.Add(time.Hour),
		Private: map[string]any{"payment_token": "tok_secret"}}
}

func (w workload) show(ctx context.Context, a *appender, rng *rand.Rand) {
	showID := newID()
	show := domain.ShowStream(showID)
	price := domain.Money{Amount: 4500, Currency: "EUR"}
	in := intentOf("admin", opScheduleShow)
	in.TargetID = showID
	a.add(ctx, "intent-"+newID(), in)
	a.add(ctx, show, domain.ShowScheduled{ShowID: showID, Name: fmt.Sprintf("Show %s", showID[:8]),
		StartsAt: epoch.Add(30 * 24 * time.Hour), Capacity: w.perShow * 4, Price: price})
	for range w.perShow {
		if ctx.Err() != nil {
			return
		}
		actor := fmt.Sprintf("actor-%d", rng.IntN(20))
		resID := newID()
		q := 1 + rng.IntN(4)
		amount := price.Times(q)
		rin := intentOf(actor, opReserveSeats)
		rin.TargetID = resID
		rintent := "intent-" + newID()
		a.add(ctx, rintent, rin)
		held := domain.SeatsHeld{ShowID: showID, ReservationID: resID, Actor: actor, Intent: rintent, Quantity: q, Amount: amount,
			ExpiresAt: epoch.Add(10 * time.Minute)}
		a.add(ctx, show, held)
		a.add(ctx, domain.ReservationStream(resID), domain.HeldFrom(held))
		if rng.IntN(10) == 0 { // expiry
			a.add(ctx, domain.ClaimStream(resID), domain.ExpiryClaimed{ReservationID: resID, ShowID: showID, Quantity: q})
			a.add(ctx, show, domain.SeatsReleased{ShowID: showID, ReservationID: resID, Quantity: q, Reason: domain.ReleaseExpired})
			a.add(ctx, domain.ReservationStream(resID), domain.ReservationExpired{ReservationID: resID})
			continue
		}
		orderID := newID()
		oin := intentOf(actor, opPlaceOrder)
		oin.TargetID = orderID
		ointent := "intent-" + newID()
		a.add(ctx, ointent, oin)
		if rng.IntN(20) == 0 { // a second key for the same reservation: rejected
			dup := intentOf(actor, opPlaceOrder)
			a.add(ctx, "intent-"+newID(), dup, domain.IntentRejected{Status: 409, Kind: "conflict", Code: "reservation-already-ordered", ResourceID: orderID})
		}
		claim := domain.OrderClaimed{ReservationID: resID, OrderID: orderID, ShowID: showID, Actor: actor, Intent: ointent, Quantity: q, Amount: amount}
		a.add(ctx, domain.ClaimStream(resID), claim)
		order := domain.OrderStream(orderID)
		placed := domain.PlacedFrom(claim, epoch.Add(15*time.Minute), nil)
		placed.Private = &domain.OrderPrivate{PaymentToken: "tok_secret"} // schema version 1: the token in clear
		a.add(ctx, order, placed)
		a.add(ctx, domain.ReservationStream(resID), domain.ReservationOrdered{ReservationID: resID, OrderID: orderID})
		start := func(n int) domain.PaymentAttemptStarted {
			return domain.PaymentAttemptStarted{OrderID: orderID, Attempt: n, ProviderKey: fmt.Sprintf("order-%s-%d", orderID, n),
				Owner: "ex-1", LeaseUntil: epoch.Add(time.Minute), Amount: amount, StartedAt: epoch, RequestSHA256: "abc",
				Private: &domain.AttemptPrivate{RequestBody: `{"token":"tok_secret"}`}}
		}
		charge := "ch_" + orderID[:8]
		tickets := make([]domain.Ticket, q)
		for i := range tickets {
			tickets[i] = domain.Ticket{ID: newID()}
		}
		release := func(reason string) {
			a.add(ctx, show, domain.SeatsReleased{ShowID: showID, ReservationID: resID, Quantity: q, Reason: reason})
			a.add(ctx, domain.ReservationStream(resID), domain.ReservationReleased{ReservationID: resID, OrderID: orderID, Reason: reason})
		}
		switch r := rng.IntN(100); {
		case r < 60: // paid (and, 1 in 2, its key deleted since)
			a.add(ctx, order, start(1), domain.PaymentSucceeded{OrderID: orderID, Attempt: 1, ChargeID: charge, Amount: amount},
				domain.OrderConfirmed{OrderID: orderID, Tickets: tickets})
			if rng.IntN(2) == 0 {
				a.add(ctx, order, domain.PaymentSecretsShredded{OrderID: orderID, ShreddedAt: epoch.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)})
			}
		case r < 72: // declined
			a.add(ctx, order, start(1), domain.PaymentFailed{OrderID: orderID, Attempt: 1, ChargeID: charge, Code: "card_declined", Reason: "declined"},
				domain.OrderFailed{OrderID: orderID, Reason: domain.FailPaymentDeclined})
			release(domain.ReleasePaymentFailed)
		case r < 82: // unknown, taken over, then paid (a webhook)
			a.add(ctx, order, start(1), domain.PaymentOutcomeUnknown{OrderID: orderID, Attempt: 1, Reason: "timeout"})
			a.add(ctx, ointent, domain.IntentResumed{Executor: "ex-2", LeaseUntil: epoch.Add(2 * time.Hour)})
			a.add(ctx, order, start(1), domain.PaymentSucceeded{OrderID: orderID, Attempt: 1, ChargeID: charge, Amount: amount},
				domain.OrderConfirmed{OrderID: orderID, Tickets: tickets})
		case r < 87: // unknown, a second attempt declined, then cancel requested
			a.add(ctx, order, start(1), domain.PaymentOutcomeUnknown{OrderID: orderID, Attempt: 1, Reason: "timeout"}, start(2))
			a.add(ctx, order, domain.OrderCancelRequested{OrderID: orderID, Actor: actor})
		case r < 90: // still unknown
			a.add(ctx, order, start(1), domain.PaymentOutcomeUnknown{OrderID: orderID, Attempt: 1, Reason: "connection reset"})
		case r < 92: // unknown, then waiting for the customer's action (half of them then authenticated and paid)
			a.add(ctx, order, start(1), domain.PaymentOutcomeUnknown{OrderID: orderID, Attempt: 1, Reason: "timeout"},
				domain.PaymentActionRequired{OrderID: orderID, Attempt: 1, PaymentID: charge, Private: &domain.ActionPrivate{SealedAction: []byte("sealed")}})
			if rng.IntN(2) == 0 {
				a.add(ctx, order, domain.PaymentSucceeded{OrderID: orderID, Attempt: 1, ChargeID: charge, Amount: amount},
					domain.OrderConfirmed{OrderID: orderID, Tickets: tickets})
			}
		case r < 97: // paid, then cancelled and refunded (or, 1 in 3, the provider no longer knows the charge: in review)
			a.add(ctx, order, start(1), domain.PaymentSucceeded{OrderID: orderID, Attempt: 1, ChargeID: charge, Amount: amount},
				domain.OrderConfirmed{OrderID: orderID, Tickets: tickets})
			cin := intentOf(actor, opCancelOrder)
			cin.Command = map[string]any{"order_id": orderID}
			a.add(ctx, "intent-"+newID(), cin)
			a.add(ctx, order, domain.RefundRequested{OrderID: orderID, ChargeID: charge, Amount: amount, Key: domain.RefundKey(charge), Reason: "cancelled"},
				domain.OrderCancelled{OrderID: orderID, VoidedTickets: []string{tickets[0].ID}})
			release(domain.ReleaseCancelled)
			if rng.IntN(3) == 0 {
				a.add(ctx, order, domain.RefundRefused{OrderID: orderID, ChargeID: charge, Code: "resource_missing", Reason: "No such charge."},
					domain.OrderNeedsReview{OrderID: orderID, Reason: "the provider does not know charge " + charge})
				break
			}
			a.add(ctx, order, domain.RefundSucceeded{OrderID: orderID, ChargeID: charge, RefundID: "re_" + orderID[:8], Amount: amount})
		default: // paid twice: a redundant charge refunded, then in review
			a.add(ctx, order, start(1), domain.PaymentSucceeded{OrderID: orderID, Attempt: 1, ChargeID: charge, Amount: amount},
				domain.OrderConfirmed{OrderID: orderID, Tickets: tickets},
				domain.RefundRequested{OrderID: orderID, ChargeID: charge + "x", Amount: amount, Key: domain.RefundKey(charge + "x"), Reason: "redundant_effect"},
				domain.OrderNeedsReview{OrderID: orderID, Reason: "contradictory facts"})
		}
	}
}

// model folds the whole event store with package domain: the reference
// the read models are checked against.
type model struct {
	shows        map[string]*domain.Show
	showRev      map[string]int64
	reservations map[string]*domain.Reservation
	resRev       map[string]int64
	orders       map[string]*domain.Order
	orderRev     map[string]int64
	// shredded is the shredded_at of each order's PaymentSecretsShredded.
	shredded map[string]time.Time
	events   int
}

func mustModel(tb testing.TB, ctx context.Context, db *testDB) *model {
	tb.Helper()
	types := domain.EventTypes()
	typed := make([]eventstore.Typed, len(types))
	for i, t := range types {
		typed[i] = t
	}
	reg := eventstore.NewRegistry(typed...)
	waitHorizon(tb, ctx, db)
	store := db.store
	m := &model{shows: map[string]*domain.Show{}, showRev: map[string]int64{}, reservations: map[string]*domain.Reservation{},
		resRev: map[string]int64{}, orders: map[string]*domain.Order{}, orderRev: map[string]int64{}, shredded: map[string]time.Time{}}
	var after eventstore.Position
	for {
		batch, err := store.ReadAll(ctx, after, 5000)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range batch {
			m.events++
			ev, err := reg.Decode(r.Type, r.Data)
			if err != nil {
				tb.Fatal(err)
			}
			id := func(prefix string) string { return r.Stream[len(prefix):] }
			e, rev := ev.(domain.Event), int64(r.Revision)
			switch {
			case len(r.Stream) > len(showPrefix) && r.Stream[:len(showPrefix)] == showPrefix:
				foldInto(m.shows, m.showRev, id(showPrefix), e, rev)
			case len(r.Stream) > len("reservation-order-") && r.Stream[:len("reservation-order-")] == "reservation-order-":
			case len(r.Stream) > len(reservationPrefix) && r.Stream[:len(reservationPrefix)] == reservationPrefix:
				foldInto(m.reservations, m.resRev, id(reservationPrefix), e, rev)
			case len(r.Stream) > len(orderPrefix) && r.Stream[:len(orderPrefix)] == orderPrefix:
				foldInto(m.orders, m.orderRev, id(orderPrefix), e, rev)
				if sh, ok := e.(domain.PaymentSecretsShredded); ok {
					m.shredded[id(orderPrefix)] = sh.ShreddedAt
				}
			}
		}
		if len(batch) < 5000 {
			return m
		}
		after = batch[len(batch)-1].Position
	}
}

// foldInto applies e to the aggregate id in aggs, made if missing, and
// records rev as its revision in revs.
func foldInto[A any, PA interface {
	*A
	Apply(domain.Event)
}](aggs map[string]PA, revs map[string]int64, id string, e domain.Event, rev int64) {
	a := aggs[id]
	if a == nil {
		a = new(A)
		aggs[id] = a
	}
	a.Apply(e)
	revs[id] = rev
}

// paymentStatus is the API's payment status of o (cmd/booking viewOrder).
func paymentStatus(o *domain.Order) string {
	s := "pending"
	if last := o.LastAttempt(); last != nil && last.Outcome != domain.OutcomeNone {
		s = last.Outcome
	}
	if o.ChargeID != "" {
		s = domain.OutcomeSucceeded
		if r, ok := o.Refunds[o.ChargeID]; ok {
			switch {
			case r.Succeeded:
				s = "refunded"
			case !r.Refused: // a refused refund is no longer sent: the charge stands
				s = "refund_pending"
			}
		}
	}
	return s
}

// refusedRefunds counts the order's refunds the provider refused and never made.
func refusedRefunds(o *domain.Order) int {
	n := 0
	for _, r := range o.Refunds {
		if r.Refused && !r.Succeeded {
			n++
		}
	}
	return n
}

// checkModel compares the read models with the domain fold of the store:
// every event projected exactly once.
func checkModel(tb testing.TB, ctx context.Context, db *testDB) {
	tb.Helper()
	m := mustModel(tb, ctx, db)
	// Shows.
	seen := eachRow(tb, ctx, db, `SELECT s.id::text, s.capacity, s.taken, s.holds, s.revision, coalesce(ss.ordered, 0)
		FROM rm_shows s LEFT JOIN rm_show_sales ss ON ss.show_id = s.id`, func(scan func(dest ...any)) {
		var (
			id                              string
			capacity, taken, holds, ordered int
			rev                             int64
		)
		scan(&id, &capacity, &taken, &holds, &rev, &ordered)
		s := m.shows[id]
		if s == nil {
			tb.Errorf("rm_shows has show %s the store does not", id)
			return
		}
		wantOrdered := 0
		for resID := range s.Holds {
			if r := m.reservations[resID]; r != nil && r.Status == domain.ReservationStatusOrdered {
				wantOrdered += r.Quantity
			}
		}
		allOrdered := 0
		for _, r := range m.reservations {
			if r.ShowID == id && r.Status == domain.ReservationStatusOrdered {
				allOrdered += r.Quantity
			}
		}
		if capacity != s.Capacity || taken != s.Taken || holds != len(s.Holds) || rev != m.showRev[id] || ordered != allOrdered || wantOrdered != allOrdered {
			tb.Errorf("show %s: capacity %d taken %d holds %d rev %d ordered %d; want %d %d %d %d %d (of live holds %d)", id, capacity, taken, holds, rev, ordered,
				s.Capacity, s.Taken, len(s.Holds), m.showRev[id], allOrdered, wantOrdered)
		}
	})
	if seen != len(m.shows) {
		tb.Errorf("rm_shows has %d shows, the store %d", seen, len(m.shows))
	}
	// Reservations (both the reservations projection and the shows projection's copy).
	seen = eachRow(tb, ctx, db, `SELECT r.id::text, r.status, r.order_id, r.quantity, r.revision, coalesce(sr.status, ''), coalesce(sr.revision, -1)
		FROM rm_reservations r LEFT JOIN rm_show_reservations sr ON sr.reservation_id = r.id`, func(scan func(dest ...any)) {
		var (
			id, status, orderID, srStatus string
			q                             int
			rev, srRev                    int64
		)
		scan(&id, &status, &orderID, &q, &rev, &srStatus, &srRev)
		r := m.reservations[id]
		if r == nil {
			tb.Errorf("rm_reservations has %s the store does not", id)
			return
		}
		if status != r.Status || orderID != r.OrderID || q != r.Quantity || rev != m.resRev[id] || srStatus != r.Status || srRev != rev {
			tb.Errorf("reservation %s: %s %q %d rev %d (shows copy %s rev %d); want %s %q %d rev %d", id, status, orderID, q, rev, srStatus, srRev,
				r.Status, r.OrderID, r.Quantity, m.resRev[id])
		}
	})
	if seen != len(m.reservations) {
		tb.Errorf("rm_reservations has %d rows, the store %d reservations", seen, len(m.reservations))
	}
	// Orders.
	seen = eachRow(tb, ctx, db, `SELECT id::text, status, attempts, payment_status, charge_id, ticket_count, revision, unknown_since IS NOT NULL,
		refunds_pending, refunds_refused, refund_pending_since IS NOT NULL, secrets_shredded_at
		FROM rm_orders`, func(scan func(dest ...any)) {
		var (
			id, status, pay, charge string
			attempts, tickets       int
			rev                     int64
			unknown, since          bool
			pending, refused        int
			shredded                *time.Time
		)
		scan(&id, &status, &attempts, &pay, &charge, &tickets, &rev, &unknown, &pending, &refused, &since, &shredded)
		if want, ok := m.shredded[id]; ok != (shredded != nil) || (ok && !shredded.Equal(want)) {
			tb.Errorf("order %s: secrets_shredded_at %v, want %v (recorded %t)", id, shredded, want, ok)
		}
		o := m.orders[id]
		if o == nil {
			tb.Errorf("rm_orders has %s the store does not", id)
			return
		}
		wantUnknown := o.LastAttempt() != nil && o.LastAttempt().Outcome == domain.OutcomeUnknown
		if status != o.Status || attempts != len(o.Attempts) || pay != paymentStatus(o) || charge != o.ChargeID || tickets != len(o.Tickets) ||
			rev != m.orderRev[id] || unknown != wantUnknown {
			tb.Errorf("order %s: %s attempts %d pay %s charge %q tickets %d rev %d unknown %v; want %s %d %s %q %d %d %v", id,
				status, attempts, pay, charge, tickets, rev, unknown, o.Status, len(o.Attempts), paymentStatus(o), o.ChargeID, len(o.Tickets), m.orderRev[id], wantUnknown)
		}
		if wantPending, wantRefused := len(o.PendingRefunds()), refusedRefunds(o); pending != wantPending || refused != wantRefused || since != (wantPending > 0) {
			tb.Errorf("order %s: refunds pending %d (since set %v), refused %d; want %d, %d", id, pending, since, refused, wantPending, wantRefused)
		}
	})
	if seen != len(m.orders) {
		tb.Errorf("rm_orders has %d rows, the store %d orders", seen, len(m.orders))
	}
}

// eachRow runs query and calls row for each row it returns, with a scan
// function for the row; it fails tb on an error of the query or a scan, and
// returns the number of rows.
func eachRow(tb testing.TB, ctx context.Context, db *testDB, query string, row func(scan func(dest ...any))) int {
	tb.Helper()
	rows, err := db.pool.Query(ctx, query)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
		row(func(dest ...any) {
			if err := rows.Scan(dest...); err != nil {
				tb.Fatal(err)
			}
		})
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return n
}

// readModelTables lists every read-model table with its key.
var readModelTables = []string{"rm_orders", "rm_reservations", "rm_shows", "rm_show_reservations", "rm_show_sales", "rm_intents", "rm_intent_targets"}

// dump returns every row of every read-model table as JSON text (all
// columns), sorted, plus the checkpoints' positions and log clocks.
func dump(tb testing.TB, ctx context.Context, pool *pgxpool.Pool) map[string][]string {
	tb.Helper()
	out := map[string][]string{}
	for _, t := range readModelTables {
		if rows := queryStrings(tb, ctx, pool, `SELECT to_jsonb(t)::text FROM `+t+` t`); rows != nil {
			sort.Strings(rows)
			out[t] = rows
		}
	}
	if rows := queryStrings(tb, ctx, pool, `SELECT name || ' ' || commit_tx || '/' || prepare || ' ' || coalesce(log_time::text, '-') FROM projection_checkpoints ORDER BY name`); rows != nil {
		out["checkpoints"] = rows
	}
	return out
}

// queryStrings returns the rows of query, a single text column, in order
// (nil when there are none); it fails tb on an error.
func queryStrings(tb testing.TB, ctx context.Context, pool *pgxpool.Pool, query string) []string {
	tb.Helper()
	rows, err := pool.Query(ctx, query)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// runAll runs the live projectors of ps until ctx is done; the returned
// function waits for them to stop.
func runAll(tb testing.TB, ctx context.Context, db *testDB, ps []*Projection, opts ...ProjectorOption) func() {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr := NewProjector(db.pool, p, opts...)
			for ctx.Err() == nil {
				if err := pr.Run(ctx, db.store); err != nil && ctx.Err() == nil {
					tb.Errorf("projector %s: %v", p.name, err)
					return
				}
			}
		}()
	}
	return wg.Wait
}

// waitHorizon waits until the log's readable horizon has passed every
// committed event, and returns the last event's position. (Transactions of
// other tests on the same server, in any database, hold the horizon back:
// xids are server-wide.)
func waitHorizon(tb testing.TB, ctx context.Context, db *testDB) eventstore.Position {
	tb.Helper()
	var (
		last     eventstore.Position
		tx, seq  int64
		deadline = time.Now().Add(2 * time.Minute)
	)
	err := db.pool.QueryRow(ctx, `SELECT tx::text::bigint, seq FROM events ORDER BY tx DESC, seq DESC LIMIT 1`).Scan(&tx, &seq)
	if err != nil {
		tb.Fatalf("last event: %v", err)
	}
	last = eventstore.Position{Commit: uint64(tx), Prepare: uint64(seq)}
	for {
		head, err := db.store.Head(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if !head.Less(last) {
			return last
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the readable horizon %s did not reach the last event %s", head, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitCaughtUp waits until every checkpoint of ps has passed every
// committed event.
func waitCaughtUp(tb testing.TB, ctx context.Context, db *testDB, ps []*Projection) {
	tb.Helper()
	head := waitHorizon(tb, ctx, db)
	deadline := time.Now().Add(2 * time.Minute)
	r := NewReader(db.pool)
	for _, p := range ps {
		for {
			pos, err := r.Checkpoint(ctx, p.name)
			if err != nil {
				tb.Fatal(err)
			}
			if !pos.Less(head) {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%s: checkpoint %s did not reach head %s", p.name, pos, head)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
