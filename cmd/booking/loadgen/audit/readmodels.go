package audit

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/migrations"
	"github.com/retrysafe/booking/projections"
)

// DefaultIntentRetention is the service's default BOOKING_INTENT_RETENTION,
// used for the intents read model when Options.IntentRetention is zero.
const DefaultIntentRetention = 24 * time.Hour

// maxRowDiffs bounds the differing rows reported per table.
const maxRowDiffs = 10

// checkpointCols are the columns of projection_checkpoints a rebuild
// reproduces (updated_at and rebuilt_at are wall-clock times).
const checkpointCols = `name, commit_tx, prepare, log_time`

// checkReadModels replays the log into a scratch database with the same
// code `booking projections rebuild` runs (projections.Rebuild, after the
// migrations), compares every read-model table and checkpoint row by row
// (PostgreSQL's text form of each row) with the live ones, and drops the
// scratch database.
func checkReadModels(ctx context.Context, dbURL string, log eventstore.Store, retention time.Duration, row *Row, violate func(Rule, string, ...any)) {
	fail := func(format string, args ...any) { violate(ReadModels, format, args...) }
	live, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		fail("connect to the service's database: %v", err)
		return
	}
	defer live.Close()
	scratchURL, name, err := scratchDB(dbURL)
	if err != nil {
		fail("%v", err)
		return
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := live.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		fail("create the scratch database for the replay: %v", err)
		return
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = live.Exec(dctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
	}()
	if err := migrations.Up(ctx, scratchURL); err != nil {
		fail("migrate the scratch database: %v", err)
		return
	}
	scratch, err := pgxpool.New(ctx, scratchURL)
	if err != nil {
		fail("connect to the scratch database: %v", err)
		return
	}
	defer scratch.Close()
	ps := projections.All(retention)
	if _, err := projections.Rebuild(ctx, scratch, log, ps, projections.RebuildOptions{}); err != nil {
		fail("replay the log: %v", err)
		return
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Tables()...)
	}
	for _, t := range names {
		q := fmt.Sprintf(`SELECT r::text FROM %s r ORDER BY 1`, pgx.Identifier{t}.Sanitize())
		compareRows(ctx, live, scratch, t, q, nil, row, fail)
	}
	q := `SELECT row(` + checkpointCols + `)::text FROM projection_checkpoints WHERE name = ANY($1) ORDER BY 1`
	compareRows(ctx, live, scratch, "projection_checkpoints", q, []any{projections.Names()}, row, fail)
}

// compareRows runs q on both databases and reports rows found on one side only.
func compareRows(ctx context.Context, live, rebuilt *pgxpool.Pool, table, q string, args []any, row *Row, fail func(string, ...any)) {
	got, err := textRows(ctx, live, q, args)
	if err != nil {
		fail("%s: read the live table: %v", table, err)
		return
	}
	want, err := textRows(ctx, rebuilt, q, args)
	if err != nil {
		fail("%s: read the rebuilt table: %v", table, err)
		return
	}
	row.Checked += max(len(got), len(want))
	// Rows are paired by their first column (the primary key of every
	// read-model table): a changed row is one difference, not two.
	key := func(r string) string { k, _, _ := strings.Cut(r, ","); return k }
	only := func(a, b []string) map[string]string {
		out := map[string]string{}
		for _, r := range a {
			if _, ok := slices.BinarySearch(b, r); !ok {
				out[key(r)] = r
			}
		}
		return out
	}
	liveOnly, rebuiltOnly := only(got, want), only(want, got)
	var diffs []string
	for k, r := range liveOnly {
		if w, ok := rebuiltOnly[k]; ok {
			diffs = append(diffs, fmt.Sprintf("row %s differs: live %s, rebuilt %s", strings.TrimPrefix(k, "("), r, w))
			delete(rebuiltOnly, k)
			continue
		}
		diffs = append(diffs, "live row not in the rebuild: "+r)
	}
	for _, r := range rebuiltOnly {
		diffs = append(diffs, "rebuilt row missing live: "+r)
	}
	slices.Sort(diffs)
	for i, d := range diffs {
		if i == maxRowDiffs {
			fail("%s: … and %d more differing rows", table, len(diffs)-maxRowDiffs)
			break
		}
		fail("%s: %s", table, d)
	}
}

func textRows(ctx context.Context, pool *pgxpool.Pool, q string, args []any) ([]string, error) {
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// scratchDB returns the URL and name of a fresh database next to dbURL's.
func scratchDB(dbURL string) (string, string, error) {
	u, err := url.Parse(dbURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "", fmt.Errorf("the database URL must be a postgres:// URL to replay into a scratch database")
	}
	base := strings.TrimPrefix(u.Path, "/")
	if base == "" {
		base = "postgres"
	}
	name := fmt.Sprintf("%s_audit_%d_%d", base, os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	u.Path = "/" + name
	return u.String(), name, nil
}
