package projections

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

func TestConcurrentAppendersProjectedExactlyOnce(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ps := All(24 * time.Hour)
	wait := runAll(t, ctx, db, ps, WithMaxBatch(50))
	a := workload{shows: 8, perShow: 40, workers: 8, seed: 1}.appendTo(t, ctx, db.store)
	waitCaughtUp(t, ctx, db, ps)
	cancel()
	wait()
	checkModel(t, context.Background(), db)
	t.Logf("%d events appended", a.n.Load())
}

var errInjected = errors.New("injected fault")

// runUntilCaughtUp runs pr, restarting it after every failure, until its
// checkpoint reaches the store's head; it returns the number of restarts.
func runUntilCaughtUp(t *testing.T, db *testDB, pr *Projector, cancelRun *func()) int {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		restarts int
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			rctx, cancel := context.WithCancel(ctx)
			*cancelRun = cancel
			err := pr.Run(rctx, db.store)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err == nil || !(errors.Is(err, errInjected) || errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "terminat") ||
				strings.Contains(err.Error(), "closed")) {
				t.Errorf("Run = %v, want an injected fault", err)
				return
			}
			restarts++
		}
	}()
	waitCaughtUp(t, ctx, db, []*Projection{pr.p})
	stop()
	<-done
	return restarts
}

// TestKilledBeforeCheckpoint kills projectors after a batch was applied and
// before its checkpoint committed (an error, a cancelled context, the
// database session terminated): after restarts the read models are exact.
func TestKilledBeforeCheckpoint(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx := context.Background()
	workload{shows: 3, perShow: 20, workers: 3, seed: 2}.appendTo(t, ctx, db.fast)
	for _, p := range All(24 * time.Hour) {
		pr := NewProjector(db.pool, p, WithMaxBatch(9))
		var (
			n         int
			cancelRun func()
		)
		pr.beforeCommit = func(ctx context.Context, tx pgx.Tx, batch []envelope) error {
			n++
			switch n % 6 {
			case 1:
				return errInjected
			case 3:
				cancelRun() // the process is stopped: the commit never happens
				return ctx.Err()
			case 5:
				_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
				if err == nil {
					err = errInjected
				}
				return err
			}
			return nil
		}
		restarts := runUntilCaughtUp(t, db, pr, &cancelRun)
		if restarts < 10 {
			t.Errorf("%s: %d restarts, want many", p.name, restarts)
		}
	}
	checkModel(t, ctx, db)
}

// TestBatchWithoutLoadsIsFencedAndCached: a live projector's batch whose
// rows are all known without a SELECT (opened by the batch, or cached from
// its own last commit) goes as one implicit transaction, and still commits
// nothing when its checkpoint fence fails; the row cache then serves the
// next batch, and a failed batch empties it.
func TestBatchWithoutLoadsIsFencedAndCached(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx := context.Background()
	b := bind(Orders(), nil).withCaches()
	cp, err := loadCheckpoint(ctx, db.pool, NameOrders)
	if err != nil {
		t.Fatal(err)
	}
	orderID := newID()
	amount := domain.Money{Amount: 9000, Currency: "EUR"}
	envs := envelopes(t, domain.OrderStream(orderID),
		domain.OrderPlaced{OrderID: orderID, ReservationID: newID(), ShowID: newID(), Actor: "alice", Intent: "intent-x", Quantity: 2,
			Amount: amount, PaymentDeadline: epoch.Add(time.Hour)},
		domain.PaymentAttemptStarted{OrderID: orderID, Attempt: 1, LeaseUntil: epoch, Amount: amount})
	state := func() (rows int, rev int64) {
		t.Helper()
		if err := db.pool.QueryRow(ctx, `SELECT count(*), coalesce(max(revision), -1) FROM rm_orders WHERE id = $1`, orderID).Scan(&rows, &rev); err != nil {
			t.Fatal(err)
		}
		return rows, rev
	}
	opts := applyOptions{fence: NameOrders}

	// A stale start position: the fence fails, nothing is written.
	stale := checkpoint{pos: eventstore.Position{Commit: 7, Prepare: 7}}
	if _, err := applyBatch(ctx, db.pool, []*bound{b}, envs[:1], stale, opts); !errors.Is(err, ErrCheckpointMoved) {
		t.Fatalf("applyBatch from a moved checkpoint = %v, want ErrCheckpointMoved", err)
	}
	if n, _ := state(); n != 0 {
		t.Fatalf("rm_orders has %d rows of the order after a failed fence, want 0", n)
	}
	b.clearCaches() // as Projector.applyAll does on an error

	// From the real checkpoint: written, and kept in the cache.
	next, err := applyBatch(ctx, db.pool, []*bound{b}, envs[:1], cp, opts)
	if err != nil {
		t.Fatal(err)
	}
	if n, rev := state(); n != 1 || rev != 0 {
		t.Fatalf("rm_orders after OrderPlaced: %d rows at revision %d, want 1 at 0", n, rev)
	}
	if _, ok := b.cacheOf(ordersTable).get(orderID); !ok {
		t.Fatalf("the committed row is not in the projector's cache")
	}
	// The next event folds into the cached row.
	if _, err := applyBatch(ctx, db.pool, []*bound{b}, envs[1:], next, opts); err != nil {
		t.Fatal(err)
	}
	if n, rev := state(); n != 1 || rev != 1 {
		t.Fatalf("rm_orders after PaymentAttemptStarted: %d rows at revision %d, want 1 at 1", n, rev)
	}
	var attempts int
	if err := db.pool.QueryRow(ctx, `SELECT attempts FROM rm_orders WHERE id = $1`, orderID).Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("attempts = %d (%v), want 1", attempts, err)
	}
}
