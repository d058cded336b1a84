package sqlcount

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestCounterCountsQueriesAndBatchStatements(t *testing.T) {
	var c Counter
	ctx := context.Background()
	c.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "SELECT  now()"})
	c.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "SELECT now()\n"})
	c.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{})
	c.TraceBatchQuery(ctx, nil, pgx.TraceBatchQueryData{SQL: "SELECT 1"})
	c.TraceBatchQuery(ctx, nil, pgx.TraceBatchQueryData{SQL: "SELECT 2"})
	c.TraceCopyFromStart(ctx, nil, pgx.TraceCopyFromStartData{TableName: pgx.Identifier{"t"}})
	if got := c.Total(); got != 5 {
		t.Fatalf("Total = %d, want 5", got)
	}
	if got := c.Snapshot()["SELECT now()"]; got != 2 {
		t.Fatalf(`count of "SELECT now()" = %d, want 2 (whitespace folded)`, got)
	}
	if r := c.Report(2); !strings.HasPrefix(r, "    1.00  SELECT now()\n") {
		t.Fatalf("Report(2) starts %q, want the most frequent statement per 2 first", r)
	}
	c.Reset()
	if c.Total() != 0 || len(c.Snapshot()) != 0 {
		t.Fatalf("after Reset: total %d, %d keys", c.Total(), len(c.Snapshot()))
	}
}

// TestCounterCountsCommits: a writing statement sent alone is one commit, a
// batch with a writing statement one commit however many it holds, reads
// none.
func TestCounterCountsCommits(t *testing.T) {
	var c Counter
	ctx := context.Background()
	c.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "SELECT now()"})
	c.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "SELECT o_status FROM eventstore_append($1)"})
	c.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "UPDATE order_keys SET shred_at = $2"})
	batch := func(sqls ...string) {
		bctx := c.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{})
		for _, q := range sqls {
			c.TraceBatchQuery(bctx, nil, pgx.TraceBatchQueryData{SQL: q})
		}
		c.TraceBatchEnd(bctx, nil, pgx.TraceBatchEndData{})
	}
	batch("SELECT o_status FROM eventstore_append_multi($1)", "INSERT INTO order_keys VALUES ($1)", "SELECT order_key_placed($1, $2)")
	batch("SELECT 1", "SELECT 2")
	if got := c.Commits(); got != 3 {
		t.Fatalf("Commits = %d, want 3 (two writing statements and one writing batch)", got)
	}
	if got := c.Total(); got != 8 {
		t.Fatalf("Total = %d, want 8", got)
	}
	c.Reset()
	if c.Commits() != 0 {
		t.Fatalf("after Reset: %d commits", c.Commits())
	}
}
