package projections

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgcoord"
)

// takeLock waits for the projector lock of name (pgcoord.Locks, as
// `booking projections rebuild` does).
func takeLock(pool *pgxpool.Pool) func(ctx context.Context, name string) (func(), error) {
	locks := pgcoord.NewLocks(pool)
	return func(ctx context.Context, name string) (func(), error) {
		l, err := locks.Acquire(ctx, "projection:"+name)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

// runExclusive runs the live projectors of ps, each only while it holds its
// lock (pgcoord.Locks.RunExclusive, as `booking serve` does), yielding it to
// a waiting rebuild and trying again every 10 ms.
func runExclusive(t *testing.T, ctx context.Context, db *testDB, ps []*Projection, yields *sync.Map) func() {
	var wg sync.WaitGroup
	locks := pgcoord.NewLocks(db.pool)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "projection:" + p.name
			pr := NewProjector(db.pool, p, WithMaxBatch(50), WithYield(10*time.Millisecond, func(ctx context.Context) (bool, error) {
				return locks.Waiting(ctx, name)
			}))
			locks.RunExclusive(ctx, log, name, 10*time.Millisecond, func(wctx context.Context) error {
				err := pr.Run(wctx, db.store)
				if err == nil && ctx.Err() == nil {
					n, _ := yields.LoadOrStore(p.name, new(int))
					*(n.(*int))++
				} else if err != nil && ctx.Err() == nil {
					t.Errorf("projector %s: %v", p.name, err)
				}
				return err
			})
		}()
	}
	return wg.Wait
}

func assertNoRebuildTables(t *testing.T, db *testDB) {
	t.Helper()
	var n int
	if err := db.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_class WHERE relname LIKE 'rm\_%\_rebuild\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rebuild tables left behind, want 0", n)
	}
}

func mustRebuild(t *testing.T, db *testDB, ps []*Projection, o RebuildOptions) RebuildResult {
	t.Helper()
	res, err := Rebuild(context.Background(), db.pool, db.store, ps, o)
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	return res
}

// startLive starts, on a fresh database, the live projectors of
// All(time.Hour) in batches of at most 40 until ctx ends, and returns the
// database, those projections, an appender on its log and the function
// that waits for the projectors to stop.
func startLive(t *testing.T, ctx context.Context) (*testDB, []*Projection, *appender, func()) {
	t.Helper()
	db := mustDB(t)
	ps := All(time.Hour)
	wait := runAll(t, ctx, db, ps, WithMaxBatch(40))
	return db, ps, &appender{tb: t, store: db.store, clock: &clock{}}, wait
}

// purgeAndRecordAgain truncates the intent stream before its revision 1,
// as the purge job does once the intent expired, and records alice's order
// intent on it again at revision 1, as a reuse of its key does.
func purgeAndRecordAgain(t *testing.T, ctx context.Context, db *testDB, a *appender, stream string) {
	t.Helper()
	if err := db.store.Truncate(ctx, stream, 1); err != nil {
		t.Fatal(err)
	}
	d, err := eventstore.Encode(newID(), intentOf("alice", opPlaceOrder), eventstore.Metadata{OccurredAt: a.clock.now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.store.Append(ctx, stream, eventstore.Exact(0), d); err != nil {
		t.Fatal(err)
	}
}

// TestRebuildEqualsLive runs the live projectors during a mixed workload
// (with intents past their retention, one of them purged and recorded
// again), then rebuilds twice: both times the tables equal the live ones
// row for row, every column, and so do the checkpoints.
func TestRebuildEqualsLive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, ps, a, wait := startLive(t, ctx)

	old := epoch.Add(-3 * time.Hour)
	purged, expired := "intent-purged", "intent-expired"
	a.addAt(ctx, purged, old, intentOf("alice", opPlaceOrder))
	a.addAt(ctx, expired, old, intentOf("bob", opPlaceOrder), domain.IntentRejected{Status: 409, Code: "x"})
	workload{shows: 6, perShow: 30, workers: 6, seed: 3}.run(ctx, a)
	// The purge job truncates the expired stream; the key is used again.
	purgeAndRecordAgain(t, ctx, db, a, purged)
	workload{shows: 1, perShow: 5, workers: 1, seed: 4}.run(ctx, a)
	waitCaughtUp(t, ctx, db, ps)
	cancel()
	wait()
	checkModel(t, context.Background(), db)

	live := dump(t, context.Background(), db.pool)
	var intents []string
	for _, row := range live["rm_intents"] {
		if strings.Contains(row, purged) || strings.Contains(row, expired) {
			intents = append(intents, row)
		}
	}
	if len(intents) != 1 || !strings.Contains(intents[0], `"revision": 1`) {
		t.Errorf("live intents of the retention scenario = %v, want only %s at revision 1", intents, purged)
	}
	for _, rows := range live {
		for _, row := range rows {
			if strings.Contains(row, "tok_secret") || strings.Contains(row, "payment_token") || strings.Contains(row, "request_body") {
				t.Fatalf("a secret was projected: %s", row)
			}
		}
	}
	last := waitHorizon(t, context.Background(), db)
	for i := range 2 {
		res := mustRebuild(t, db, ps, RebuildOptions{Guard: func(context.Context, string) (func(), error) { return func() {}, nil }})
		got := dump(t, context.Background(), db.pool)
		if diff := cmp.Diff(live, got); diff != "" {
			t.Fatalf("rebuild %d differs from live (-live +rebuild):\n%s", i+1, diff)
		}
		if res.Position != last {
			t.Errorf("rebuild %d swapped in position %s, want the last event's %s", i+1, res.Position, last)
		}
		if res.Events != int64(mustModel(t, context.Background(), db).events) {
			t.Errorf("rebuild %d read %d events, the store has %d", i+1, res.Events, mustModel(t, context.Background(), db).events)
		}
	}
	assertNoRebuildTables(t, db)
	t.Logf("%d events, %d rows", a.n.Load(), len(live["rm_orders"])+len(live["rm_intents"]))
}

// TestRebuildTakesOverFromLive rebuilds while live projectors hold their
// locks and appenders keep appending: each live projector yields its lock,
// the rebuild catches up and swaps, the live projector resumes from the
// swapped checkpoint, and the result equals an offline rebuild.
func TestRebuildTakesOverFromLive(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ps := All(24 * time.Hour)
	var yields sync.Map
	wait := runExclusive(t, ctx, db, ps, &yields)
	a := workload{shows: 3, perShow: 20, workers: 3, seed: 5}.appendTo(t, ctx, db.store)
	waitCaughtUp(t, ctx, db, ps)

	appending := make(chan struct{})
	go func() {
		defer close(appending)
		workload{shows: 6, perShow: 30, workers: 3, seed: 6}.run(ctx, a)
	}()
	res := mustRebuild(t, db, ps, RebuildOptions{Lock: takeLock(db.pool), BatchSize: 100})
	<-appending
	waitCaughtUp(t, ctx, db, ps)
	cancel()
	wait()
	for _, p := range ps {
		if n, ok := yields.Load(p.name); !ok || *(n.(*int)) == 0 {
			t.Errorf("live projector %s never yielded its lock", p.name)
		}
	}
	if res.Position.IsZero() {
		t.Errorf("rebuild swapped in position %s", res.Position)
	}
	checkModel(t, context.Background(), db)
	live := dump(t, context.Background(), db.pool)
	waitHorizon(t, context.Background(), db)
	mustRebuild(t, db, ps, RebuildOptions{})
	if diff := cmp.Diff(live, dump(t, context.Background(), db.pool)); diff != "" {
		t.Fatalf("offline rebuild differs from live after the takeover (-live +rebuild):\n%s", diff)
	}
	assertNoRebuildTables(t, db)
}

// failingLog fails the read after n successful ones.
type failingLog struct {
	LogReader
	n int
}

var errLogDown = errors.New("log unavailable")

func (f *failingLog) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if f.n == 0 {
		return nil, errLogDown
	}
	f.n--
	return f.LogReader.ReadAll(ctx, after, limit)
}

// TestRebuildFailureSwapsNothing fails a rebuild midway (and one whose
// context is cancelled): a clear error, the live tables and checkpoints
// untouched, the partial tables dropped; leftovers of a crashed rebuild are
// dropped by the next one.
func TestRebuildFailureSwapsNothing(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx := context.Background()
	workload{shows: 2, perShow: 30, workers: 2, seed: 7}.appendTo(t, ctx, db.fast)
	ps := All(24 * time.Hour)
	waitHorizon(t, ctx, db)
	mustRebuild(t, db, ps, RebuildOptions{})
	before := dump(t, ctx, db.pool)

	_, err := Rebuild(ctx, db.pool, &failingLog{LogReader: db.store, n: 3}, ps, RebuildOptions{BatchSize: 50})
	if !errors.Is(err, errLogDown) || !strings.Contains(err.Error(), "replay") {
		t.Errorf("Rebuild with a failing log = %v, want a replay error wrapping %v", err, errLogDown)
	}
	cctx, cancel := context.WithCancel(ctx)
	calls := 0
	_, err = Rebuild(cctx, db.pool, db.store, ps, RebuildOptions{BatchSize: 50, Progress: func(int64) {
		if calls++; calls == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Rebuild cancelled midway = %v, want context.Canceled", err)
	}
	if diff := cmp.Diff(before, dump(t, ctx, db.pool)); diff != "" {
		t.Errorf("a failed rebuild changed the read models (-before +after):\n%s", diff)
	}
	assertNoRebuildTables(t, db)

	// A crashed rebuild's leftovers go with the next guarded rebuild.
	if _, err := db.pool.Exec(ctx, `CREATE TABLE rm_orders_rebuild_999 (LIKE rm_orders INCLUDING ALL)`); err != nil {
		t.Fatal(err)
	}
	mustRebuild(t, db, ps, RebuildOptions{Guard: func(context.Context, string) (func(), error) { return func() {}, nil }})
	assertNoRebuildTables(t, db)
	if diff := cmp.Diff(before, dump(t, ctx, db.pool)); diff != "" {
		t.Errorf("rebuild after a failure differs (-before +after):\n%s", diff)
	}
	// The index names survive swaps.
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE indexname IN ('rm_orders_pkey', 'rm_orders_actor_idx', 'rm_orders_unknown_idx', 'rm_shows_starts_at_idx')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d of the 4 named indexes exist after rebuilds", n)
	}
}

// TestRebuildWithFewRowsInMemoryEqualsLive rebuilds with room for only a
// few rows per table in memory, so the bulk fill writes rows out and reads
// them back when the log touches them again (intents past their retention
// among them, one purged and recorded again): the tables still equal the
// live ones row for row.
func TestRebuildWithFewRowsInMemoryEqualsLive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, ps, a, wait := startLive(t, ctx)

	purged := "intent-purged"
	a.addAt(ctx, purged, epoch.Add(-3*time.Hour), intentOf("alice", opPlaceOrder))
	workload{shows: 6, perShow: 20, workers: 6, seed: 11}.run(ctx, a)
	purgeAndRecordAgain(t, ctx, db, a, purged)
	workload{shows: 1, perShow: 5, workers: 1, seed: 12}.run(ctx, a)
	waitCaughtUp(t, ctx, db, ps)
	cancel()
	wait()
	live := dump(t, context.Background(), db.pool)
	waitHorizon(t, context.Background(), db)
	res := mustRebuild(t, db, ps, RebuildOptions{MaxRows: 4, BatchSize: 20})
	if diff := cmp.Diff(live, dump(t, context.Background(), db.pool)); diff != "" {
		t.Fatalf("rebuild with 4 rows per table in memory differs from live (-live +rebuild):\n%s", diff)
	}
	if res.Evicted == 0 || res.ReadBack == 0 {
		t.Errorf("rebuild evicted %d rows and read back %d, want both above 0", res.Evicted, res.ReadBack)
	}
	assertNoRebuildTables(t, db)
	t.Logf("%d events; %d rows evicted, %d read back", a.n.Load(), res.Evicted, res.ReadBack)
}

// rebuiltAt returns rebuilt_at of every read model's checkpoint.
func rebuiltAt(t *testing.T, ctx context.Context, db *testDB) map[string]time.Time {
	t.Helper()
	rows, err := db.pool.Query(ctx, `SELECT name, rebuilt_at FROM projection_checkpoints WHERE rebuilt_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	var name string
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&name, &at}, func() error { out[name] = at; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRebuildSwapTellsItsOutcome: a cancellation that lands while the
// swap commits does not stop it (the rebuild succeeds, every read model
// swapped in); a commit whose answer is lost is read back — swapped when
// it committed, an ordinary error when it did not and its server process
// is gone, and a *SwapUnknownError, whose query tells the truth, when that
// cannot be known. The read models' rows stay equal in every case.
func TestRebuildSwapTellsItsOutcome(t *testing.T) {
	t.Parallel()
	db := mustDB(t)
	ctx := context.Background()
	workload{shows: 2, perShow: 20, workers: 2, seed: 13}.appendTo(t, ctx, db.fast)
	ps := All(24 * time.Hour)
	waitHorizon(t, ctx, db)
	mustRebuild(t, db, ps, RebuildOptions{})
	before := dump(t, ctx, db.pool)
	errLost := errors.New("connection reset (the commit's answer)")
	tests := []struct {
		name        string
		commit      func(cancel func()) func(context.Context, pgx.Tx) error
		wantSwapped bool
		wantUnknown bool
	}{
		{"cancelled while committing", func(cancel func()) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error { cancel(); return tx.Commit(ctx) }
		}, true, false},
		{"answer lost after the commit", func(func()) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error { return errors.Join(tx.Commit(ctx), errLost) }
		}, true, false},
		{"server process ended before the commit", func(func()) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if _, err := db.pool.Exec(ctx, `SELECT pg_terminate_backend($1, 60000)`, int64(tx.Conn().PgConn().PID())); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}
		}, false, false},
		{"answer lost while the transaction is open", func(func()) func(context.Context, pgx.Tx) error {
			return func(context.Context, pgx.Tx) error { return errLost }
		}, false, true},
	}
	for _, tt := range tests {
		prev := rebuiltAt(t, ctx, db)
		cctx, cancel := context.WithCancel(ctx)
		_, err := Rebuild(cctx, db.pool, db.store, ps, RebuildOptions{commit: tt.commit(cancel)})
		cancel()
		var unknown *SwapUnknownError
		if gotUnknown := errors.As(err, &unknown); (err == nil) != tt.wantSwapped || gotUnknown != tt.wantUnknown {
			t.Errorf("%s: Rebuild = %v, want swapped %v, unknown outcome %v", tt.name, err, tt.wantSwapped, tt.wantUnknown)
		}
		after := rebuiltAt(t, ctx, db)
		for _, p := range ps {
			if swapped := after[p.name].After(prev[p.name]); swapped != tt.wantSwapped {
				t.Errorf("%s: %s swapped in = %v, want %v", tt.name, p.name, swapped, tt.wantSwapped)
			}
		}
		if unknown != nil { // the query the error gives answers "not swapped"
			q := regexp.MustCompile("`(SELECT [^`]+)`").FindStringSubmatch(unknown.Error())
			if q == nil || len(queryNames(t, ctx, db, q[1])) != 0 {
				t.Errorf("%s: %q does not give a query answering no read model", tt.name, unknown.Error())
			}
		}
		if diff := cmp.Diff(before, dump(t, ctx, db.pool)); diff != "" {
			t.Errorf("%s: read models changed (-before +after):\n%s", tt.name, diff)
		}
		assertNoRebuildTables(t, db)
	}
}

// queryNames returns the one text column of every row of sql.
func queryNames(t *testing.T, ctx context.Context, db *testDB, sql string) []string {
	t.Helper()
	rows, err := db.pool.Query(ctx, sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}
