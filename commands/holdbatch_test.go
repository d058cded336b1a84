package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
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

// pausingStore pauses the first append to stream (after it committed) until
// resume is closed, and counts the appends to stream and their revision
// conflicts.
type pausingStore struct {
	EventStore
	stream            string
	paused, resume    chan struct{}
	once              sync.Once
	mu                sync.Mutex
	appends, conflict int
}

func (s *pausingStore) Append(ctx context.Context, stream string, exp eventstore.ExpectedRevision, evs ...eventstore.EventData) (eventstore.AppendResult, error) {
	res, err := s.EventStore.Append(ctx, stream, exp, evs...)
	if stream == s.stream {
		s.noted(err)
	}
	return res, err
}

// noted counts an append to the watched stream that ended with err, and
// pauses the first one.
func (s *pausingStore) noted(err error) {
	s.mu.Lock()
	s.appends++
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		s.conflict++
	}
	s.mu.Unlock()
	s.once.Do(func() { close(s.paused); <-s.resume })
}

func (s *pausingStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	res, err := s.EventStore.AppendMulti(ctx, appends...)
	if slices.ContainsFunc(appends, func(a eventstore.StreamAppend) bool { return a.Stream == s.stream }) {
		s.noted(err)
	}
	return res, err
}

// TestHoldBatch_OwnSnapshotMissingAnotherWriterIsCorrected: a batch that
// follows the process's own previous batch decides on the snapshot that
// batch left, without reading the stream; when another process appended
// meanwhile, the append at the snapshot's revision fails and the batch reads
// the tail and decides again. Show of 3 seats: the first hold's append is
// paused after it committed, two more holds queue behind it, another
// process holds a seat meanwhile; then exactly one of the two queued holds
// gets the last seat and the other is refused sold out, after exactly one
// revision conflict (the decision on the process's own snapshot), and the
// stream has 3 SeatsHeld.
func TestHoldBatch_OwnSnapshotMissingAnotherWriterIsCorrected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := pgstore.New(pool, pgstore.WithAppendTimeout(time.Minute))
	newH := func(exec string, s EventStore) *Handler {
		cfg := DefaultConfig()
		cfg.Executor = exec
		return New(cfg, s, &pgClock{pool: pool}, nil, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	other := newH("b", store)
	show, _, err := other.ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Hot", StartsAt: time.Now().Add(time.Hour), Capacity: 3, Price: domain.Money{Amount: 100, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	ps := &pausingStore{EventStore: store, stream: domain.ShowStream(show.ID), paused: make(chan struct{}), resume: make(chan struct{})}
	h := newH("a", ps)
	reserve := func(h *Handler, actor string) error {
		_, _, err := h.ReserveSeats(ctx, Request{Actor: actor, Operation: OpReserveSeats, Key: "k"}, ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
		return err
	}
	errs := make(chan error, 3)
	go func() { errs <- reserve(h, "u1") }()
	select {
	case <-ps.paused:
	case <-time.After(time.Minute):
		t.Fatal("the first hold's append never ran")
	}
	for _, u := range []string{"u2", "u3"} {
		go func() { errs <- reserve(h, u) }()
	}
	queued := func() int {
		h.holds.mu.Lock()
		defer h.holds.mu.Unlock()
		return len(h.holds.queue[show.ID])
	}
	for deadline := time.Now().Add(time.Minute); queued() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d holds queued behind the paused batch, want 2", queued())
		}
		time.Sleep(5 * time.Millisecond) // polling for a state, with a deadline
	}
	if err := reserve(other, "v1"); err != nil {
		t.Fatalf("the other process's hold = %v", err)
	}
	close(ps.resume)
	held, soldOut := 0, 0
	for range 3 {
		switch err := <-errs; {
		case err == nil:
			held++
		case errors.Is(err, domain.ErrSoldOut):
			soldOut++
		default:
			t.Errorf("ReserveSeats = %v, want a hold or sold out", err)
		}
	}
	if held != 2 || soldOut != 1 {
		t.Errorf("holds of this process = %d held, %d sold out; want 2, 1", held, soldOut)
	}
	ps.mu.Lock()
	appends, conflicts := ps.appends, ps.conflict
	ps.mu.Unlock()
	if appends != 3 || conflicts != 1 {
		t.Errorf("show stream appends of this process = %d with %d conflicts, want 3 with 1 (first batch; the next decided on its own snapshot and conflicted; decided again on the tail)", appends, conflicts)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE stream = $1 AND type = 'SeatsHeld'`, domain.ShowStream(show.ID)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("show stream: %d SeatsHeld, want 3", n)
	}
}
