package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/internal/tick"
)

// Log is the event log as a projector follows it (eventstore.Store
// satisfies it).
type Log interface {
	SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error
}

// LogReader reads the event log in batches, in log order (eventstore.Store
// satisfies it).
type LogReader interface {
	ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error)
}

// DefaultMaxBatch is the most events a projector applies in one
// transaction unless WithMaxBatch says otherwise.
const DefaultMaxBatch = 500

// ErrCheckpointMoved is returned (wrapped) when a batch's checkpoint fence
// fails: the checkpoint no longer holds the position the batch started
// from, because another instance or a rebuild moved it. Nothing of the batch
// is applied. Projector.Run handles it by reloading the checkpoint.
var ErrCheckpointMoved = errors.New("projections: checkpoint moved by another instance or a rebuild")

// errYielded is the cancel cause of a projector that yields its lock.
var errYielded = errors.New("projections: yielded to a waiting rebuild")

// checkpoint is a projection's place in the log and its log clock.
type checkpoint struct {
	pos     eventstore.Position
	logTime time.Time // zero until an event with a time was applied
}

// Projector runs one projection live: it follows the log from the
// projection's checkpoint and applies each batch of events together with the
// checkpoint in one transaction. Create it with NewProjector. The caller
// makes it the only running instance of its projection (a PostgreSQL lock,
// see pgcoord.Locks.RunExclusive). A Projector is used by one goroutine at a
// time (Run blocks).
type Projector struct {
	pool *pgxpool.Pool
	// db applies the batches: the pool (a benchmark's stand-in in tests).
	db         beginner
	p          *Projection
	b          *bound
	maxBatch   int
	linger     time.Duration
	yield      func(ctx context.Context) (bool, error)
	yieldEvery time.Duration
	// envs holds the envelopes of the batch applyAll is applying, reused
	// from batch to batch: nothing keeps an envelope after applyAll.
	envs []envelope
	// beforeCommit is a test-only fault point: called inside each batch's
	// transaction after its statements ran and before COMMIT.
	beforeCommit func(ctx context.Context, tx pgx.Tx, batch []envelope) error
}

// ProjectorOption configures a Projector.
type ProjectorOption func(*Projector)

// WithMaxBatch bounds the events applied in one transaction (default
// DefaultMaxBatch); a larger batch from the log is split. n <= 0 keeps the
// default. Small batches keep transactions short: an open writing
// transaction holds back the log's readable horizon for every reader.
func WithMaxBatch(n int) ProjectorOption {
	return func(p *Projector) {
		if n > 0 {
			p.maxBatch = n
		}
	}
}

// DefaultLinger is the linger `booking serve` gives its projectors
// (WithLinger): a read model trails the log by at most about this much more
// than the shared reader's own delay while events keep coming.
const DefaultLinger = 500 * time.Millisecond

// WithLinger makes Run gather the events that arrive within d of the first
// one waiting (up to the batch bound, WithMaxBatch) and apply them in one
// transaction: one BEGIN, checkpoint fence, SELECT and upsert per table and
// COMMIT for all of them, instead of one such transaction per batch the log
// happens to deliver (ARCHITECTURE.md, "Performance"). It adds at most d to
// the read model's lag. d <= 0 (the default) applies each delivered batch
// at once.
func WithLinger(d time.Duration) ProjectorOption {
	return func(p *Projector) {
		p.linger = max(d, 0)
	}
}

// WithYield makes Run check should every interval and return nil (giving up
// its lock to the caller's waiting rebuild) once it reports true. Errors of
// should are ignored (checked again at the next interval).
func WithYield(every time.Duration, should func(ctx context.Context) (bool, error)) ProjectorOption {
	return func(p *Projector) {
		if every > 0 && should != nil {
			p.yield, p.yieldEvery = should, every
		}
	}
}

// NewProjector returns a Projector of p on pool. The pool's database must
// have the migrations applied.
func NewProjector(pool *pgxpool.Pool, p *Projection, opts ...ProjectorOption) *Projector {
	pr := &Projector{pool: pool, db: pool, p: p, b: bind(p, nil).withCaches(), maxBatch: DefaultMaxBatch}
	for _, o := range opts {
		o(pr)
	}
	return pr
}

// Name returns the projection's name.
func (pr *Projector) Name() string { return pr.p.name }

// Run follows log from the projection's checkpoint and applies every batch
// with its checkpoint in one transaction, first catching up and then
// following new appends. It blocks until ctx is done (returns ctx.Err()),
// until it yields (WithYield; returns nil), or until applying or reading
// fails (returns the error; the caller restarts it, and it resumes from the
// checkpoint: nothing is applied twice). When its checkpoint fence fails
// (ErrCheckpointMoved) it reloads the checkpoint and goes on.
func (pr *Projector) Run(ctx context.Context, log Log) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if pr.yield != nil {
		go pr.watchYield(ctx, cancel)
	}
	for {
		pr.b.clearCaches() // the tables may have changed since (a rebuild, another instance)
		cp, err := loadCheckpoint(ctx, pr.pool, pr.p.name)
		if err == nil {
			err = fanout.Linger(ctx, log, cp.pos, fanout.LingerConfig{Delay: pr.linger, Max: pr.maxBatch},
				func(ctx context.Context, batch, _ []eventstore.RecordedEvent) error {
					return pr.applyAll(ctx, &cp, batch)
				})
		}
		if errors.Is(context.Cause(ctx), errYielded) {
			return nil
		}
		if errors.Is(err, ErrCheckpointMoved) && ctx.Err() == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("projections: %s: %w", pr.p.name, err)
	}
}

func (pr *Projector) watchYield(ctx context.Context, cancel context.CancelCauseFunc) {
	tick.Every(ctx, pr.yieldEvery, func() bool {
		if ok, err := pr.yield(ctx); err == nil && ok {
			cancel(errYielded)
			return false
		}
		return true
	})
}

// applyAll applies a batch from the log in transactions of at most maxBatch
// events, advancing cp after each.
func (pr *Projector) applyAll(ctx context.Context, cp *checkpoint, batch []eventstore.RecordedEvent) error {
	envs := pr.envs[:0]
	for i := range batch {
		if cp.pos.Less(batch[i].Position) {
			envs = append(envs, newEnvelope(&batch[i]))
		}
	}
	defer func() {
		// The buffer keeps no event alive, and keeps the capacity of one
		// log batch (fanout.Linger hands over at most maxBatch events).
		clear(envs)
		if cap(envs) <= 2*pr.maxBatch {
			pr.envs = envs[:0]
		}
	}()
	for rest := envs; len(rest) > 0; {
		n := min(len(rest), pr.maxBatch)
		next, err := applyBatch(ctx, pr.db, []*bound{pr.b}, rest[:n], *cp, applyOptions{fence: pr.p.name, beforeCommit: pr.beforeCommit})
		if err != nil {
			pr.b.clearCaches() // the batch may have changed cached rows in memory
			return err
		}
		*cp = next
		rest = rest[n:]
	}
	return nil
}

// querier runs statements (a pool, a connection or a transaction).
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// beginner starts transactions (a pool or a connection).
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

type applyOptions struct {
	// fence, when set, is the checkpoint name to advance in the same
	// transaction, fenced on the position the batch starts from.
	fence        string
	beforeCommit func(ctx context.Context, tx pgx.Tx, batch []envelope) error
}

const sqlFence = `UPDATE projection_checkpoints SET commit_tx = $2, prepare = $3, log_time = $4, updated_at = now()
WHERE name = $1 AND commit_tx = $5 AND prepare = $6`

// sqlFenceOrFail is sqlFence for a batch sent without BEGIN: when the
// checkpoint is not where the batch starts, it fails (division by zero,
// SQLSTATE 22012), which rolls back the implicit transaction of the whole
// batch; applyBatch reports that as ErrCheckpointMoved.
const sqlFenceOrFail = `WITH moved AS (` + sqlFence + `
RETURNING 1)
SELECT 1 / count(*) FROM moved`

// batchSender sends a pgx batch in one implicit transaction (a pool or a
// connection outside a transaction).
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// applyBatch applies envs (in log order, all after from.pos) to every bound
// projection in one transaction and returns the checkpoint after envs.
//
// When every row the batch touches is known without a SELECT — held in the
// projector's caches, or opened by the batch itself (rowSet.needOpened) — it
// is one pgx batch in one implicit transaction (pgx.Conn.SendBatch): the
// checkpoint fence, which fails the whole batch when the checkpoint moved
// (sqlFenceOrFail), an upsert of the changed rows per table and the
// projections' follow-up statements; no BEGIN, no COMMIT. Otherwise (and
// always under a beforeCommit hook): BEGIN; one pgx batch with the
// checkpoint fence and a SELECT of the rows to load per table; the fold in
// Go; one pgx batch with the upserts and follow-up statements; COMMIT.
func applyBatch(ctx context.Context, db beginner, bs []*bound, envs []envelope, from checkpoint, o applyOptions) (checkpoint, error) {
	a := &batchApply{bs: bs, envs: envs, from: from, o: o, to: checkpoint{pos: envs[len(envs)-1].pos, logTime: from.logTime}}
	for i := range envs {
		if envs[i].at.After(a.to.logTime) {
			a.to.logTime = envs[i].at
		}
	}
	loadAny, err := a.route()
	if err != nil {
		return from, err
	}
	if sb, ok := db.(batchSender); ok && !loadAny && o.beforeCommit == nil {
		err = a.sendOnce(ctx, sb)
	} else {
		err = a.inTransaction(ctx, db)
	}
	if err != nil {
		return from, err
	}
	return a.to, nil
}

// batchApply is one applyBatch: the envelopes envs applied to the bound
// projections bs (each with its fold in folds) from checkpoint from to
// checkpoint to.
type batchApply struct {
	bs       []*bound
	folds    []batchFold
	envs     []envelope
	from, to checkpoint
	o        applyOptions
}

// route begins every projection's fold, routes the envelopes to the rows
// they touch and sets up each row loader (the batch's opened rows, the
// projector's caches); it reports whether any row must be loaded with a
// SELECT.
func (a *batchApply) route() (loadAny bool, err error) {
	a.folds = make([]batchFold, len(a.bs))
	for i, b := range a.bs {
		a.folds[i] = b.p.begin()
		for j := range a.envs {
			if err := a.folds[i].route(&a.envs[j]); err != nil {
				return false, fmt.Errorf("projections: %s: %w", b.p.name, err)
			}
		}
		for _, l := range a.folds[i].loaders() {
			if a.o.fence == "" {
				l.loadOpened()
			}
			if c := b.cacheOf(l.table()); c != nil {
				l.useCache(c)
			}
			loadAny = loadAny || len(l.keys()) > 0
		}
	}
	return loadAny, nil
}

// fenceArgs are the arguments of sqlFence and sqlFenceOrFail.
func (a *batchApply) fenceArgs() []any {
	return []any{a.o.fence, int64(a.to.pos.Commit), int64(a.to.pos.Prepare), nullTime(a.to.logTime),
		int64(a.from.pos.Commit), int64(a.from.pos.Prepare)}
}

// moved is the error of a fence that found the checkpoint elsewhere.
func (a *batchApply) moved() error {
	return fmt.Errorf("%w (%s expected at %s)", ErrCheckpointMoved, a.o.fence, a.from.pos)
}

// sendOnce folds and writes the batch as one pgx batch in one implicit
// transaction: the fence (sqlFenceOrFail), the upserts and the follow-up
// statements.
func (a *batchApply) sendOnce(ctx context.Context, sb batchSender) error {
	if err := foldAll(a.bs, a.folds, a.envs); err != nil {
		return err
	}
	write := &pgx.Batch{}
	fenceAt := -1
	if a.o.fence != "" {
		fenceAt = write.Len()
		write.Queue(sqlFenceOrFail, a.fenceArgs()...)
	}
	queues := queueWrites(write, a.bs, a.folds, a.to)
	if write.Len() > 0 {
		br := sb.SendBatch(ctx, write)
		for i := range write.Len() {
			if _, err := br.Exec(); err != nil {
				br.Close()
				var pe *pgconn.PgError
				if i == fenceAt && errors.As(err, &pe) && pe.Code == "22012" {
					return a.moved()
				}
				return fmt.Errorf("projections: write batch up to %s: %w", a.to.pos, err)
			}
		}
		if err := br.Close(); err != nil {
			return fmt.Errorf("projections: commit batch up to %s: %w", a.to.pos, err)
		}
	}
	committed(a.bs, a.folds, queues)
	return nil
}

// inTransaction applies the batch in a transaction: BEGIN; the fence and
// the loads; the fold in Go; the upserts and follow-up statements; the
// beforeCommit hook; COMMIT.
func (a *batchApply) inTransaction(ctx context.Context, db beginner) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("projections: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	if err := a.fenceAndLoad(ctx, tx); err != nil {
		return err
	}
	if err := foldAll(a.bs, a.folds, a.envs); err != nil {
		return err
	}
	write := &pgx.Batch{}
	queues := queueWrites(write, a.bs, a.folds, a.to)
	if write.Len() > 0 {
		if err := tx.SendBatch(ctx, write).Close(); err != nil {
			return fmt.Errorf("projections: write batch up to %s: %w", a.to.pos, err)
		}
	}
	if a.o.beforeCommit != nil {
		if err := a.o.beforeCommit(ctx, tx, a.envs); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("projections: commit batch up to %s: %w", a.to.pos, err)
	}
	committed(a.bs, a.folds, queues)
	return nil
}

// fenceAndLoad sends, in one pgx batch on tx, the checkpoint fence
// (sqlFence) and a SELECT of the rows to load per table, and loads them.
func (a *batchApply) fenceAndLoad(ctx context.Context, tx pgx.Tx) error {
	read := &pgx.Batch{}
	fenceAt := -1
	if a.o.fence != "" {
		fenceAt = read.Len()
		read.Queue(sqlFence, a.fenceArgs()...)
	}
	var loads []rowLoader
	var loadAt []*bound
	for i, b := range a.bs {
		for _, l := range a.folds[i].loaders() {
			if keys := l.keys(); len(keys) > 0 {
				read.Queue(b.sql(l.table().selectSQL()), keys)
				loads = append(loads, l)
				loadAt = append(loadAt, b)
			}
		}
	}
	br := tx.SendBatch(ctx, read)
	for i := range read.Len() - len(loads) {
		ct, err := br.Exec()
		if err != nil {
			br.Close()
			return fmt.Errorf("projections: batch up to %s: %w", a.to.pos, err)
		}
		if i == fenceAt && ct.RowsAffected() != 1 {
			br.Close()
			return a.moved()
		}
	}
	for i, l := range loads {
		rows, err := br.Query()
		if err == nil {
			err = l.load(rows)
		}
		if err != nil {
			br.Close()
			return fmt.Errorf("projections: %s: load %s: %w", loadAt[i].p.name, l.table().name, err)
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("projections: batch up to %s: %w", a.to.pos, err)
	}
	return nil
}

// foldAll folds envs into every projection's rows.
func foldAll(bs []*bound, folds []batchFold, envs []envelope) error {
	for i, b := range bs {
		for j := range envs {
			if err := folds[i].apply(&envs[j]); err != nil {
				return fmt.Errorf("projections: %s: %w", b.p.name, err)
			}
		}
	}
	return nil
}

// queueWrites queues the upserts of the changed rows and the projections'
// follow-up statements on write, and returns each projection's queue.
func queueWrites(write *pgx.Batch, bs []*bound, folds []batchFold, to checkpoint) []queue {
	queues := make([]queue, len(bs))
	for i, b := range bs {
		for _, l := range folds[i].loaders() {
			if args := l.written(); args != nil {
				write.Queue(b.sql(l.table().upsertSQL()), args...)
			}
		}
		queues[i] = queue{batch: write, b: b, logTime: to.logTime}
		folds[i].finish(&queues[i])
	}
	return queues
}

// committed updates the bounds after their transaction committed: the
// intents view's delete cutoff, and the row caches (emptied after a delete,
// else given every row of the batch).
func committed(bs []*bound, folds []batchFold, queues []queue) {
	for i, b := range bs {
		if queues[i].pruned.After(b.pruned) {
			b.pruned = queues[i].pruned
		}
		if !queues[i].pruned.IsZero() {
			b.clearCaches() // rows were deleted
			continue
		}
		for _, l := range folds[i].loaders() {
			if c := b.cacheOf(l.table()); c != nil {
				l.keepIn(c)
			}
		}
	}
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// loadCheckpoint returns the checkpoint of name, creating it at the start of
// the log if it does not exist.
func loadCheckpoint(ctx context.Context, db querier, name string) (checkpoint, error) {
	var cp checkpoint
	if _, err := db.Exec(ctx, `INSERT INTO projection_checkpoints (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, name); err != nil {
		return cp, fmt.Errorf("projections: %s: create checkpoint: %w", name, err)
	}
	var (
		commit, prepare int64
		logTime         *time.Time
	)
	err := db.QueryRow(ctx, `SELECT commit_tx, prepare, log_time FROM projection_checkpoints WHERE name = $1`, name).
		Scan(&commit, &prepare, &logTime)
	if err != nil {
		return cp, fmt.Errorf("projections: %s: load checkpoint: %w", name, err)
	}
	cp.pos = eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
	if logTime != nil {
		cp.logTime = logTime.UTC()
	}
	return cp, nil
}
