package pgcoord

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/internal/tick"
)

// ErrLockHeld is returned by Locks.TryAcquire when another session holds
// the lock.
var ErrLockHeld = errors.New("pgcoord: lock held by another instance")

// Locks are named PostgreSQL session advisory locks
// (pg_try_advisory_lock, pg_advisory_lock): one holder at a time across
// every process on the database. Each held lock keeps a pooled connection
// of its own for as long as it is held, so size the pool for them. Create
// it with NewLocks; it is safe for concurrent use.
//
// A holder proves every LockPing that it is alive; its session ends when
// it stays silent for IdleSessionTimeout (PostgreSQL 14+
// idle_session_timeout), which releases the lock, so a paused holder (a
// SIGSTOP, a VM freeze) cannot keep it. Whatever the holders of the
// service's locks write is fenced by expected revisions, so a resumed
// holder does no harm before it notices the loss (Lock.Lost).
type Locks struct{ pool *pgxpool.Pool }

// NewLocks returns the advisory locks of pool's database.
func NewLocks(pool *pgxpool.Pool) *Locks { return &Locks{pool: pool} }

// LockPing is how often a holder proves its session is alive;
// IdleSessionTimeout is how long PostgreSQL waits for that proof before
// ending the session and with it the lock.
const (
	LockPing           = 2 * time.Second
	IdleSessionTimeout = 3*LockPing + time.Second
)

// Key returns the 64-bit advisory lock key of the lock name: the FNV-64a
// hash of "booking-worker:" + name, as a signed bigint. It is stable, so
// operators can find a holder in pg_locks (classid = high 32 bits, objid =
// low 32 bits, objsubid = 1).
func Key(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("booking-worker:" + name))
	return int64(h.Sum64())
}

// TryAcquire takes the lock name if no other session holds it, without
// waiting. Returns ErrLockHeld if another session holds it, or a wrapped
// error if the database fails. Release the returned Lock when done.
func (ls *Locks) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	return ls.acquire(ctx, name, false)
}

// Acquire waits until it holds the lock name, or until ctx is done (then
// it returns ctx's error, wrapped, and the wait ends on the server too).
// Holders that call Waiting see the wait and may give the lock up. Returns
// a wrapped error if the database fails. Release the returned Lock when
// done.
func (ls *Locks) Acquire(ctx context.Context, name string) (*Lock, error) {
	return ls.acquire(ctx, name, true)
}

func (ls *Locks) acquire(ctx context.Context, name string, wait bool) (*Lock, error) {
	conn, err := ls.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgcoord: lock %q: %w", name, err)
	}
	drop := func() {
		// Closing the session also ends a wait the server still has queued.
		conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET idle_session_timeout = %d", IdleSessionTimeout.Milliseconds())); err != nil {
		drop()
		return nil, fmt.Errorf("pgcoord: lock %q: %w", name, err)
	}
	got := true
	if wait {
		_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", Key(name))
	} else {
		err = conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", Key(name)).Scan(&got)
	}
	if err != nil {
		drop()
		return nil, fmt.Errorf("pgcoord: lock %q: %w", name, err)
	}
	if !got {
		// Back to the pool as an ordinary session.
		if _, err := conn.Exec(ctx, "RESET idle_session_timeout"); err != nil {
			drop()
		} else {
			conn.Release()
		}
		return nil, ErrLockHeld
	}
	// The pinger outlives the caller's ctx: only Release stops it.
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	unlock := func() {
		// Unlock before closing: the server ends a closed session a moment
		// later, so without it the lock would still look held to whoever
		// tries right after Release returns. Closing releases it anyway if
		// the unlock cannot be sent.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", Key(name))
		drop()
	}
	l := &Lock{name: name, lost: make(chan struct{}), stop: stop, stopped: make(chan struct{}), release: unlock}
	go l.ping(pctx, conn)
	return l, nil
}

// waitingSQL finds a session waiting for a single-bigint advisory lock,
// which pg_locks shows as classid = high 32 bits, objid = low 32 bits,
// objsubid = 1.
const waitingSQL = `SELECT EXISTS (SELECT 1 FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = $1::bigint::oid AND objid = $2::bigint::oid)`

// Waiting reports whether some session waits (Acquire) for the lock name,
// so its holder can hand it over. Returns a wrapped error if the query
// fails.
func (ls *Locks) Waiting(ctx context.Context, name string) (bool, error) {
	key := uint64(Key(name))
	var waiting bool
	if err := ls.pool.QueryRow(ctx, waitingSQL, int64(key>>32), int64(key&0xffffffff)).Scan(&waiting); err != nil {
		return false, fmt.Errorf("pgcoord: lock %q waiting: %w", name, err)
	}
	return waiting, nil
}

// waitingAmongSQL is waitingSQL for several locks at once: the ordinals
// (1-based) of the keys some session waits for.
const waitingAmongSQL = `SELECT k.i FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS k (classid, objid, i)
WHERE EXISTS (SELECT 1 FROM pg_locks l
WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = k.classid::oid AND l.objid = k.objid::oid)`

// WaitingAmong is Waiting for every lock of names in one statement: it
// returns the names some session waits for (Acquire), so several holders
// can share one check. Returns a wrapped error if the query fails.
func (ls *Locks) WaitingAmong(ctx context.Context, names []string) (map[string]bool, error) {
	hi, lo := make([]int64, len(names)), make([]int64, len(names))
	for i, n := range names {
		key := uint64(Key(n))
		hi[i], lo[i] = int64(key>>32), int64(key&0xffffffff)
	}
	rows, err := ls.pool.Query(ctx, waitingAmongSQL, hi, lo)
	if err != nil {
		return nil, fmt.Errorf("pgcoord: locks waiting: %w", err)
	}
	ords, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("pgcoord: locks waiting: %w", err)
	}
	out := make(map[string]bool, len(ords))
	for _, i := range ords {
		out[names[i-1]] = true
	}
	return out, nil
}

// RunExclusive runs work while this process holds the lock name, so one
// instance of work runs across replicas. A standby tries the lock again
// every retry. If the lock's session dies, work's context is cancelled and
// the lock is tried again; if work returns, it is restarted after retry
// (an error other than context.Canceled is logged on log first). It blocks
// until ctx is done and then returns once work has returned.
func (ls *Locks) RunExclusive(ctx context.Context, log *slog.Logger, name string, retry time.Duration, work func(ctx context.Context) error) {
	for ctx.Err() == nil {
		err := ls.holdAndRun(ctx, name, work)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, ErrLockHeld) {
			log.Warn("worker stopped; restarting", "worker", name, "err", err)
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// holdAndRun runs work once under the lock name, cancelling it when the
// lock is lost.
func (ls *Locks) holdAndRun(ctx context.Context, name string, work func(ctx context.Context) error) error {
	l, err := ls.TryAcquire(ctx, name)
	if err != nil {
		return err
	}
	defer l.Release()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.Lost():
			cancel()
		case <-wctx.Done():
		}
	}()
	err = work(wctx)
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// Lock is one held advisory lock, from Locks.TryAcquire or Locks.Acquire.
// Its methods are safe for concurrent use.
type Lock struct {
	name    string
	lost    chan struct{}      // closed when the session is gone
	stop    context.CancelFunc // called by Release
	stopped chan struct{}      // closed when the pinger has returned
	once    sync.Once
	release func()
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Lost returns a channel that is closed when the lock's session stopped
// answering (and so PostgreSQL released, or will release, the lock). It is
// never closed by Release.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Release gives the lock up: it unlocks (so the lock is free when Release
// returns), then closes its session (which releases it even if the network
// is gone) and returns the connection's slot to the pool. It may be called
// more than once.
func (l *Lock) Release() {
	l.once.Do(func() {
		l.stop()
		<-l.stopped
		l.release()
	})
}

// ping proves the session alive every LockPing until ctx is done
// (Release), and closes lost when a ping fails.
func (l *Lock) ping(ctx context.Context, conn *pgxpool.Conn) {
	defer close(l.stopped)
	tick.Every(ctx, LockPing, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := conn.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			close(l.lost)
			return false
		}
		return true
	})
}
