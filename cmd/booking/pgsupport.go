package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// dbClock is the database clock: PostgreSQL's now() on its own statement.
type dbClock struct{ pool *pgxpool.Pool }

// Now returns PostgreSQL's now() in UTC, or the connection error.
func (c dbClock) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := c.pool.QueryRow(ctx, "SELECT now()").Scan(&t)
	return t.UTC(), err
}

// pgCheckpoints stores named consumer positions in table checkpoints.
type pgCheckpoints struct{ pool *pgxpool.Pool }

// Load returns the saved position of name, or the zero Position.
func (c pgCheckpoints) Load(ctx context.Context, name string) (eventstore.Position, error) {
	var commit, prepare int64
	err := c.pool.QueryRow(ctx, "SELECT commit_tx, prepare FROM checkpoints WHERE name = $1", name).Scan(&commit, &prepare)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Position{}, nil
	}
	return eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}, err
}

// Save stores pos as name's position.
func (c pgCheckpoints) Save(ctx context.Context, name string, pos eventstore.Position) error {
	_, err := c.pool.Exec(ctx, `INSERT INTO checkpoints (name, commit_tx, prepare) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET commit_tx = excluded.commit_tx, prepare = excluded.prepare, updated_at = now()`,
		name, int64(pos.Commit), int64(pos.Prepare))
	return err
}

// lockKey maps a worker name to a PostgreSQL advisory lock key.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("booking-worker:" + name))
	return int64(h.Sum64())
}

// runExclusive runs work while this process holds the session advisory lock
// of name, so one instance runs across replicas (DESIGN §7). A standby retries
// every retry; if the lock's connection dies, work's context is cancelled and
// the lock is tried again. It blocks until ctx is done.
func runExclusive(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, name string, retry time.Duration, work func(ctx context.Context) error) {
	for ctx.Err() == nil {
		err := holdAndRun(ctx, pool, name, work)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, errNotLeader) {
			log.Warn("worker stopped; restarting", "worker", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

var errNotLeader = errors.New("lock held by another instance")

// lockPing is how often a lock holder proves it is alive; idleSessionTimeout
// is how long PostgreSQL waits for that proof before ending the session and
// releasing the lock (PostgreSQL 14+ idle_session_timeout).
const (
	lockPing           = 2 * time.Second
	idleSessionTimeout = 3*lockPing + time.Second
)

func holdAndRun(ctx context.Context, pool *pgxpool.Pool, name string, work func(ctx context.Context) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The session lock lives as long as this connection: never return it to
	// the pool holding the lock.
	defer conn.Release()
	// A holder that is paused (SIGSTOP, a VM freeze) stops pinging; its idle
	// session then ends after idleSessionTimeout and PostgreSQL releases the
	// lock, so a standby takes over. Everything the workers append is fenced
	// by expected revisions, so a resumed holder cannot do harm meanwhile.
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET idle_session_timeout = %d", idleSessionTimeout.Milliseconds())); err != nil {
		conn.Conn().Close(context.Background())
		return err
	}
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", lockKey(name)).Scan(&got); err != nil {
		conn.Conn().Close(context.Background())
		return err
	}
	if !got {
		// Back to the pool as an ordinary session.
		if _, err := conn.Exec(ctx, "RESET idle_session_timeout"); err != nil {
			conn.Conn().Close(context.Background())
		}
		return errNotLeader
	}
	defer func() {
		// Closing the session releases the lock even if unlock fails.
		conn.Conn().Close(context.Background())
	}()
	wctx, cancel := context.WithCancel(ctx)
	pingDone := make(chan struct{})
	// Deferred calls run last in, first out: the pinger has stopped before the
	// connection is closed and released above.
	defer func() { cancel(); <-pingDone }()
	go func() {
		defer close(pingDone)
		t := time.NewTicker(lockPing)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				if wctx.Err() != nil {
					return
				}
				pctx, pc := context.WithTimeout(wctx, 2*time.Second)
				err := conn.Ping(pctx)
				pc()
				if err != nil && wctx.Err() == nil {
					cancel() // lost the session, and with it the lock
					return
				}
			}
		}
	}()
	err = work(wctx)
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}
