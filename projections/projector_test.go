package projections

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
