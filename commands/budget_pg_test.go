package commands

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/internal/sqlcount"
	"github.com/retrysafe/booking/migrations/pgtest"
	"github.com/retrysafe/booking/provider/providersim"
)

// The request path's budgets (ARCHITECTURE.md, "Performance"): SQL
// statements sent and transactions that write (commits) per whole booking
// (a reservation, an order and its charge, as the HTTP API runs them), and
// statements per replay of a completed order intent, with no background job
// running. They are enforced so that a regression cannot land silently;
// BENCHMARKS.md ("How the figures came about") lists where the statements
// go. Lower them whenever a change removes a round trip or a commit.
//
// A booking commits three times: the reservation's hold unit (its intent,
// SeatsHeld and ReservationHeld), the order's unit (its intent with its
// key row, created placed, the claim, OrderPlaced, ReservationOrdered and
// the first attempt's start), and the payment's result. A repeat that
// arrives before a unit commits finds the intent in flight in this process
// (inFlight) and waits for it, or answers 409 in use. The ended order's
// key is deleted in the payment result's unit (KeyUnits), not in a commit
// of its own.
const (
	requestPathBudget = 5
	commitBudget      = 3
	replayBudget      = 3
)

// budgetBookings is how many bookings (and replays) are counted.
const budgetBookings = 20

// countedPG is a fresh PostgreSQL database on a pool whose statements
// counter counts, the event store and key table on that one pool (as in
// `booking serve`), and a provider simulator served over HTTP.
type countedPG struct {
	counter *sqlcount.Counter
	pool    *pgxpool.Pool
	events  *pgstore.Store
	keys    *keystore.Store
	sim     *providersim.Server
	simURL  string
}

// newCountedPG opens a countedPG; its pool and simulator close when t
// ends.
func newCountedPG(t *testing.T) *countedPG {
	t.Helper()
	db := &countedPG{counter: &sqlcount.Counter{}}
	pool, err := db.counter.Open(context.Background(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sim := providersim.New(providersim.Config{})
	simSrv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); simSrv.Close() })
	db.pool, db.events, db.keys, db.sim, db.simURL = pool, pgstore.New(pool), keystore.New(pool, testKeyring(t)), sim, simSrv.URL
	return db
}

// handler returns a Handler of executor exec on db: its event store, the
// database clock, the simulator's provider, the key table with its key
// units, no logging, and then opts.
func (db *countedPG) handler(t *testing.T, exec string, opts ...Option) *Handler {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Executor = exec
	return New(cfg, db.events, &pgClock{pool: db.pool}, simClient(t, db.simURL), newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)),
		append([]Option{WithKeys(db.keys), WithKeyUnits(keystore.Units{Events: db.events, Keys: db.keys})}, opts...)...)
}

// TestPGRequestPathStatementBudget counts the SQL statements and commits
// of whole bookings on the request path: the commands the HTTP API calls
// (ReserveSeats, then PlaceOrder paying at the provider simulator in
// process), on PostgreSQL, with no background job (no process manager,
// recovery, expiry, reconciler, projector or relay), one booking at a time.
// Every statement counts: the event store's, the clock's and the key
// table's (the batched key deletes the bookings caused included), on the
// one pool they share as in `booking serve`. It fails above
// requestPathBudget statements or commitBudget commits per booking, and
// above replayBudget statements per replay of a
// completed order intent, printing the statements by kind; it logs them
// always.
func TestPGRequestPathStatementBudget(t *testing.T) {
	ctx := context.Background()
	db := newCountedPG(t)
	counter := db.counter
	h := db.handler(t, "budget")

	seq := 0
	req := func(op string) Request {
		seq++
		return Request{Actor: "budget", Operation: op, Key: fmt.Sprintf("k-%d", seq), Wait: 10 * time.Second}
	}
	now, err := h.clock.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	show, _, err := h.ScheduleShow(ctx, req(OpScheduleShow), ScheduleShowCommand{Name: "Budget", StartsAt: now.Add(24 * time.Hour),
		Capacity: 1000, Price: domain.Money{Amount: 1000, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	book := func() (Request, PlaceOrderCommand, OrderResult) {
		t.Helper()
		res, out, err := h.ReserveSeats(ctx, req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
		if err != nil || out.Replayed || res.Status != domain.ReservationStatusHeld {
			t.Fatalf("ReserveSeats = %+v, %+v, %v; want a new held reservation", res, out, err)
		}
		oreq, cmd := req(OpPlaceOrder), PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"}
		o, err := h.PlaceOrder(ctx, oreq, cmd)
		if err != nil || !o.Final || o.Replayed || o.Order.Status != domain.OrderStatusConfirmed {
			t.Fatalf("PlaceOrder = %+v, %v; want a new confirmed order", o, err)
		}
		return oreq, cmd, o
	}
	book() // the show's first hold reads its stream; bookings after it are what is counted

	counter.Reset()
	type done struct {
		req Request
		cmd PlaceOrderCommand
		id  string
	}
	var orders []done
	for range budgetBookings {
		r, c, o := book()
		orders = append(orders, done{r, c, o.Order.ID})
	}
	// The keys of the orders that ended are deleted in batches off the
	// request (keyShredder): wait for the last batch, so that its
	// statement counts with the bookings it served.
	shredsDone := func() bool {
		h.shredder.mu.Lock()
		defer h.shredder.mu.Unlock()
		return len(h.shredder.of) == 0
	}
	for deadline := time.Now().Add(30 * time.Second); !shredsDone(); {
		if time.Now().After(deadline) {
			t.Fatal("the ended orders' keys are still waiting to be deleted after 30 s")
		}
		time.Sleep(20 * time.Millisecond) // polling for a state, with a deadline
	}
	perBooking := float64(counter.Total()) / budgetBookings
	commitsPerBooking := float64(counter.Commits()) / budgetBookings
	bookingTable := counter.Report(budgetBookings)

	counter.Reset()
	for _, o := range orders {
		out, err := h.PlaceOrder(ctx, o.req, o.cmd)
		if err != nil || !out.Replayed || !out.Final || out.Order.ID != o.id || out.Order.Status != domain.OrderStatusConfirmed {
			t.Fatalf("replayed PlaceOrder = %+v, %v; want order %s replayed, confirmed", out, err, o.id)
		}
	}
	perReplay := float64(counter.Total()) / budgetBookings
	replayTable := counter.Report(budgetBookings)

	if n := len(db.sim.Charges()); n != budgetBookings+1 {
		t.Errorf("simulator: %d charges, want %d (one per booking)", n, budgetBookings+1)
	}
	// The lines make bench reads for row P2s (test/scripts/benchrun).
	t.Logf("statements per booking: request path %.2f", perBooking)
	t.Logf("commits per booking: request path %.2f", commitsPerBooking)
	t.Logf("request path: %.2f statements per booking (budget %d):\n%s", perBooking, requestPathBudget, bookingTable)
	t.Logf("replay of a completed order: %.2f statements (budget %d):\n%s", perReplay, replayBudget, replayTable)
	if perBooking > requestPathBudget {
		t.Errorf("request path: %.2f statements per booking, budget %d:\n%s", perBooking, requestPathBudget, bookingTable)
	}
	if commitsPerBooking > commitBudget {
		t.Errorf("request path: %.2f commits per booking, budget %d:\n%s", commitsPerBooking, commitBudget, bookingTable)
	}
	if perReplay > replayBudget {
		t.Errorf("replay: %.2f statements per replay, budget %d:\n%s", perReplay, replayBudget, replayTable)
	}
}
