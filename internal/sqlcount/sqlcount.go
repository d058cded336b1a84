// Package sqlcount counts the SQL statements a pgx connection sends, for the
// round-trip budgets of ARCHITECTURE.md ("Performance"): a test installs a
// Counter as the pool's tracer, does some work, and compares Total with the
// budget. Each query, each statement of a batch and each COPY counts as one
// statement, and each transaction that writes as one commit (Commits); what
// the statement text was is kept for the failure message.
package sqlcount

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Counter is a pgx tracer (pgx.QueryTracer, pgx.BatchTracer and
// pgx.CopyFromTracer) that counts statements by their normalized text. It is
// safe for concurrent use; the zero value is ready.
type Counter struct {
	mu      sync.Mutex
	counts  map[string]int
	total   int
	commits int
}

// batchWrites is what TraceBatchStart puts in a batch's context: whether a
// statement of the batch writes.
type batchWrites struct{ writes bool }

type batchKey struct{}

// writes reports whether statement sql changes data: a plain INSERT,
// UPDATE or DELETE (also inside a WITH), or a call of one of the
// project's writing functions (the event store's appends, the key
// table's placement). A heuristic over the text, for the project's own
// statements.
func writes(sql string) bool {
	s := strings.ToLower(sql)
	for _, w := range []string{"insert into", "update ", "delete from", "eventstore_append", "order_key_placed("} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

var (
	_ pgx.QueryTracer    = (*Counter)(nil)
	_ pgx.BatchTracer    = (*Counter)(nil)
	_ pgx.CopyFromTracer = (*Counter)(nil)
)

// Install makes c the tracer of every connection cfg opens. It replaces any
// tracer cfg had.
func (c *Counter) Install(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = c }

// Open returns a pool on databaseURL (a PostgreSQL connection string, as
// pgxpool.ParseConfig reads it) whose statements c counts; its errors are
// pgxpool's.
func (c *Counter) Open(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	c.Install(cfg)
	return pgxpool.NewWithConfig(ctx, cfg)
}

func (c *Counter) add(sql string) {
	key := normalize(sql)
	c.mu.Lock()
	if c.counts == nil {
		c.counts = make(map[string]int)
	}
	c.counts[key]++
	c.total++
	c.mu.Unlock()
}

// normalize folds whitespace and cuts the text to 80 characters, so one
// statement sent from several places counts under one key.
func normalize(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}

// TraceQueryStart counts one statement (Query, QueryRow or Exec).
// A statement that writes (see writes) is one commit: it runs in a
// transaction of its own.
func (c *Counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.add(data.SQL)
	if writes(data.SQL) {
		c.mu.Lock()
		c.commits++
		c.mu.Unlock()
	}
	return ctx
}

// TraceQueryEnd does nothing; the statement was counted at its start.
func (c *Counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart notes the batch in ctx; each statement of the batch is
// counted by TraceBatchQuery (a batch is one round trip but several
// statements) and the batch, one implicit transaction, is one commit when
// a statement of it writes (TraceBatchEnd).
func (c *Counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchKey{}, &batchWrites{})
}

// TraceBatchQuery counts one statement of a batch.
func (c *Counter) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.add(data.SQL)
	if b, ok := ctx.Value(batchKey{}).(*batchWrites); ok && writes(data.SQL) {
		b.writes = true
	}
}

// TraceBatchEnd counts the batch as one commit when it wrote.
func (c *Counter) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if b, ok := ctx.Value(batchKey{}).(*batchWrites); ok && b.writes {
		c.mu.Lock()
		c.commits++
		c.mu.Unlock()
	}
}

// TraceCopyFromStart counts a COPY FROM as one statement.
func (c *Counter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	c.add("COPY " + data.TableName.Sanitize())
	return ctx
}

// TraceCopyFromEnd does nothing.
func (c *Counter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// Total returns the number of statements counted since the last Reset.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Commits returns the number of transactions that wrote since the last
// Reset: each writing statement sent on its own, and each batch with a
// writing statement (an implicit transaction). Statements in an explicit
// transaction count one commit each (none of the request path's are).
func (c *Counter) Commits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commits
}

// Reset forgets every count.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.counts, c.total, c.commits = nil, 0, 0
	c.mu.Unlock()
}

// Snapshot returns the counts by normalized statement text.
func (c *Counter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}

// Report formats the counts, most frequent first, one "count  statement" line
// each, divided by per (per > 0; for example the number of bookings) — the
// table a failing budget test prints.
func (c *Counter) Report(per int) string {
	snap := c.Snapshot()
	keys := make([]string, 0, len(snap))
	for k := range snap {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if snap[keys[i]] != snap[keys[j]] {
			return snap[keys[i]] > snap[keys[j]]
		}
		return keys[i] < keys[j]
	})
	per = max(per, 1)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%8.2f  %s\n", float64(snap[k])/float64(per), k)
	}
	return b.String()
}
