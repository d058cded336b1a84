package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// TestHoldBatch_ConcurrentHoldsNeverOversell: 60 concurrent reservations of
// one seat on a show of 25, through two handlers (two processes) on one
// database so batches also race across processes: exactly 25 holds, 35
// sold-out refusals recorded on their intents, and one SeatsHeld per hold.
func TestHoldBatch_ConcurrentHoldsNeverOversell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := pgstore.New(pool, pgstore.WithAppendTimeout(time.Minute)) // not 5 s: the machine may be fully busy
	newH := func(exec string) *Handler {
		cfg := DefaultConfig()
		cfg.Executor = exec
		return New(cfg, store, &pgClock{pool: pool}, nil, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	hs := []*Handler{newH("a"), newH("b")}
	show, _, err := hs[0].ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Hot", StartsAt: time.Now().Add(time.Hour), Capacity: 25, Price: domain.Money{Amount: 100, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	held, soldOut := 0, 0
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := Request{Actor: fmt.Sprintf("u%d", i), Operation: OpReserveSeats, Key: "k"}
			_, _, err := hs[i%2].ReserveSeats(ctx, req, ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				held++
			case errors.Is(err, domain.ErrSoldOut):
				soldOut++
			default:
				t.Errorf("ReserveSeats(u%d) = %v, want a hold or sold-out", i, err)
			}
		}()
	}
	wg.Wait()
	if held != 25 || soldOut != 35 {
		t.Errorf("ReserveSeats x60 on 25 seats = %d held, %d sold out, want 25, 35", held, soldOut)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE stream = $1 AND type = 'SeatsHeld'`, "show-"+show.ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 25 {
		t.Errorf("show stream: %d SeatsHeld, want 25", n)
	}
	got, err := hs[1].GetShow(ctx, show.ID)
	if err != nil || got.Available() != 0 {
		t.Errorf("GetShow = available %d, %v; want 0", got.Available(), err)
	}
	// A refusal is the intent's outcome: its repeat answers the same.
	_, _, err = hs[0].ReserveSeats(ctx, Request{Actor: "u59", Operation: OpReserveSeats, Key: "k"}, ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
	var rej *Rejection
	if held == 25 && !errors.As(err, &rej) && err != nil {
		t.Errorf("repeat of u59 = %v", err)
	}
}
