package pgcoord

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

func newTestPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return pgtest.NewPool(tb, pgtest.NewDatabase(tb))
}

// waitFor polls cond every 10 ms until it holds or a minute has passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClockIsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	pool := newTestPool(t)
	ctx := context.Background()
	got, err := NewClock(pool).Now(ctx)
	if err != nil {
		t.Fatalf("Now() = %v", err)
	}
	var db time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if got.Location() != time.UTC || got.After(db) || db.Sub(got) > time.Minute {
		t.Errorf("Now() = %v, want UTC and at most a minute before the server's now() %v", got, db)
	}
}

func TestCheckpointsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cps := NewCheckpoints(newTestPool(t))
	if pos, err := cps.Load(ctx, "never"); err != nil || !pos.IsZero() {
		t.Fatalf("Load(never) = %s, %v; want the zero position", pos, err)
	}
	for _, want := range []eventstore.Position{{Commit: 7, Prepare: 3}, {Commit: 1 << 40, Prepare: 9}, {Commit: 5, Prepare: 1}} {
		if err := cps.Save(ctx, "follow-ups", want); err != nil {
			t.Fatalf("Save(%s) = %v", want, err)
		}
		if got, err := cps.Load(ctx, "follow-ups"); err != nil || got != want {
			t.Fatalf("Load after Save(%s) = %s, %v", want, got, err)
		}
	}
	if pos, err := cps.Load(ctx, "other"); err != nil || !pos.IsZero() {
		t.Errorf("Load(other) = %s, %v; want the zero position", pos, err)
	}
}

// TestSnapshotsRoundTrip: nothing before the first save, the last save
// after it, names independent.
func TestSnapshotsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newTestPool(t)
	snaps := NewSnapshots(pool, "logindex")
	if b, err := snaps.Load(ctx); err != nil || b != nil {
		t.Fatalf("Load before any save = %q, %v; want nil", b, err)
	}
	for _, want := range []string{`{"version":1}`, `{"version":1,"count":2}`} {
		if err := snaps.Save(ctx, []byte(want)); err != nil {
			t.Fatalf("Save(%s) = %v", want, err)
		}
		if got, err := snaps.Load(ctx); err != nil || string(got) != want {
			t.Fatalf("Load after Save(%s) = %q, %v", want, got, err)
		}
	}
	if b, err := NewSnapshots(pool, "other").Load(ctx); err != nil || b != nil {
		t.Errorf("Load(other) = %q, %v; want nil", b, err)
	}
}

// TestLocksTwoHolders: one holder at a time; a second TryAcquire fails with
// ErrLockHeld, a waiting Acquire shows in Waiting and gets the lock when the
// first is released; other names are independent.
func TestLocksTwoHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newTestPool(t)
	a, b := NewLocks(pool), NewLocks(pool)
	first, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire(job) = %v", err)
	}
	if _, err := b.TryAcquire(ctx, "job"); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("second TryAcquire(job) = %v, want ErrLockHeld", err)
	}
	other, err := b.TryAcquire(ctx, "other")
	if err != nil {
		t.Fatalf("TryAcquire(other) = %v", err)
	}
	other.Release()
	if w, err := a.Waiting(ctx, "job"); err != nil || w {
		t.Fatalf("Waiting(job) = %v, %v before any Acquire; want false", w, err)
	}
	got := make(chan *Lock, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, "job")
		if err != nil {
			errs <- err
			return
		}
		got <- l
	}()
	waitFor(t, "waiting Acquire", func() bool {
		w, err := a.Waiting(ctx, "job")
		return err == nil && w
	})
	// The same answer for several locks in one statement.
	if w, err := a.WaitingAmong(ctx, []string{"other", "job", "none"}); err != nil || !cmp.Equal(w, map[string]bool{"job": true}) {
		t.Errorf("WaitingAmong(other, job, none) = %v, %v; want only job", w, err)
	}
	select {
	case l := <-got:
		t.Fatalf("Acquire(job) = %v while the first holder holds it", l.Name())
	case err := <-errs:
		t.Fatalf("Acquire(job) = %v", err)
	default:
	}
	first.Release()
	first.Release() // a second Release does nothing
	var second *Lock
	select {
	case second = <-got:
	case err := <-errs:
		t.Fatalf("Acquire(job) = %v", err)
	case <-time.After(time.Minute):
		t.Fatal("Acquire(job) did not get the released lock within a minute")
	}
	if w, err := a.Waiting(ctx, "job"); err != nil || w {
		t.Errorf("Waiting(job) = %v, %v once acquired; want false", w, err)
	}
	if w, err := a.WaitingAmong(ctx, []string{"other", "job"}); err != nil || len(w) != 0 {
		t.Errorf("WaitingAmong(other, job) = %v, %v once acquired; want none", w, err)
	}
	if _, err := a.TryAcquire(ctx, "job"); !errors.Is(err, ErrLockHeld) {
		t.Errorf("TryAcquire(job) = %v while the second holder holds it, want ErrLockHeld", err)
	}
	second.Release()
	third, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire(job) after both released = %v", err)
	}
	third.Release()

	// A cancelled wait gives up with ctx's error and leaves nothing queued.
	holder, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if l, err := b.Acquire(wctx, "job"); err == nil {
		l.Release()
		t.Fatal("Acquire(job) with a short deadline got a held lock")
	}
	waitFor(t, "the cancelled wait to leave pg_locks", func() bool {
		w, err := a.Waiting(ctx, "job")
		return err == nil && !w
	})
}

// TestLocksLostSessionCancelsWork: RunExclusive runs one instance; when the
// holder's session is terminated, its work is cancelled and the standby
// takes over.
func TestLocksLostSessionCancelsWork(t *testing.T) {
	t.Parallel()
	pool := newTestPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var running, starts, ended atomic.Int32
	work := func(ctx context.Context) error {
		running.Add(1)
		starts.Add(1)
		<-ctx.Done()
		running.Add(-1)
		ended.Add(1)
		return ctx.Err()
	}
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			NewLocks(pool).RunExclusive(ctx, log, "worker", 10*time.Millisecond, work)
			done <- struct{}{}
		}()
	}
	waitFor(t, "a first start", func() bool { return starts.Load() == 1 })
	// The standby keeps trying every 10 ms and never gets in.
	for range 20 {
		l, err := NewLocks(pool).TryAcquire(ctx, "worker")
		if !errors.Is(err, ErrLockHeld) {
			t.Fatalf("TryAcquire(worker) = %v while RunExclusive holds it, want ErrLockHeld", err)
		}
		_ = l
	}
	if n := starts.Load(); n != 1 {
		t.Fatalf("%d starts while the first holder lives, want 1", n)
	}
	key := uint64(Key("worker"))
	if _, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid = $1::bigint::oid AND objid = $2::bigint::oid`,
		int64(key>>32), int64(key&0xffffffff)); err != nil {
		t.Fatal(err)
	}
	// The holder notices at its next ping and its work is cancelled; one of
	// the two starts it again.
	waitFor(t, "the first work cancelled after its session was terminated", func() bool { return ended.Load() == 1 })
	waitFor(t, "a second start after the session was terminated", func() bool { return starts.Load() == 2 })
	cancel()
	for range 2 {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("RunExclusive did not return within a minute of ctx done")
		}
	}
	if n := running.Load(); n != 0 {
		t.Errorf("%d instances still running after RunExclusive returned", n)
	}
}

// TestLeasesFencing: a held lease is not taken; an expired one is, with the
// next token and the saved checkpoint; the stale token can neither renew,
// nor move the checkpoint.
func TestLeasesFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newTestPool(t)
	ls := NewLeases(pool)
	if _, err := ls.State(ctx, "x"); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("State(x) = %v before any Acquire, want pgx.ErrNoRows", err)
	}
	l1, err := ls.Acquire(ctx, "x", "one", time.Minute)
	if err != nil || l1.Token() != 1 || !l1.Checkpoint().IsZero() {
		t.Fatalf("Acquire = %v; want token 1 at the zero checkpoint", err)
	}
	if _, err := ls.Acquire(ctx, "x", "two", time.Minute); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("Acquire of a held lease = %v, want ErrLeaseHeld", err)
	}
	if err := l1.SaveCheckpoint(ctx, eventstore.Position{Commit: 5, Prepare: 7}); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := ls.Acquire(ctx, "x", "two", time.Minute)
	if err != nil || l2.Token() != 2 || l2.Checkpoint() != (eventstore.Position{Commit: 5, Prepare: 7}) {
		t.Fatalf("Acquire after Release = %v; want token 2 at 5/7", err)
	}
	if err := l1.SaveCheckpoint(ctx, eventstore.Position{Commit: 9}); !errors.Is(err, ErrFenced) {
		t.Errorf("stale SaveCheckpoint = %v, want ErrFenced", err)
	}
	if err := ls.Held("x", 1, time.Minute).Renew(ctx); !errors.Is(err, ErrFenced) {
		t.Errorf("stale Renew = %v, want ErrFenced", err)
	}
	if err := l2.Renew(ctx); err != nil {
		t.Errorf("Renew = %v", err)
	}
	st, err := ls.State(ctx, "x")
	if err != nil || st.Owner != "two" || st.Token != 2 || st.Checkpoint != (eventstore.Position{Commit: 5, Prepare: 7}) {
		t.Errorf("State(x) = %+v, %v; want two's token 2 at 5/7", st, err)
	}
}
