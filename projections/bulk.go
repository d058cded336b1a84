package projections

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The bulk fill of a rebuild (see Rebuild). Each projection keeps one fold
// for the whole fill, so its rows stay in memory across chunks of the log
// instead of being loaded and upserted per batch. Rows leave memory when
// the log has not touched them for idleChunks chunks (checked every
// idleChunks chunks), when a table holds more than RebuildOptions.MaxRows of
// them (the least recently touched go first), and at the end of the fill;
// each table's writer sends them with COPY while the fill goes on. A row the
// log touches again after it left is read back with DELETE ... RETURNING
// (after the table's writer has sent everything queued, and by the primary
// key, which the first read back of a table builds: until then the tables
// have no index at all). A row is therefore
// either in memory or in the fresh table, never both, and each row is
// written once unless it left and was touched again. The folds are the live
// projectors' own (readmodels.go), so the rows are the same.

// DefaultRebuildRows is the most rows of one table a rebuild keeps in memory
// unless RebuildOptions.MaxRows says otherwise. A row is a few hundred bytes
// (an order with refunds and tickets about a kilobyte), so the fill's heap
// stays around 100–200 MB whatever the size of the log.
const DefaultRebuildRows = 100_000

// copyBufferBytes is the size of one COPY statement's data: rows are sent
// in statements of about this size.
const copyBufferBytes = 1 << 20

// idleChunks is how many chunks of the log a row stays in memory untouched
// before the fill writes it out: most streams are short-lived, so their
// rows are written while the log is still being read.
const idleChunks = 8

// copyQueue is how many buffers of copyBufferBytes a table's writer queues.
const copyQueue = 4

// bulkState is the state of a rowSet during a bulk fill: the chunk number
// (gen) at which each row in memory was last touched, and the keys of the
// rows written out before the end (spilled). Not safe for concurrent use.
type bulkState struct {
	limit   int // rows kept in memory; <= 0: no limit
	gen     uint64
	last    map[string]uint64
	spilled *bloom // nil until the first eviction
}

// bulkSet is the type-independent side of a rowSet during a bulk fill.
type bulkSet interface {
	rowLoader
	startBulk(limit int)
	// reloadKeys returns the keys wanted by the chunk that are not in
	// memory and may have been written out (a false positive of the
	// filter only costs a lookup that finds nothing).
	reloadKeys() []string
	// endChunk marks the chunk's rows touched and forgets what it wanted.
	endChunk()
	// evict removes, when idle is set, the rows untouched for idleChunks
	// chunks, and, when the set still holds more than its limit, rows
	// down to three quarters of the limit, least recently touched first;
	// it passes them to w in COPY text form and returns their number.
	evict(idle bool, w func(*bytes.Buffer)) int
	// drain removes every row and passes them to w in COPY text form.
	drain(w func(*bytes.Buffer))
}

func (s *rowSet[R]) startBulk(limit int) {
	s.bulk = &bulkState{limit: limit, last: map[string]uint64{}}
	s.dirty, s.isDir = nil, nil
}

func (s *rowSet[R]) reloadKeys() []string {
	if s.bulk.spilled == nil {
		return nil
	}
	var out []string
	for k := range s.want {
		if _, ok := s.rows[k]; !ok && s.bulk.spilled.has(k) {
			out = append(out, k)
		}
	}
	return out
}

func (s *rowSet[R]) endChunk() {
	s.bulk.gen++
	for k := range s.want {
		if _, ok := s.rows[k]; ok {
			s.bulk.last[k] = s.bulk.gen
		}
	}
	clear(s.want)
}

// remove forgets key's row (it no longer exists).
func (s *rowSet[R]) remove(key string) {
	delete(s.rows, key)
	if s.bulk != nil {
		delete(s.bulk.last, key)
	}
}

func (s *rowSet[R]) evict(idle bool, w func(*bytes.Buffer)) int {
	b := s.bulk
	if b.limit == 0 {
		return 0 // kept whole
	}
	var out []string
	if idle && b.gen > idleChunks {
		for k := range s.rows {
			if b.last[k] <= b.gen-idleChunks {
				out = append(out, k)
			}
		}
	}
	if over := len(s.rows) - len(out) - b.limit; b.limit > 0 && over > 0 {
		type aged struct {
			gen uint64
			key string
		}
		all := make([]aged, 0, len(s.rows))
		for k := range s.rows {
			all = append(all, aged{b.last[k], k})
		}
		slices.SortFunc(all, func(x, y aged) int {
			if c := cmpUint(x.gen, y.gen); c != 0 {
				return c
			}
			return strings.Compare(x.key, y.key)
		})
		out = out[:0]
		for _, a := range all[:len(all)-b.limit*3/4] {
			out = append(out, a.key)
		}
	}
	if len(out) == 0 {
		return 0
	}
	if b.spilled == nil {
		b.spilled = newBloom()
	}
	slices.Sort(out) // key order: the primary key's pages fill in order
	buf := &bytes.Buffer{}
	for _, k := range out {
		writeCopyRow(buf, s.text(s.rows[k]))
		b.spilled.add(k)
		s.remove(k)
		if buf.Len() >= copyBufferBytes {
			w(buf)
			buf = &bytes.Buffer{}
		}
	}
	if buf.Len() > 0 {
		w(buf)
	}
	return len(out)
}

func (s *rowSet[R]) drain(w func(*bytes.Buffer)) {
	keys := make([]string, 0, len(s.rows))
	for k := range s.rows {
		keys = append(keys, k)
	}
	slices.Sort(keys) // key order: the primary key's pages fill in order
	buf := &bytes.Buffer{}
	for _, k := range keys {
		writeCopyRow(buf, s.text(s.rows[k]))
		s.remove(k)
		if buf.Len() >= copyBufferBytes {
			w(buf)
			buf = &bytes.Buffer{}
		}
	}
	if buf.Len() > 0 {
		w(buf)
	}
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// writeCopyRow appends one row of COPY's text format: columns separated by
// tabs, NULL as \N, backslash, newline, carriage return and tab escaped. The
// server parses each column with its type's input function, as the ::type
// casts of the live upsert do, so the stored values are the same.
func writeCopyRow(buf *bytes.Buffer, cols []pgtype.Text) {
	for i, c := range cols {
		if i > 0 {
			buf.WriteByte('\t')
		}
		if !c.Valid {
			buf.WriteString(`\N`)
			continue
		}
		if !strings.ContainsAny(c.String, "\\\n\r\t") {
			buf.WriteString(c.String)
			continue
		}
		for j := 0; j < len(c.String); j++ {
			switch ch := c.String[j]; ch {
			case '\\':
				buf.WriteString(`\\`)
			case '\n':
				buf.WriteString(`\n`)
			case '\r':
				buf.WriteString(`\r`)
			case '\t':
				buf.WriteString(`\t`)
			default:
				buf.WriteByte(ch)
			}
		}
	}
	buf.WriteByte('\n')
}

// bloom is a fixed-size Bloom filter of the keys written out during a fill:
// 2^24 bits (2 MiB) and four hashes, so about 0.2% false positives at a
// million keys, more beyond (each costs one lookup that finds nothing).
type bloom struct {
	bits []uint64
	seed maphash.Seed
}

const bloomBits = 1 << 24

func newBloom() *bloom { return &bloom{bits: make([]uint64, bloomBits/64), seed: maphash.MakeSeed()} }

func (b *bloom) positions(key string) [4]uint32 {
	h := maphash.String(b.seed, key)
	h1, h2 := uint32(h), uint32(h>>32)|1
	var p [4]uint32
	for i := range p {
		p[i] = (h1 + uint32(i)*h2) % bloomBits
	}
	return p
}

func (b *bloom) add(key string) {
	for _, p := range b.positions(key) {
		b.bits[p/64] |= 1 << (p % 64)
	}
}

func (b *bloom) has(key string) bool {
	for _, p := range b.positions(key) {
		if b.bits[p/64]&(1<<(p%64)) == 0 {
			return false
		}
	}
	return true
}

// pruner is a fold whose rows expire by the log clock (the intents view):
// prune removes the in-memory rows recorded at or before the cutoff of
// logTime, only those of keys when keys is not nil, and returns the
// statement (with its argument) that does the same in the table, or "" when
// nothing expires.
type pruner interface {
	prune(logTime time.Time, keys []string) (tmpl string, arg any)
}

// bulkFold is one projection's side of a bulk fill. Not safe for
// concurrent use (its writers run on their own goroutines).
type bulkFold struct {
	pool    *pgxpool.Pool
	b       *bound
	fold    batchFold
	sets    []bulkSet
	writers []*copyWriter // one per set
	keys    *primaryKeys
	chunks  uint64
	spill   bool // rows were written out before the end
	// evicted and readBack count the rows written out before the end and
	// the rows read back from the fresh tables.
	evicted, readBack int64
}

func newBulkFold(ctx context.Context, pool *pgxpool.Pool, b *bound, limit int, keys *primaryKeys) *bulkFold {
	f := &bulkFold{pool: pool, b: b, fold: b.p.begin(), keys: keys}
	for _, l := range f.fold.loaders() {
		s := l.(bulkSet)
		lim := limit
		if s.table() == showSalesTable {
			// Per-show deltas are added in apply, after the reload:
			// the (small) aggregate stays in memory whole.
			lim = 0
		}
		s.startBulk(lim)
		f.sets = append(f.sets, s)
		f.writers = append(f.writers, newCopyWriter(ctx, pool, b, s.table()))
	}
	return f
}

// chunk folds envs (in log order) into the rows in memory: it reads back the
// rows they touch that were written out, applies them, expires intents by
// the log clock before (from) and after (to) the chunk, and hands the rows
// that leave memory to the tables' writers.
func (f *bulkFold) chunk(ctx context.Context, envs []envelope, from, to time.Time) error {
	name := f.b.p.name
	for i := range envs {
		if err := f.fold.route(&envs[i]); err != nil {
			return fmt.Errorf("projections: %s: %w", name, err)
		}
	}
	var reloaded []string
	for i, s := range f.sets {
		keys := s.reloadKeys()
		if len(keys) == 0 {
			continue
		}
		if err := f.writers[i].wait(); err != nil {
			return fmt.Errorf("projections: %s: write %s: %w", name, s.table().name, err)
		}
		// The first read back of a table makes its primary key, which
		// finds the rows from then on.
		if ddl := f.keys.take(f.b.rename[s.table().name]); ddl != "" {
			if _, err := f.pool.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("projections: %s: %s: %w", name, ddl, err)
			}
		}
		n, err := f.reload(ctx, s, keys)
		f.readBack += n
		if err != nil {
			return fmt.Errorf("projections: %s: read back %s: %w", name, s.table().name, err)
		}
		reloaded = append(reloaded, keys...)
	}
	pr, prunes := f.fold.(pruner)
	if prunes && len(reloaded) > 0 && !from.IsZero() {
		pr.prune(from, reloaded) // rows the table would have lost already
	}
	for i := range envs {
		if err := f.fold.apply(&envs[i]); err != nil {
			return fmt.Errorf("projections: %s: %w", name, err)
		}
	}
	if prunes && !to.IsZero() {
		pr.prune(to, nil)
	}
	f.chunks++
	for i, s := range f.sets {
		s.endChunk()
		if n := s.evict(f.chunks%idleChunks == 0, f.writers[i].send); n > 0 {
			f.spill = true
			f.evicted += int64(n)
		}
		if err := f.writers[i].failed(); err != nil {
			return fmt.Errorf("projections: %s: write %s: %w", name, s.table().name, err)
		}
	}
	return nil
}

// finish writes every row left in memory, waits for the writers and, if
// rows were written out before, expires those the log clock at the end
// (logTime) has passed.
func (f *bulkFold) finish(ctx context.Context, logTime time.Time) error {
	name := f.b.p.name
	for i, s := range f.sets {
		s.drain(f.writers[i].send)
	}
	var errs []error
	for i, w := range f.writers {
		if err := w.close(); err != nil {
			errs = append(errs, fmt.Errorf("projections: %s: write %s: %w", name, f.sets[i].table().name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if pr, ok := f.fold.(pruner); ok && f.spill && !logTime.IsZero() {
		if tmpl, arg := pr.prune(logTime, []string{}); tmpl != "" {
			if _, err := f.pool.Exec(ctx, f.b.sql(tmpl), arg); err != nil {
				return fmt.Errorf("projections: %s: expire: %w", name, err)
			}
		}
	}
	return nil
}

// stop ends the writers (after an error); it waits for them.
func (f *bulkFold) stop() {
	for _, w := range f.writers {
		_ = w.close()
	}
}

// reload moves the rows of keys from the fresh table back into memory and
// returns how many there were.
func (f *bulkFold) reload(ctx context.Context, s bulkSet, keys []string) (int64, error) {
	var n int64
	err := asyncTx(ctx, f.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, f.b.sql(s.table().takeSQL()), keys)
		if err != nil {
			return err
		}
		if err := s.load(rows); err != nil {
			return err
		}
		n = rows.CommandTag().RowsAffected()
		return nil
	})
	return n, err
}

// copyWriter sends the rows of one fresh table with COPY on its own
// goroutine, one statement (and transaction) per buffer, at most copyQueue
// buffers queued (send blocks beyond: the fill waits for the database
// rather than growing its memory). After a failure it drops what it is
// sent and reports the error.
type copyWriter struct {
	ch      chan *bytes.Buffer
	pending sync.WaitGroup // buffers sent and not yet written
	done    chan struct{}
	closed  bool
	mu      sync.Mutex
	err     error
}

func newCopyWriter(ctx context.Context, pool *pgxpool.Pool, b *bound, t *tableSpec) *copyWriter {
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = c.name
	}
	sql := "COPY " + b.sql("{"+t.name+"}") + " (" + strings.Join(names, ", ") + ") FROM STDIN"
	w := &copyWriter{ch: make(chan *bytes.Buffer, copyQueue), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for buf := range w.ch {
			if w.failed() == nil {
				err := asyncTx(ctx, pool, func(tx pgx.Tx) error {
					_, err := tx.Conn().PgConn().CopyFrom(ctx, buf, sql)
					return err
				})
				if err != nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
				}
			}
			w.pending.Done()
		}
	}()
	return w
}

// send queues buf to be written.
func (w *copyWriter) send(buf *bytes.Buffer) {
	w.pending.Add(1)
	w.ch <- buf
}

// wait returns once everything sent is written, with the writer's error.
func (w *copyWriter) wait() error {
	w.pending.Wait()
	return w.failed()
}

// failed returns the error of a write that failed, if any.
func (w *copyWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// close writes what is queued, stops the writer and returns its error.
func (w *copyWriter) close() error {
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
	<-w.done
	return w.failed()
}

// asyncTx runs fn in a transaction with synchronous_commit off: the fresh
// tables are not visible before the swap, which commits synchronously.
func asyncTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
			return err
		}
		return fn(tx)
	})
}

// takeSQL deletes rows by key ($1, text[]) and returns them, columns in
// cols order as selectSQL.
func (t *tableSpec) takeSQL() string {
	sel := t.selectSQL()
	cols, _, _ := strings.Cut(strings.TrimPrefix(sel, "SELECT "), " FROM ")
	return fmt.Sprintf("DELETE FROM {%s} WHERE %s = ANY($1::text[]::%s[]) RETURNING %s", t.name, t.cols[0].name, t.cols[0].typ, cols)
}

// fill replays the log after cp up to its readable head into the fresh
// tables of bs, in memory as described above, and writes every row; it
// returns the checkpoint after the last event read. Reading runs ahead of
// folding; the projections fold each chunk concurrently.
func fill(ctx context.Context, pool *pgxpool.Pool, log LogReader, bs []*bound, cp checkpoint, size, limit int, progress func(int), res *RebuildResult, keys *primaryKeys) (checkpoint, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	folds := make([]*bulkFold, len(bs))
	for i, b := range bs {
		folds[i] = newBulkFold(ctx, pool, b, limit, keys)
	}
	finished := false
	defer func() {
		if !finished {
			cancel()
			for _, f := range folds {
				f.stop()
			}
		}
	}()
	chunks := readAhead(ctx, log, cp, size)
	for c := range chunks {
		if c.err != nil {
			return cp, c.err
		}
		if len(c.envs) == 0 {
			continue
		}
		to := checkpoint{pos: c.envs[len(c.envs)-1].pos, logTime: cp.logTime}
		for i := range c.envs {
			if c.envs[i].at.After(to.logTime) {
				to.logTime = c.envs[i].at
			}
		}
		errs := make([]error, len(folds))
		var wg sync.WaitGroup
		for i, f := range folds {
			wg.Go(func() { errs[i] = f.chunk(ctx, c.envs, cp.logTime, to.logTime) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			if ctx.Err() != nil {
				return cp, ctx.Err()
			}
			return cp, err
		}
		cp = to
		progress(c.read)
	}
	if err := ctx.Err(); err != nil {
		return cp, err
	}
	finished = true
	errs := make([]error, len(folds))
	var wg sync.WaitGroup
	for i, f := range folds {
		wg.Go(func() { errs[i] = f.finish(ctx, cp.logTime) })
	}
	wg.Wait()
	for _, f := range folds {
		res.Evicted += f.evicted
		res.ReadBack += f.readBack
	}
	return cp, errors.Join(errs...)
}

// readChunk is one page of the log read ahead of its use.
type readChunk struct {
	envs []envelope
	read int
	err  error
}

// readAhead reads the log after cp in pages of size until a page is short
// (the readable head), two pages ahead of the consumer; the channel closes
// at the end, after an error (the last chunk) or when ctx is done.
func readAhead(ctx context.Context, log LogReader, cp checkpoint, size int) <-chan readChunk {
	chunks := make(chan readChunk, 2)
	go func() {
		defer close(chunks)
		after := cp.pos
		for {
			batch, err := log.ReadAll(ctx, after, size)
			if err != nil {
				select {
				case chunks <- readChunk{err: err}:
				case <-ctx.Done():
				}
				return
			}
			envs := make([]envelope, len(batch))
			for i := range batch {
				envs[i] = newEnvelope(&batch[i])
			}
			select {
			case chunks <- readChunk{envs: envs, read: len(batch)}:
			case <-ctx.Done():
				return
			}
			if len(batch) < size {
				return
			}
			after = batch[len(batch)-1].Position
		}
	}()
	return chunks
}
