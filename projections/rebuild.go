package projections

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// DefaultRebuildBatch is how many events Rebuild reads and applies at once
// unless RebuildOptions.BatchSize says otherwise.
const DefaultRebuildBatch = 2000

// RebuildOptions configures Rebuild. Every field is optional.
type RebuildOptions struct {
	// Guard is taken for each projection, in order, before anything else
	// and released at the end; it keeps two rebuilds of one projection
	// apart (with it held, leftover tables of a crashed rebuild are
	// dropped). It should fail at once when another rebuild holds it.
	Guard func(ctx context.Context, name string) (release func(), err error)
	// Lock takes the lock of the live projector of name, waiting for it
	// (a live projector gives it up, see WithYield). Rebuild holds it from
	// the final catch-up to the swap, so no live batch runs in between.
	Lock func(ctx context.Context, name string) (release func(), err error)
	// Progress is called from Rebuild's goroutine after each applied batch
	// with the number of events read from the log so far.
	Progress func(events int64)
	// BatchSize is the number of events per read of the log and per
	// transaction of the final catch-up (default DefaultRebuildBatch).
	BatchSize int
	// MaxRows bounds the rows of one table kept in memory during the
	// bulk fill (default DefaultRebuildRows; negative: no bound). Beyond
	// it the least recently touched quarter is written out and read back
	// when the log touches it again.
	MaxRows int

	// commit ends the swap's transaction (nil: tx.Commit); tests replace
	// it to lose the commit's answer or to act while it runs.
	commit func(ctx context.Context, tx pgx.Tx) error
}

// RebuildResult describes a finished rebuild.
type RebuildResult struct {
	Events   int64               // events read from the log
	Position eventstore.Position // the checkpoint swapped in with the tables
	Replay   time.Duration       // time to fill the tables up to the log's head and index them, before locking
	Total    time.Duration
	// Evicted counts the rows the fill wrote out before its end because a
	// table held more than MaxRows rows in memory; ReadBack the rows of
	// those it read back because the log touched them again.
	Evicted, ReadBack int64
}

// Rebuild replays the whole log into fresh tables for the projections ps
// and swaps them in with their checkpoints in one transaction:
//
//  1. take each projection's Guard and drop leftover t_rebuild_<n> tables;
//  2. create fresh tables (LIKE t INCLUDING ALL, and t's storage
//     parameters) and drop their indexes, the primary key too;
//  3. fill them from the log up to its readable head in bulk, reading the
//     log once for every projection: each projection folds the events in
//     memory with the live projectors' own code, writes rows with COPY
//     (rows the log has not touched for idleChunks chunks, rows beyond
//     MaxRows in memory, and the rest at the end; a table's primary key is
//     built during the fill when a row written out must be read back), and
//     the projections fold each chunk of BatchSize events concurrently
//     (synchronous_commit off: nothing is visible before the swap);
//  4. build the primary keys not built yet and the other indexes, then
//     ANALYZE;
//  5. take each projection's Lock and catch up to the head again the way
//     the live projectors apply batches;
//  6. in one transaction, drop the old tables, rename the fresh ones (and
//     their indexes) into place and set each checkpoint to the last
//     position read and its log clock; then release the locks.
//
// Memory is bounded by MaxRows rows per table (plus the per-show sales
// aggregate, one small row per show, and the pages read ahead), whatever
// the size of the log. Rebuild never calls anything but the database and
// log. Once step 6 has begun it runs to its end even if ctx is cancelled
// (bounded by swapTimeout). On any error the fresh tables not swapped in
// are dropped and the error says at which step it failed; nothing was
// swapped unless it is a *SwapUnknownError (the swap's commit answer was
// lost and could not be read back). Running it again is safe: a
// rebuild of an unchanged log swaps in identical tables. It blocks until
// done.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, log LogReader, ps []*Projection, o RebuildOptions) (res RebuildResult, err error) {
	start := time.Now()
	if len(ps) == 0 {
		return res, errors.New("projections: rebuild: no read models")
	}
	size := o.BatchSize
	if size <= 0 {
		size = DefaultRebuildBatch
	}
	var held releases
	defer func() { held.release() }() // what is held by then
	if o.Guard != nil {
		if err := guard(ctx, pool, ps, o.Guard, &held); err != nil {
			return res, err
		}
	}
	fresh := &freshTables{keys: &primaryKeys{ddl: map[string]string{}}}
	defer func() {
		if err != nil { // nothing was swapped: drop what was built
			err = fresh.drop(ctx, pool, err)
		}
	}()
	if err = fresh.create(ctx, pool, ps); err != nil {
		return res, err
	}

	// Fill up to the head in bulk, then build the indexes.
	var cp checkpoint
	progress := func(k int) {
		res.Events += int64(k)
		if o.Progress != nil {
			o.Progress(res.Events)
		}
	}
	limit := o.MaxRows
	if limit == 0 {
		limit = DefaultRebuildRows
	}
	if cp, err = fill(ctx, pool, log, fresh.bounds, cp, size, limit, progress, &res, fresh.keys); err != nil {
		return res, fmt.Errorf("projections: rebuild: replay: %w", err)
	}
	if err = buildIndexes(ctx, pool, append(fresh.keys.rest(), fresh.deferred...), fresh.created); err != nil {
		return res, err
	}
	res.Replay = time.Since(start)

	// Under the live projectors' locks: catch up and swap.
	if o.Lock != nil {
		if err = lockAll(ctx, ps, o.Lock, &held); err != nil {
			return res, err
		}
	}
	if cp, err = replay(ctx, pool, log, fresh.bounds, cp, size, progress); err != nil {
		return res, fmt.Errorf("projections: rebuild: catch up: %w", err)
	}
	// Once begun, the swap runs to its end even if ctx is cancelled: its
	// outcome is then known (see swap).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), swapTimeout)
	err = swap(sctx, pool, fresh.bounds, cp, o.commit)
	cancel()
	var unknown *SwapUnknownError
	if errors.As(err, &unknown) {
		return res, err
	}
	if err != nil {
		return res, fmt.Errorf("projections: rebuild: swap: %w", err)
	}
	fresh.created = nil // swapped in: no longer ours to drop
	res.Position = cp.pos
	res.Total = time.Since(start)
	return res, nil
}

// releases are the guards and locks a rebuild holds, released in reverse
// order of taking.
type releases []func()

// release releases everything held, the last taken first.
func (r releases) release() {
	for i := len(r) - 1; i >= 0; i-- {
		r[i]()
	}
}

// guard takes each projection's guard, in order, into held, then drops the
// leftover tables of crashed rebuilds, which the guards make safe.
func guard(ctx context.Context, pool *pgxpool.Pool, ps []*Projection, take func(context.Context, string) (func(), error), held *releases) error {
	for _, p := range ps {
		release, err := take(ctx, p.name)
		if err != nil {
			return fmt.Errorf("projections: rebuild %s: %w", p.name, err)
		}
		*held = append(*held, release)
	}
	for _, p := range ps {
		if err := dropLeftovers(ctx, pool, p); err != nil {
			return err
		}
	}
	return nil
}

// lockAll takes the live projectors' locks of ps into held, all at once:
// each live projector hands its lock over on its own schedule. (Guards keep
// other rebuilds of these projections away, so waiting for several locks
// cannot deadlock with one.) It returns every lock it could not take.
func lockAll(ctx context.Context, ps []*Projection, lock func(context.Context, string) (func(), error), held *releases) error {
	type taken struct {
		release func()
		err     error
	}
	got := make([]taken, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { got[i].release, got[i].err = lock(ctx, p.name) })
	}
	wg.Wait()
	var lockErr error
	for i, g := range got {
		if g.err != nil {
			lockErr = errors.Join(lockErr, fmt.Errorf("projections: rebuild %s: take the projector's lock: %w", ps[i].name, g.err))
			continue
		}
		*held = append(*held, g.release)
	}
	return lockErr
}

// freshTables are the tables a rebuild fills: bounds binds each projection
// to its fresh tables, created lists them (dropped unless swapped in),
// deferred holds their CREATE INDEX statements, run after the fill, and
// keys their primary keys (see primaryKeys).
type freshTables struct {
	bounds   []*bound
	created  []string
	deferred []string
	keys     *primaryKeys
}

// create makes a fresh table t_rebuild_<n> for every table t of ps, n one
// number of projection_rebuild_seq for them all: LIKE t INCLUDING ALL, with
// t's storage parameters, and without its indexes and primary key, which
// it keeps in f.deferred and f.keys. What it created is in f.created even
// when it fails.
func (f *freshTables) create(ctx context.Context, pool *pgxpool.Pool, ps []*Projection) error {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT nextval('projection_rebuild_seq')`).Scan(&n); err != nil {
		return fmt.Errorf("projections: rebuild: %w", err)
	}
	for _, p := range ps {
		rename := map[string]string{}
		for _, t := range p.tables {
			fresh := fmt.Sprintf("%s_rebuild_%d", t, n)
			if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING ALL)`,
				pgx.Identifier{fresh}.Sanitize(), pgx.Identifier{t}.Sanitize())); err != nil {
				return fmt.Errorf("projections: rebuild %s: create %s: %w", p.name, fresh, err)
			}
			f.created = append(f.created, fresh)
			rename[t] = fresh
			if err := copyOptions(ctx, pool, t, fresh); err != nil {
				return fmt.Errorf("projections: rebuild %s: %w", p.name, err)
			}
			pk, defs, err := dropIndexes(ctx, pool, fresh)
			if err != nil {
				return fmt.Errorf("projections: rebuild %s: %w", p.name, err)
			}
			f.keys.ddl[fresh] = pk
			f.deferred = append(f.deferred, defs...)
		}
		f.bounds = append(f.bounds, bind(p, rename))
	}
	return nil
}

// drop drops the created tables, even if ctx is done, and returns err with
// any failure to drop added.
func (f *freshTables) drop(ctx context.Context, pool *pgxpool.Pool, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, t := range f.created {
		if _, derr := pool.Exec(cctx, `DROP TABLE IF EXISTS `+pgx.Identifier{t}.Sanitize()); derr != nil {
			err = fmt.Errorf("%w (and dropping %s failed: %v)", err, t, derr)
		}
	}
	return err
}

// replay reads the log after cp until a read returns fewer than size events
// (the readable head) and applies it to bs the way the live projectors do
// (applyBatch: load, fold, upsert). Reading runs one batch ahead of
// applying; the projections apply each batch concurrently, in their own
// transactions.
func replay(ctx context.Context, pool *pgxpool.Pool, log LogReader, bs []*bound, cp checkpoint, size int, progress func(int)) (checkpoint, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for c := range readAhead(ctx, log, cp, size) {
		if c.err != nil {
			return cp, c.err
		}
		if len(c.envs) == 0 {
			continue
		}
		var (
			next = make([]checkpoint, len(bs))
			errs = make([]error, len(bs))
			wg   sync.WaitGroup
		)
		for i, b := range bs {
			wg.Go(func() {
				next[i], errs[i] = applyBatch(ctx, pool, []*bound{b}, c.envs, cp, applyOptions{})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return cp, err
		}
		cp = next[0]
		progress(c.read)
	}
	return cp, ctx.Err()
}

// dropIndexes drops the primary key and the indexes of table and returns
// the statements that make them again, to be run after the fill (one sort
// per index instead of an insert per row). The primary key is made earlier
// if the fill has to read rows back by key (see primaryKeys).
func dropIndexes(ctx context.Context, pool *pgxpool.Pool, table string) (pk string, defs []string, err error) {
	id := pgx.Identifier{table}.Sanitize()
	var name, def string
	if err := pool.QueryRow(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p'`,
		id).Scan(&name, &def); err != nil {
		return "", nil, fmt.Errorf("primary key of %s: %w", table, err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE `+id+` DROP CONSTRAINT `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("drop the primary key of %s: %w", table, err)
	}
	pk = `ALTER TABLE ` + id + ` ADD CONSTRAINT ` + pgx.Identifier{name}.Sanitize() + ` ` + def
	rows, err := pool.Query(ctx, `SELECT c.relname, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1)
ORDER BY c.relname`, id)
	if err != nil {
		return "", nil, fmt.Errorf("indexes of %s: %w", table, err)
	}
	type index struct{ name, def string }
	idx, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var x index
		return x, r.Scan(&x.name, &x.def)
	})
	if err != nil {
		return "", nil, fmt.Errorf("indexes of %s: %w", table, err)
	}
	defs = make([]string, len(idx))
	for i, x := range idx {
		if _, err := pool.Exec(ctx, `DROP INDEX `+pgx.Identifier{x.name}.Sanitize()); err != nil {
			return "", nil, fmt.Errorf("drop index %s of %s: %w", x.name, table, err)
		}
		defs[i] = x.def
	}
	return pk, defs, nil
}

// primaryKeys holds the statements that make the primary keys of the fresh
// tables until they are run. Safe for concurrent use.
type primaryKeys struct {
	mu  sync.Mutex
	ddl map[string]string // fresh table → ALTER TABLE ... ADD CONSTRAINT ... PRIMARY KEY
}

// take returns the statement of table's primary key and forgets it, or ""
// when it was taken before.
func (k *primaryKeys) take(table string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.ddl[table]
	delete(k.ddl, table)
	return s
}

// rest returns the statements not taken.
func (k *primaryKeys) rest() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, s := range k.ddl {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// buildIndexes runs the CREATE INDEX statements defs and then ANALYZE on
// tables, a few at a time.
func buildIndexes(ctx context.Context, pool *pgxpool.Pool, defs, tables []string) error {
	stmts := slices.Clone(defs)
	for _, t := range tables {
		stmts = append(stmts, `ANALYZE `+pgx.Identifier{t}.Sanitize())
	}
	errs := make([]error, len(stmts))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, s := range stmts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := pool.Exec(ctx, s); err != nil {
				errs[i] = fmt.Errorf("projections: rebuild: %s: %w", s, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// swapTimeout bounds the swap, which runs to its end even when the
// rebuild's context is cancelled once it has started.
const swapTimeout = 2 * time.Minute

// SwapUnknownError reports a swap whose COMMIT was sent but whose answer
// was lost (a broken connection, a timeout), and whose outcome could not
// be read back: the read models may or may not have been swapped in.
// Error says how to find out.
type SwapUnknownError struct {
	// Names are the read models of the swap.
	Names []string
	// At is the swap transaction's now(), which it stores as rebuilt_at of
	// each read model's row of projection_checkpoints.
	At time.Time
	// Err is the failure of the commit.
	Err error
}

// Error says that the outcome is unknown and the query that tells it.
func (e *SwapUnknownError) Error() string {
	return fmt.Sprintf("projections: rebuild: swap: the commit's answer was lost (%v), so whether %s were swapped in is unknown: "+
		"they were if `SELECT name FROM projection_checkpoints WHERE rebuilt_at = '%s'` returns them; "+
		"running the rebuild again is safe either way",
		e.Err, strings.Join(e.Names, ", "), e.At.UTC().Format("2006-01-02 15:04:05.999999Z07:00"))
}

// Unwrap returns the failure of the commit.
func (e *SwapUnknownError) Unwrap() error { return e.Err }

// swap renames the fresh tables of bs into place and sets their
// checkpoints to cp, in one transaction; it retries when a lock wait
// (readers of the old tables) times out. commit ends the transaction
// (nil: tx.Commit). It returns nil when the swap committed, a
// *SwapUnknownError when that is unknown, any other error when it did not.
func swap(ctx context.Context, pool *pgxpool.Pool, bs []*bound, cp checkpoint, commit func(context.Context, pgx.Tx) error) error {
	var stmts []string
	for _, b := range bs {
		for _, live := range b.p.tables {
			fresh := b.rename[live]
			renames, err := indexRenames(ctx, pool, live, fresh)
			if err != nil {
				return err
			}
			stmts = append(stmts,
				`DROP TABLE IF EXISTS `+pgx.Identifier{live}.Sanitize(),
				`ALTER TABLE `+pgx.Identifier{fresh}.Sanitize()+` RENAME TO `+pgx.Identifier{live}.Sanitize())
			stmts = append(stmts, renames...)
		}
	}
	if commit == nil {
		commit = func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }
	}
	var err error
	// A short lock wait, retried: while the swap waits for a reader of an
	// old table, new readers queue behind it.
	for attempt := 1; attempt <= 10; attempt++ {
		err = swapOnce(ctx, pool, stmts, bs, cp, commit)
		if err == nil || !isLockTimeout(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// swapOnce runs the swap's transaction once: stmts, then the checkpoints
// of bs set to cp, then commit. When commit fails, the outcome is read
// back (swapOutcome).
func swapOnce(ctx context.Context, pool *pgxpool.Pool, stmts []string, bs []*bound, cp checkpoint, commit func(context.Context, pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { // after a commit: a no-op; bounded, so a hung server cannot hold a shutdown
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	var at time.Time
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '1s'`); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&at); err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.p.name
		_, err := tx.Exec(ctx, `INSERT INTO projection_checkpoints (name, commit_tx, prepare, log_time, updated_at, rebuilt_at)
VALUES ($1, $2, $3, $4, now(), now())
ON CONFLICT (name) DO UPDATE SET commit_tx = excluded.commit_tx, prepare = excluded.prepare, log_time = excluded.log_time,
	updated_at = excluded.updated_at, rebuilt_at = excluded.rebuilt_at`,
			b.p.name, int64(cp.pos.Commit), int64(cp.pos.Prepare), nullTime(cp.logTime))
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", b.p.name, err)
		}
	}
	pid := tx.Conn().PgConn().PID()
	err = commit(ctx, tx)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Severity == "ERROR" {
		return err // the server answered the commit with an error: it rolled back
	}
	if err != nil {
		return swapOutcome(ctx, pool, &SwapUnknownError{Names: names, At: at, Err: err}, pid)
	}
	return nil
}

// swapOutcome reads back the outcome of the swap whose commit failed with
// u.Err on the server process pid: nil when every read model of u.Names
// has rebuilt_at u.At (it committed); u.Err when none has and process pid
// was gone before the count was read (it did not, and no longer can); u
// itself otherwise. The process is looked up first, in a statement of its
// own: a transaction ends before its process leaves pg_stat_activity, so
// a count read after the process is gone sees a commit it made. pid is
// the server's process id only without a connection pooler in between.
func swapOutcome(ctx context.Context, pool *pgxpool.Pool, u *SwapUnknownError, pid uint32) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var swapped int
	var alive bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, int64(pid)).Scan(&alive)
	if err == nil {
		err = pool.QueryRow(ctx, `SELECT count(*) FROM projection_checkpoints WHERE name = ANY($1) AND rebuilt_at = $2`,
			u.Names, u.At).Scan(&swapped)
	}
	switch {
	case err != nil:
		return u
	case swapped == len(u.Names):
		return nil
	case swapped == 0 && !alive:
		return u.Err
	}
	return u
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// indexRenames returns the statements that give the indexes of fresh the
// names of live's matching indexes (same definition), or live's prefix when
// live has no match.
func indexRenames(ctx context.Context, pool *pgxpool.Pool, live, fresh string) ([]string, error) {
	type index struct{ name, key string }
	list := func(table string) ([]index, error) {
		rows, err := pool.Query(ctx, `SELECT c.relname, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1)
ORDER BY c.relname`, pgx.Identifier{table}.Sanitize())
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
			var name, def string
			if err := r.Scan(&name, &def); err != nil {
				return index{}, err
			}
			unique := strings.HasPrefix(def, "CREATE UNIQUE")
			_, rest, _ := strings.Cut(def, " USING ")
			return index{name: name, key: fmt.Sprint(unique, rest)}, nil
		})
	}
	old, err := list(live)
	if err != nil {
		return nil, fmt.Errorf("indexes of %s: %w", live, err)
	}
	cur, err := list(fresh)
	if err != nil {
		return nil, fmt.Errorf("indexes of %s: %w", fresh, err)
	}
	var stmts []string
	used := map[string]bool{}
	for _, c := range cur {
		target := ""
		for _, o := range old {
			if o.key == c.key && !used[o.name] {
				target = o.name
				break
			}
		}
		if target == "" {
			suffix, ok := strings.CutPrefix(c.name, fresh)
			if !ok {
				continue
			}
			target = live + suffix
		}
		used[target] = true
		if target != c.name {
			stmts = append(stmts, `ALTER INDEX `+pgx.Identifier{c.name}.Sanitize()+` RENAME TO `+pgx.Identifier{target}.Sanitize())
		}
	}
	return stmts, nil
}

// dropLeftovers drops t_rebuild_<n> tables of p left by a rebuild that
// died (the caller holds p's guard, so no rebuild of p is running).
func dropLeftovers(ctx context.Context, pool *pgxpool.Pool, p *Projection) error {
	for _, t := range p.tables {
		rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_class c
WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace AND c.relname ~ ('^' || $1 || '_rebuild_[0-9]+$')`, t)
		if err != nil {
			return fmt.Errorf("projections: rebuild %s: find leftovers: %w", p.name, err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("projections: rebuild %s: find leftovers: %w", p.name, err)
		}
		for _, name := range names {
			if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
				return fmt.Errorf("projections: rebuild %s: drop leftover %s: %w", p.name, name, err)
			}
		}
	}
	return nil
}

// copyOptions gives fresh the storage parameters (fillfactor) of live,
// which LIKE does not copy.
func copyOptions(ctx context.Context, pool *pgxpool.Pool, live, fresh string) error {
	var opts []string
	if err := pool.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass($1)`,
		pgx.Identifier{live}.Sanitize()).Scan(&opts); err != nil {
		return fmt.Errorf("storage parameters of %s: %w", live, err)
	}
	if len(opts) == 0 {
		return nil
	}
	_, err := pool.Exec(ctx, `ALTER TABLE `+pgx.Identifier{fresh}.Sanitize()+` SET (`+strings.Join(opts, ", ")+`)`)
	return err
}
