package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/readmodels/readmodelstest"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
	"github.com/retrysafe/booking/projections"
)

// dumpReadModels returns every row of every read-model table (all columns,
// as JSON) and the checkpoints' positions, sorted.
func dumpReadModels(t *testing.T, pool *pgxpool.Pool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range projections.All(time.Hour) {
		for _, table := range p.Tables() {
			out[table] = queryStrings(t, pool, `SELECT to_jsonb(t)::text FROM `+table+` t`)
			sort.Strings(out[table])
		}
	}
	out["checkpoints"] = queryStrings(t, pool, `SELECT name || ' ' || commit_tx || '/' || prepare || ' ' || coalesce(log_time::text, '') FROM projection_checkpoints ORDER BY 1`)
	return out
}

// queryStrings returns the one text column of every row of sql.
func queryStrings(t *testing.T, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitProjected waits until every projector's checkpoint has passed the
// last committed event.
func waitProjected(t *testing.T, pool *pgxpool.Pool, store *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	var tx, seq int64
	if err := pool.QueryRow(ctx, `SELECT tx::text::bigint, seq FROM events ORDER BY tx DESC, seq DESC LIMIT 1`).Scan(&tx, &seq); err != nil {
		t.Fatal(err)
	}
	last := eventstore.Position{Commit: uint64(tx), Prepare: uint64(seq)}
	r := projections.NewReader(pool)
	deadline := time.Now().Add(time.Minute)
	for _, name := range projections.Names() {
		for {
			pos, err := r.Checkpoint(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if !pos.Less(last) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("projector %s stuck at %s, last event %s", name, pos, last)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestRebuildCommandWhileServing runs the live projectors as `booking
// serve` does (Locks.RunExclusive per projector) and `booking projections
// rebuild` against them: the rebuild takes each projector's lock (the
// projector hands it over), swaps in tables equal to the live ones, twice in
// a row, and the live projectors resume from the swapped checkpoints.
func TestRebuildCommandWhileServing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	pool := pgtest.NewPool(t, url)
	store := pgstore.New(pool, pgstore.WithAppendTimeout(time.Minute)) // not 5 s: the machine may be fully busy
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	wait := readmodelstest.RunLive(ctx, pool, store, log)
	defer wait()
	defer cancel()

	showID := uuid.Must(uuid.NewV7()).String()
	price := domain.Money{Amount: 1000, Currency: "EUR"}
	add := func(stream string, events ...eventstore.Typed) {
		t.Helper()
		readmodelstest.Append(t, ctx, store, stream, events...)
	}
	add(domain.ShowStream(showID), domain.ShowScheduled{ShowID: showID, Name: "S", StartsAt: time.Now().Add(time.Hour), Capacity: 50, Price: price})
	hold := func() {
		resID, orderID := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
		held := domain.SeatsHeld{ShowID: showID, ReservationID: resID, Actor: "alice", Quantity: 2, Amount: price.Times(2)}
		add(domain.ShowStream(showID), held)
		add(domain.ReservationStream(resID), domain.HeldFrom(held))
		claim := domain.OrderClaimed{ReservationID: resID, OrderID: orderID, ShowID: showID, Actor: "alice", Quantity: 2, Amount: price.Times(2)}
		add(domain.OrderStream(orderID), domain.PlacedFrom(claim, time.Now().Add(time.Hour), []byte("sealed tok_secret")),
			domain.PaymentAttemptStarted{OrderID: orderID, Attempt: 1},
			domain.PaymentSucceeded{OrderID: orderID, Attempt: 1, ChargeID: "ch_" + orderID},
			domain.OrderConfirmed{OrderID: orderID, Tickets: []domain.Ticket{{ID: "t1"}, {ID: "t2"}}})
		add(domain.ReservationStream(resID), domain.ReservationOrdered{ReservationID: resID, OrderID: orderID})
	}
	for range 5 {
		hold()
	}
	waitProjected(t, pool, store)
	live := dumpReadModels(t, pool)

	for i := range 2 {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		err := run(ctx, []string{"projections", "rebuild", "--database-url", url}, &stdout, &stderr)
		if err != nil {
			t.Fatalf("rebuild %d: %v (stderr %s)", i+1, err, stderr.String())
		}
		if !strings.Contains(stdout.String(), "booking: rebuilt orders, reservations, shows, intents from") || stderr.Len() != 0 {
			t.Errorf("rebuild %d: stdout %q stderr %q, want the summary and no progress bar (not a terminal)", i+1, stdout.String(), stderr.String())
		}
		if diff := cmp.Diff(live, dumpReadModels(t, pool)); diff != "" {
			t.Fatalf("rebuild %d differs from live (-live +rebuild):\n%s", i+1, diff)
		}
		t.Logf("rebuild %d while serving took %s", i+1, time.Since(start).Round(time.Millisecond))
	}
	// The live projectors resume after the swap.
	hold()
	waitProjected(t, pool, store)
	var taken int
	if err := pool.QueryRow(ctx, `SELECT taken FROM rm_shows`).Scan(&taken); err != nil {
		t.Fatal(err)
	}
	if taken != 12 {
		t.Errorf("rm_shows.taken = %d after the rebuilds and one more hold, want 12", taken)
	}

	if err := run(ctx, []string{"projections", "rebuild", "--database-url", url, "bogus"}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), `unknown read model "bogus"`) {
		t.Errorf("rebuild bogus = %v, want an unknown read model error", err)
	}
}

// TestRebuildCommandRefusesAnotherBackend: with read model positions
// written on KurrentDB (a service running there), `booking projections
// rebuild` without BOOKING_EVENT_STORE would read the PostgreSQL log: it
// exits 2 naming BOOKING_EVENT_STORE and --switch-backend, before any
// work (the stored checkpoint untouched, no fresh table made); with
// --switch-backend it rebuilds and stamps the checkpoints postgres, after
// which a plain rebuild runs.
func TestRebuildCommandRefusesAnotherBackend(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	pool := pgtest.NewPool(t, url)
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('booking.backend', 'kurrentdb', true)`)
		if err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO projection_checkpoints (name, commit_tx, prepare, updated_at) VALUES ('orders', 7, 7, now())`)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	state := func() []string {
		return queryStrings(t, pool, `SELECT name || ' ' || commit_tx || '/' || prepare || ' ' || backend FROM projection_checkpoints
			UNION ALL SELECT 'sequence ' || last_value || ' ' || is_called FROM projection_rebuild_seq ORDER BY 1`)
	}
	before := state()
	args := []string{"projections", "rebuild", "--database-url", url}
	err := run(ctx, args, io.Discard, io.Discard)
	if err == nil || exitCode(err) != exitUsage || !strings.HasPrefix(err.Error(), "invalid configuration: --event-store (BOOKING_EVENT_STORE): ") ||
		!strings.Contains(err.Error(), "orders (kurrentdb)") || !strings.Contains(err.Error(), "--switch-backend") {
		t.Fatalf("rebuild on postgres over kurrentdb positions = %v (exit %d), want exit %d naming BOOKING_EVENT_STORE, orders (kurrentdb) and --switch-backend",
			err, exitCode(err), exitUsage)
	}
	if diff := cmp.Diff(before, state()); diff != "" {
		t.Errorf("the refused rebuild changed the database (-before +after):\n%s", diff)
	}
	if err := run(ctx, append(args, "--switch-backend"), io.Discard, io.Discard); err != nil {
		t.Fatalf("rebuild --switch-backend: %v", err)
	}
	if got := queryStrings(t, pool, `SELECT DISTINCT backend || ' ' || commit_tx FROM projection_checkpoints`); !cmp.Equal(got, []string{"postgres 0"}) {
		t.Errorf("checkpoints after rebuild --switch-backend = %q, want all postgres at 0 (an empty log)", got)
	}
	if err := run(ctx, args, io.Discard, io.Discard); err != nil {
		t.Errorf("rebuild after the switch: %v", err)
	}
}
