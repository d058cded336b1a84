package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"

	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations"
	"github.com/retrysafe/booking/projections"
)

// rebuildCmd is `booking projections rebuild [NAME...]`.
type rebuildCmd struct {
	DatabaseURL     string        `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL (event store and read models)."`
	IntentRetention time.Duration `name:"intent-retention" env:"BOOKING_INTENT_RETENTION" default:"24h" help:"Intent retention the intents view applies (the service's value)."`
	LockTimeout     time.Duration `name:"lock-timeout" default:"2m" help:"How long to wait for a running service's projectors to hand over their locks."`
	Progress        string        `name:"progress" default:"auto" enum:"auto,always,never" help:"Progress bar on stderr: auto (only on a terminal), always, never."`
	Names           []string      `arg:"" optional:"" help:"Read models to rebuild: orders, reservations, shows, intents (default: all)."`
}

// projectorLock is the runExclusive name (and so the advisory lock) of the
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
	if c.DatabaseURL == "" {
		return configError("DATABASE_URL", "required (a postgres:// URL)")
	}
	if c.IntentRetention <= 0 {
		return configError("BOOKING_INTENT_RETENTION", "must be a positive duration such as 24h")
	}
	ps, err := projections.Select(c.Names, c.IntentRetention)
	if err != nil {
		return err
	}
	ctx := e.ctx
	if err := migrations.Up(ctx, c.DatabaseURL); err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	poolCfg, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return configError("DATABASE_URL", "%v", err)
	}
	// Locks hold a connection each; the reader and the writer one more each.
	poolCfg.MaxConns = max(poolCfg.MaxConns, int32(2*len(ps)+4))
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()

	var total int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&total); err != nil {
		return fmt.Errorf("count events: %w", err)
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name()
	}
	bar := c.progressBar(e.stderr, total, strings.Join(names, ", "))
	res, err := projections.Rebuild(ctx, pool, pgstore.New(pool), ps, projections.RebuildOptions{
		Guard: func(ctx context.Context, name string) (func(), error) { return tryLock(ctx, pool, rebuildGuard(name)) },
		Lock: func(ctx context.Context, name string) (func(), error) {
			lctx, cancel := context.WithTimeout(ctx, c.LockTimeout)
			defer cancel()
			release, err := waitLock(lctx, pool, projectorLock(name))
			if err != nil && ctx.Err() == nil && lctx.Err() != nil {
				return nil, fmt.Errorf("the live projector did not hand over its lock within %s (--lock-timeout): %w", c.LockTimeout, err)
			}
			return release, err
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
	rate := float64(res.Events) / max(res.Total.Seconds(), 1e-9)
	fmt.Fprintf(e.stdout, "booking: rebuilt %s from %d events in %s (%.0f events/s); checkpoint %s\n",
		strings.Join(names, ", "), res.Events, res.Total.Round(time.Millisecond), rate, res.Position)
	return nil
}

// progressBar returns a progress bar on w (events/s and ETA) when asked for
// or when w is a terminal, else nil.
func (c *rebuildCmd) progressBar(w io.Writer, total int64, what string) *progressbar.ProgressBar {
	show := c.Progress == "always"
	if c.Progress == "auto" {
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				show = true
			}
		}
	}
	if !show {
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

// tryLock takes the session advisory lock of name on a connection of its
// own, or fails at once if another session holds it. The returned function
// releases it (by closing the session).
func tryLock(ctx context.Context, pool *pgxpool.Pool, name string) (func(), error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockKey(name)).Scan(&got); err != nil || !got {
		conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
		if err == nil {
			err = errors.New("another rebuild of it is running")
		}
		return nil, err
	}
	return func() {
		conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
	}, nil
}

// waitLock waits for the session advisory lock of name on a connection of
// its own; a live projector that sees the wait (lockWaiting) gives it up.
// The returned function releases it.
func waitLock(ctx context.Context, pool *pgxpool.Pool, name string) (func(), error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey(name)); err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx)) // also ends a wait the server still has queued
		conn.Release()
		return nil, err
	}
	return func() {
		conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
	}, nil
}

const sqlLockWaiting = `SELECT EXISTS (SELECT 1 FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = $1::bigint::oid AND objid = $2::bigint::oid)`

// lockWaiting reports whether a session waits for the advisory lock of name
// (a single-bigint key shows in pg_locks as classid = high 32 bits, objid =
// low 32 bits, objsubid = 1).
func lockWaiting(pool *pgxpool.Pool, name string) func(ctx context.Context) (bool, error) {
	key := uint64(lockKey(name))
	return func(ctx context.Context) (bool, error) {
		var waiting bool
		err := pool.QueryRow(ctx, sqlLockWaiting, int64(key>>32), int64(key&0xffffffff)).Scan(&waiting)
		return waiting, err
	}
}

// newProjector returns the live projector of p for `booking serve`: it
// checks every second for a waiting rebuild and then hands over its lock.
func newProjector(pool *pgxpool.Pool, p *projections.Projection) *projections.Projector {
	return projections.NewProjector(pool, p, projections.WithYield(time.Second, lockWaiting(pool, projectorLock(p.Name()))))
}
