package commands

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
	"github.com/retrysafe/booking/provider/providersim"
	"github.com/retrysafe/booking/provider/stripe"
)

// benchClients is the number of concurrent clients of the booking benchmark.
const benchClients = 16

// BenchmarkBooking measures whole bookings — an idempotent reservation (intent
// + SeatsHeld on one hot show + reservation stream) and an idempotent order
// (intent + claim + order + reservation marked + payment attempt + charge at
// the simulator + confirmation) — by 16 concurrent clients on one show,
// against real PostgreSQL. In the same run it measures the machine's baseline:
// one-row INSERTs into a table with UNIQUE (actor, key) at the same
// concurrency. It reports bookings/s, the baseline, and bookings per raw
// insert (a booking commits 3 times in 5 statements on the request path, see
// TestPGRequestPathStatementBudget).
func BenchmarkBooking(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewPool(b, pgtest.NewDatabase(b))
	sim := providersim.New(providersim.Config{})
	simSrv := httptest.NewServer(sim.Handler())
	b.Cleanup(func() { sim.Close(); simSrv.Close() })
	client, err := stripe.New(stripe.Config{BaseURL: simSrv.URL, HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Executor = "bench"
	h := New(cfg, pgstore.New(pool), &pgClock{pool: pool}, client, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithKeys(keystore.New(pool, testKeyring(b))))

	var seq atomic.Int64
	req := func(op string) Request {
		return Request{Actor: "bench", Operation: op, Key: fmt.Sprintf("k-%d", seq.Add(1)), Wait: 10 * time.Second}
	}
	show := benchSetup(b, h, pool, req(OpScheduleShow), "Bench", "bench_booking_raw")

	b.ResetTimer()
	booked := benchRun(b, b.N, func(int) error {
		res, _, err := h.ReserveSeats(ctx, req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
		if err != nil {
			return err
		}
		out, err := h.PlaceOrder(ctx, req(OpPlaceOrder), PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"})
		if err != nil {
			return err
		}
		if out.Order.Status != domain.OrderStatusConfirmed {
			return fmt.Errorf("order %s is %s, want confirmed", out.Order.ID, out.Order.Status)
		}
		return nil
	})
	b.StopTimer()
	raw := benchRaw(b, pool, "bench_booking_raw", []byte(`{"quantity":1}`))
	if n := len(sim.Charges()); n != b.N {
		b.Fatalf("simulator: %d charges for %d bookings", n, b.N)
	}
	b.ReportMetric(float64(b.N)/booked.Seconds(), "bookings/s")
	b.ReportMetric(float64(b.N)/raw.Seconds(), "raw_inserts/s")
	b.ReportMetric(raw.Seconds()/booked.Seconds(), "bookings_per_raw_insert")
}

// BenchmarkHotShowHolds measures seat holds alone on one show by 16
// concurrent clients — the on-sale hot spot, where holds are group-committed
// per show (holdbatch.go) — against one-row UNIQUE inserts measured in the
// same run at the same concurrency.
func BenchmarkHotShowHolds(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewPool(b, pgtest.NewDatabase(b))
	cfg := DefaultConfig()
	cfg.Executor = "bench"
	h := New(cfg, pgstore.New(pool), &pgClock{pool: pool}, nil, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	var seq atomic.Int64
	req := func(op string) Request {
		return Request{Actor: "bench", Operation: op, Key: fmt.Sprintf("k-%d", seq.Add(1))}
	}
	show := benchSetup(b, h, pool, req(OpScheduleShow), "Hot", "bench_hold_raw")
	b.ResetTimer()
	holds := benchRun(b, b.N, func(int) error {
		_, _, err := h.ReserveSeats(ctx, req(OpReserveSeats), ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
		return err
	})
	b.StopTimer()
	raw := benchRaw(b, pool, "bench_hold_raw", []byte(`{}`))
	b.ReportMetric(float64(b.N)/holds.Seconds(), "holds/s")
	b.ReportMetric(float64(b.N)/raw.Seconds(), "raw_inserts/s")
	b.ReportMetric(raw.Seconds()/holds.Seconds(), "holds_per_raw_insert")
}

// benchSetup schedules the benchmark's one show (capacity domain.MaxCapacity,
// starting in a day) with the request sched and creates rawTable, the
// baseline's table with UNIQUE (actor, key).
func benchSetup(b *testing.B, h *Handler, pool *pgxpool.Pool, sched Request, name, rawTable string) domain.Show {
	b.Helper()
	ctx := context.Background()
	show, _, err := h.ScheduleShow(ctx, sched, ScheduleShowCommand{Name: name, StartsAt: time.Now().Add(24 * time.Hour),
		Capacity: domain.MaxCapacity, Price: domain.Money{Amount: 1000, Currency: "EUR"}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+rawTable+` (actor text, key text, body bytea, UNIQUE (actor, key))`); err != nil {
		b.Fatal(err)
	}
	return show
}

// benchRun runs work(1) … work(n) on benchClients goroutines and returns the
// wall time; the first error fails the benchmark.
func benchRun(b *testing.B, n int, work func(i int) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	start := time.Now()
	for range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				if err := work(i); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		b.Fatal(*e)
	}
	return time.Since(start)
}

// benchRaw measures the baseline: b.N one-row INSERTs of body into rawTable at
// the benchmark's concurrency.
func benchRaw(b *testing.B, pool *pgxpool.Pool, rawTable string, body []byte) time.Duration {
	ctx := context.Background()
	return benchRun(b, b.N, func(i int) error {
		_, err := pool.Exec(ctx, `INSERT INTO `+rawTable+` (actor, key, body) VALUES ($1, $2, $3)`, "bench", fmt.Sprintf("k-%d", i), body)
		return err
	})
}
