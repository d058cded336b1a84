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
