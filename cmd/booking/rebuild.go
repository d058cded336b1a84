package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"

	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/projections"
)

// rebuildCmd is `booking projections rebuild [NAME...]`.
type rebuildCmd struct {
	DatabaseURL     string        `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL (read models; the event store unless --event-store names KurrentDB)."`
	EventStore      string        `name:"event-store" env:"BOOKING_EVENT_STORE" default:"postgres" help:"The service's event store: postgres, or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string."`
	IntentRetention time.Duration `name:"intent-retention" env:"BOOKING_INTENT_RETENTION" default:"24h" help:"Intent retention the intents view applies (the service's value)."`
	LockTimeout     time.Duration `name:"lock-timeout" default:"2m" help:"How long to wait for a running service's projectors to hand over their locks."`
	Progress        string        `name:"progress" default:"auto" enum:"auto,always,never" help:"Progress bar on stderr: auto (only on a terminal), always, never."`
	Names           []string      `arg:"" optional:"" help:"Read models to rebuild: orders, reservations, shows, intents (default: all)."`
}

// projectorLock is the pgcoord.Locks name (and so the advisory lock) of the
// live projector of a read model; the rebuild takes the same lock.
func projectorLock(name string) string { return "projection:" + name }

// rebuildGuard is the lock that keeps two rebuilds of a read model apart.
func rebuildGuard(name string) string { return "projection-rebuild:" + name }

// Run rebuilds the read models from the event log and swaps them in (see
// projections.Rebuild). It needs only the database: it applies the
// migrations, never calls the payment provider and publishes nothing. While
// a service runs, it takes each projector's lock (the live projector hands
// it over when it sees the rebuild waiting), catches up and swaps; the live
// projector then resumes from the swapped checkpoint.
func (c *rebuildCmd) Run(e *env) error {
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		return err
	}
	if c.IntentRetention <= 0 {
		return configError("BOOKING_INTENT_RETENTION", "must be a positive duration such as 24h")
	}
	if err := checkEventStore(c.EventStore); err != nil {
		return err
	}
	backend, _ := eventStoreBackend(c.EventStore)
	ps, err := projections.Select(c.Names, c.IntentRetention)
	if err != nil {
		return &usageError{err} // a NAME argument no read model has
	}
	ctx := e.ctx
	// Guards and locks hold a connection each; the bulk fill uses one for
	// the log reader and one per table writer (COPY) and read back, at
	// most 7 tables (it waits for a connection beyond the pool).
	// The swapped checkpoints are stamped with backend (openMigrated), so
	// a rebuild is how read models move to another event store.
	pool, err := openMigrated(ctx, c.DatabaseURL, int32(2*len(ps)+12), backend, nil)
	if err != nil {
		return err
	}
	defer pool.Close()

	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	elog, err := openEventLog(c.EventStore, pool, log)
	if err != nil {
		return err
	}
	defer elog.close()
	store := elog.Store
	locks := pgcoord.NewLocks(pool)
	var total int64
	if c.showProgress(e.stderr) {
		// The total only sizes the progress bar; on KurrentDB counting
		// reads the whole log once more, so it is read only for a bar.
		if total, err = elog.counter.EventCount(ctx); err != nil {
			return err
		}
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name()
	}
	bar := c.progressBar(e.stderr, total, strings.Join(names, ", "))
	res, err := projections.Rebuild(ctx, pool, store, ps, projections.RebuildOptions{
		Guard: func(ctx context.Context, name string) (func(), error) {
			l, err := locks.TryAcquire(ctx, rebuildGuard(name))
			if errors.Is(err, pgcoord.ErrLockHeld) {
				return nil, errors.New("another rebuild of it is running")
			}
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		Lock: func(ctx context.Context, name string) (func(), error) {
			lctx, cancel := context.WithTimeout(ctx, c.LockTimeout)
			defer cancel()
			l, err := locks.Acquire(lctx, projectorLock(name))
			if err != nil && ctx.Err() == nil && lctx.Err() != nil {
				return nil, fmt.Errorf("the live projector did not hand over its lock within %s (--lock-timeout): %w", c.LockTimeout, err)
			}
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		Progress: func(n int64) {
			if bar != nil {
				if n > total {
					total = n
					bar.ChangeMax64(total)
				}
				_ = bar.Set64(n)
			}
		},
	})
	if bar != nil {
		if err == nil {
			_ = bar.Finish()
		}
		fmt.Fprintln(e.stderr)
	}
	if err != nil {
		return fmt.Errorf("projections rebuild: %w (nothing was swapped)", err)
	}
	// The rate is the replay's; the total adds the lock handover with the
	// live projectors and the swap.
	rate := float64(res.Events) / max(res.Replay.Seconds(), 1e-9)
	fmt.Fprintf(e.stdout, "booking: rebuilt %s from %d events in %s (replay %s, %.0f events/s); checkpoint %s\n",
		strings.Join(names, ", "), res.Events, res.Total.Round(time.Millisecond), res.Replay.Round(time.Millisecond), rate, res.Position)
	return nil
}

// progressBar returns a progress bar on w (events/s and ETA) when asked for
// or when w is a terminal, else nil.
func (c *rebuildCmd) progressBar(w io.Writer, total int64, what string) *progressbar.ProgressBar {
	if !c.showProgress(w) {
		return nil
	}
	return progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("rebuilding "+what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
	)
}

// showProgress reports whether a progress bar goes to w: asked for, or
// w is a terminal.
func (c *rebuildCmd) showProgress(w io.Writer) bool {
	show := c.Progress == "always"
	if c.Progress == "auto" {
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				show = true
			}
		}
	}
	return show
}

// newProjector returns the live projector of p for `booking serve`: it
// applies what arrives within projections.DefaultLinger in one transaction,
// and checks every yieldEvery for a waiting rebuild and then hands over its
// lock. Projectors made with one rebuildWaits share its check.
func newProjector(pool *pgxpool.Pool, locks *pgcoord.Locks, p *projections.Projection) *projections.Projector {
	return newSharedProjector(pool, newRebuildWaits(locks), p)
}

// newSharedProjector is newProjector with the rebuild check of waits.
func newSharedProjector(pool *pgxpool.Pool, waits *rebuildWaits, p *projections.Projection) *projections.Projector {
	name := projectorLock(p.Name())
	return projections.NewProjector(pool, p, projections.WithLinger(projections.DefaultLinger),
		projections.WithYield(yieldEvery, func(ctx context.Context) (bool, error) {
			return waits.waiting(ctx, name)
		}))
}

// yieldEvery is how often a live projector checks for a waiting rebuild.
const yieldEvery = 2 * time.Second

// rebuildWaits answers the live projectors' "does a rebuild wait for my
// lock?" with one statement for all of them (pgcoord.Locks.WaitingAmong of
// every projector lock) at most about once per yieldEvery: an answer less
// than 3/4 of yieldEvery old is reused. It holds one answer (a set of at
// most len(projections.Names()) names), replaced by the next. Safe for
// concurrent use.
type rebuildWaits struct {
	locks *pgcoord.Locks
	names []string

	mu  sync.Mutex
	at  time.Time // process clock, only to pace the checks
	ans map[string]bool
}

func newRebuildWaits(locks *pgcoord.Locks) *rebuildWaits {
	var names []string
	for _, n := range projections.Names() {
		names = append(names, projectorLock(n))
	}
	return &rebuildWaits{locks: locks, names: names}
}

func (w *rebuildWaits) waiting(ctx context.Context, name string) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ans == nil || time.Since(w.at) >= yieldEvery*3/4 {
		ans, err := w.locks.WaitingAmong(ctx, w.names)
		if err != nil {
			return false, err
		}
		w.ans, w.at = ans, time.Now()
	}
	return w.ans[name], nil
}
