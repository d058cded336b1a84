package projections

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/memstore"
)

// BenchmarkProjectorApply measures the Go side of a live projector's
// steady state, in process: every projection of All follows a realistic
// log (the workload of the rebuild tests, about 13,000 events, appended to
// a memstore) from the start through Projector.applyAll in rounds of
// DefaultMaxBatch events, as Run does with its linger, against encodingDB,
// which encodes every statement's parameters the way pgx does for the
// server (pgtype.Map, the format pgx picks) and answers as if they had
// applied. One op is the whole log through the four projections (fresh
// projectors, so their row caches warm up as a live one's do). Metrics:
// allocs/event and B/event (per event of the log, the four projections
// together) and ns/event.
func BenchmarkProjectorApply(b *testing.B) {
	ctx := context.Background()
	store := memstore.New()
	workload{shows: 8, perShow: 200, workers: 1, seed: 1}.appendTo(b, ctx, store)
	log, err := store.ReadAll(ctx, eventstore.Position{}, 1<<30)
	if err != nil {
		b.Fatal(err)
	}
	db := &encodingDB{m: pgtype.NewMap()}
	ps := All(24 * time.Hour)
	run := func() {
		for _, p := range ps {
			pr := &Projector{db: db, p: p, b: bind(p, nil).withCaches(), maxBatch: DefaultMaxBatch}
			var cp checkpoint
			for rest := log; len(rest) > 0; {
				n := min(len(rest), DefaultMaxBatch)
				if err := pr.applyAll(ctx, &cp, rest[:n]); err != nil {
					b.Fatal(err)
				}
				rest = rest[n:]
			}
		}
	}
	run() // the plans of pgtype.Map, the SQL of each bound
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	events := float64(b.N * len(log))
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/events, "allocs/event")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/events, "B/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
	b.ReportMetric(float64(len(log)), "events")
	b.ReportMetric(float64(db.loads)/float64(b.N+1), "loads/op")
}

// encodingDB stands in for the pool in BenchmarkProjectorApply: it encodes
// the parameters of every queued statement with m as pgx would send them
// (text format for a string, else the format the parameter's type prefers;
// the type is the one the statement's SQL casts the parameter to) and
// reports every statement as applied: a fence matches, a load finds no row.
type encodingDB struct {
	m     *pgtype.Map
	buf   []byte
	loads int // batches sent in a transaction (rows to load)
}

// paramOID is the PostgreSQL type of a parameter as the projector's SQL
// casts it (text[] for the upserts and the loads).
func paramOID(arg any) uint32 {
	switch arg.(type) {
	case string:
		return pgtype.TextOID
	case int64:
		return pgtype.Int8OID
	case time.Time:
		return pgtype.TimestamptzOID
	}
	return pgtype.TextArrayOID
}

func (d *encodingDB) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		for _, arg := range q.Arguments {
			if arg == nil {
				continue
			}
			format := d.m.FormatCodeForOID(paramOID(arg))
			if _, ok := arg.(string); ok {
				format = pgtype.TextFormatCode
			}
			var err error
			if d.buf, err = d.m.Encode(paramOID(arg), format, arg, d.buf[:0]); err != nil {
				return &appliedResults{err: err}
			}
		}
	}
	return &appliedResults{}
}

func (d *encodingDB) Begin(context.Context) (pgx.Tx, error) {
	d.loads++
	return &encodingTx{db: d}, nil
}

// encodingTx is a transaction of encodingDB.
type encodingTx struct {
	pgx.Tx
	db *encodingDB
}

func (t *encodingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.db.SendBatch(ctx, b)
}
func (t *encodingTx) Commit(context.Context) error   { return nil }
func (t *encodingTx) Rollback(context.Context) error { return nil }

// appliedResults answers every statement of a batch as applied.
type appliedResults struct {
	pgx.BatchResults
	err error
}

func (r *appliedResults) Exec() (pgconn.CommandTag, error) {
	return pgconn.NewCommandTag("UPDATE 1"), r.err
}
func (r *appliedResults) Query() (pgx.Rows, error) { return &noRows{}, r.err }
func (r *appliedResults) QueryRow() pgx.Row        { return &noRows{} }
func (r *appliedResults) Close() error             { return r.err }

// noRows is a result without rows.
type noRows struct{ pgx.Rows }

func (*noRows) Next() bool                    { return false }
func (*noRows) Err() error                    { return nil }
func (*noRows) Close()                        {}
func (*noRows) Scan(...any) error             { return pgx.ErrNoRows }
func (*noRows) CommandTag() pgconn.CommandTag { return pgconn.NewCommandTag("SELECT 0") }
