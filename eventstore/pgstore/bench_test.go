package pgstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
)

// benchConcurrency is the number of concurrent appenders (and of concurrent
// raw inserters in the baseline).
const benchConcurrency = 32

// benchData is the body of every benchmark event and baseline row.
var benchData = []byte(`{"reservation_id":"0190f1d2-7c4e-7b3a-9a51-2f6c1e0d4b7a","actor":"actor-1","amount":{"amount":4200,"currency":"EUR"}}`)

// runConcurrently calls op(worker, i) for i in [0, n) from workers goroutines
// and returns the elapsed time. It stops at the first error.
func runConcurrently(ctx context.Context, n, workers int, op func(ctx context.Context, worker, i int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := op(ctx, w, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), context.Cause(ctx)
}

// createBaseline creates the baseline's plain table, bench_raw, with its
// UNIQUE (actor, key) constraint, on pool.
func createBaseline(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	if _, err := pool.Exec(b.Context(), `CREATE TABLE bench_raw (
		actor text NOT NULL, key text NOT NULL, body bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
		UNIQUE (actor, key))`); err != nil {
		b.Fatalf("create baseline table: %v", err)
	}
}

// alternate calls first then second, each once per round, for two rounds
// of warm-up (connections, prepared statements) and then b.N timed
// rounds, failing b at the first error, which it names by firstName or
// secondName. It returns the sums of the durations each one reported over
// the timed rounds, with b's timer stopped.
func alternate(b *testing.B, firstName string, first func() (time.Duration, error), secondName string,
	second func() (time.Duration, error)) (firstSum, secondSum time.Duration) {
	b.Helper()
	for i := range b.N + 2 {
		f, err := first()
		if err != nil {
			b.Fatalf("%s: %v", firstName, err)
		}
		s, err := second()
		if err != nil {
			b.Fatalf("%s: %v", secondName, err)
		}
		if i == 1 {
			b.ResetTimer()
		}
		if i >= 2 {
			firstSum, secondSum = firstSum+f, secondSum+s
		}
	}
	b.StopTimer()
	return firstSum, secondSum
}

// BenchmarkAppendNewStreams measures single-event appends, each to a new
// stream at NoStream, from 32 goroutines, and in the same run a baseline: the
// same number of one-row INSERTs into a plain table with a UNIQUE (actor,
// key) constraint at the same concurrency, on the same server. It reports
// events/s, the baseline's inserts/s and their ratio (x_of_raw_insert: 1.0
// means appends are as fast as raw inserts). Synchronous commit is on, so
// both rates depend on group commit.
func BenchmarkAppendNewStreams(b *testing.B) {
	benchAppendNewStreams(b, benchConcurrency)
}

// BenchmarkAppendNewStreamsOneClient is BenchmarkAppendNewStreams with one
// client: the latency of one append against one raw insert, where group
// commit cannot hide the statement's own cost. One client's rate is the
// inverse of its latency, which follows the disk's flush time from moment to
// moment, so the appends and raw inserts alternate one by one (each op is
// one of each) rather than running one after the other.
func BenchmarkAppendNewStreamsOneClient(b *testing.B) {
	ctx := b.Context()
	pool := newTestPool(b)
	s := New(pool)
	createBaseline(b, pool)
	raw := func() (time.Duration, error) {
		start := time.Now()
		_, err := pool.Exec(ctx, `INSERT INTO bench_raw (actor, key, body) VALUES ($1, $2, $3)`,
			"actor-0", uuid.Must(uuid.NewV7()).String(), benchData)
		return time.Since(start), err
	}
	appendOne := func() (time.Duration, error) {
		id := uuid.Must(uuid.NewV7()).String()
		start := time.Now()
		_, err := s.Append(ctx, "bench-"+id, eventstore.NoStream(),
			eventstore.EventData{ID: id, Type: "Benchmarked", Data: benchData, Metadata: []byte(`{"actor":"actor-1"}`)})
		return time.Since(start), err
	}
	rawSum, appendSum := alternate(b, "baseline insert", raw, "append", appendOne)
	b.ReportMetric(float64(b.N)/appendSum.Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/rawSum.Seconds(), "raw_inserts/s")
	b.ReportMetric(rawSum.Seconds()/appendSum.Seconds(), "x_of_raw_insert")
}

// benchAppendNewStreams runs BenchmarkAppendNewStreams with clients
// concurrent appenders and as many raw inserters.
func benchAppendNewStreams(b *testing.B, clients int) {
	ctx := b.Context()
	pool := newTestPool(b)
	s := New(pool)
	createBaseline(b, pool)
	// Warm both paths (connections, prepared statements) outside the timing.
	warm := func(ctx context.Context, w, i int) error {
		if _, err := pool.Exec(ctx, `INSERT INTO bench_raw (actor, key, body) VALUES ($1, $2, $3)`,
			fmt.Sprintf("warm-%d", w), uuid.Must(uuid.NewV7()).String(), benchData); err != nil {
			return err
		}
		_, err := s.Append(ctx, "warm-"+uuid.Must(uuid.NewV7()).String(), eventstore.NoStream(),
			eventstore.EventData{ID: uuid.Must(uuid.NewV7()).String(), Type: "Warm", Data: benchData})
		return err
	}
	if _, err := runConcurrently(ctx, 2*clients, clients, warm); err != nil {
		b.Fatalf("warm up: %v", err)
	}

	raw, err := runConcurrently(ctx, b.N, clients, func(ctx context.Context, w, i int) error {
		_, err := pool.Exec(ctx, `INSERT INTO bench_raw (actor, key, body) VALUES ($1, $2, $3)`,
			fmt.Sprintf("actor-%d", w), uuid.Must(uuid.NewV7()).String(), benchData)
		return err
	})
	if err != nil {
		b.Fatalf("baseline insert: %v", err)
	}

	b.ResetTimer()
	appended, err := runConcurrently(ctx, b.N, clients, func(ctx context.Context, w, i int) error {
		id := uuid.Must(uuid.NewV7()).String()
		_, err := s.Append(ctx, "bench-"+id, eventstore.NoStream(),
			eventstore.EventData{ID: id, Type: "Benchmarked", Data: benchData, Metadata: []byte(`{"actor":"actor-1"}`)})
		return err
	})
	b.StopTimer()
	if err != nil {
		b.Fatalf("append: %v", err)
	}
	b.ReportMetric(float64(b.N)/appended.Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/raw.Seconds(), "raw_inserts/s")
	b.ReportMetric(raw.Seconds()/appended.Seconds(), "x_of_raw_insert")
}

// BenchmarkReadAll measures reading a log of 20,000 events from the start in
// ReadAll pages of 1,000 (one op = the whole log) and reports events/s.
func BenchmarkReadAll(b *testing.B) {
	const (
		events = 20_000
		batch  = 100
		page   = 1000
	)
	ctx := b.Context()
	s := New(newTestPool(b))
	_, err := runConcurrently(ctx, events/batch, 8, func(ctx context.Context, w, i int) error {
		batchEvents := make([]eventstore.EventData, batch)
		for j := range batchEvents {
			batchEvents[j] = eventstore.EventData{ID: uuid.Must(uuid.NewV7()).String(), Type: "Read", Data: benchData}
		}
		_, err := s.Append(ctx, fmt.Sprintf("read-%d", i), eventstore.NoStream(), batchEvents...)
		return err
	})
	if err != nil {
		b.Fatalf("seed: %v", err)
	}

	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var (
			after eventstore.Position
			n     int
		)
		for {
			got, err := s.ReadAll(ctx, after, page)
			if err != nil {
				b.Fatalf("ReadAll(%s, %d) = %v", after, page, err)
			}
			if len(got) == 0 {
				break
			}
			n += len(got)
			after = got[len(got)-1].Position
		}
		if n != events {
			b.Fatalf("read %d events, want %d", n, events)
		}
	}
	b.ReportMetric(float64(b.N*events)/time.Since(start).Seconds(), "events/s")
}

// Sizes of BenchmarkAppendAtScale's two logs, in events.
const (
	scaleSmall = 30_000
	scaleLarge = 1_000_000
	// scaleEnv overrides scaleLarge (for a quick run of the benchmark's
	// code, not for its figure).
	scaleEnv = "BOOKING_BENCH_SCALE_EVENTS"
	// scaleRound is how many appends go to one log before the other's turn.
	scaleRound = 50
	// scaleAppends is how many appends one op makes to each log.
	scaleAppends = 1000
)

// fillLog adds n events to the log of pool in one set-based statement, three
// events per stream (streams "fill-<i>"), as the service's streams are
// short, with random (UUIDv4) ids, the worst case for the id index; then
// VACUUM ANALYZE, as autovacuum would have done by then.
func fillLog(tb testing.TB, ctx context.Context, pool interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, n int) {
	tb.Helper()
	if _, err := pool.Exec(ctx, `
		INSERT INTO events (tx, stream, revision, id, type, data, metadata)
		SELECT pg_current_xact_id(), 'fill-' || (i / 3), i % 3, gen_random_uuid(), 'Filled', $2::bytea, NULL
		FROM generate_series(0, $1::bigint - 1) AS i`, n, benchData); err != nil {
		tb.Fatalf("fill %d events: %v", n, err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE events`); err != nil {
		tb.Fatalf("vacuum: %v", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE streams`); err != nil {
		tb.Fatalf("vacuum: %v", err)
	}
}

// BenchmarkAppendAtScale measures the latency of one append (one event to a
// new stream at NoStream, one client, synchronous commit on) on a log of
// 1,000,000 events against the same on a log of 30,000, and reports the
// ratio as x_of_30k (1.0: no slower at a million events; the goal is at most
// 1.2), with each mean latency in µs (us_at_30k, us_at_1M). The two logs are
// separate databases on one server, each filled by one set-based INSERT
// (about a minute in all on two busy cores); then 1,000 appends per op go to
// each, alternating in rounds of 50 so that drift in the machine's load
// affects both alike. The fill is paid on every call of the function, so run
// it once: go test -run '^$' -bench AppendAtScale -benchtime 1x
// ./eventstore/pgstore (inside test/scripts/pg.sh throwaway; about 90 s).
// BOOKING_BENCH_SCALE_EVENTS overrides the large log's size.
func BenchmarkAppendAtScale(b *testing.B) {
	large := scaleLarge
	if v := os.Getenv(scaleEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number of events", scaleEnv, v)
		}
		large = n
	}
	ctx := b.Context()
	small, big := New(newTestPool(b)), New(newTestPool(b))
	fillLog(b, ctx, small.pool, scaleSmall)
	fillLog(b, ctx, big.pool, large)
	appendOne := func(s *Store) (time.Duration, error) {
		id := uuid.Must(uuid.NewV7()).String()
		start := time.Now()
		_, err := s.Append(ctx, "intent-"+id, eventstore.NoStream(),
			eventstore.EventData{ID: id, Type: "Benchmarked", Data: benchData, Metadata: []byte(`{"actor":"actor-1"}`)})
		return time.Since(start), err
	}
	// Warm both (connections, prepared statements, the plans' caches).
	for range scaleRound {
		for _, s := range []*Store{small, big} {
			if _, err := appendOne(s); err != nil {
				b.Fatalf("warm up: %v", err)
			}
		}
	}
	b.ResetTimer()
	var atSmall, atLarge time.Duration
	total := scaleAppends * b.N
	for done := 0; done < total; done += scaleRound {
		n := min(scaleRound, total-done)
		for _, run := range []struct {
			s   *Store
			sum *time.Duration
		}{{small, &atSmall}, {big, &atLarge}} {
			for range n {
				d, err := appendOne(run.s)
				if err != nil {
					b.Fatalf("append: %v", err)
				}
				*run.sum += d
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(atSmall.Microseconds())/float64(total), "us_at_30k")
	b.ReportMetric(float64(atLarge.Microseconds())/float64(total), "us_at_1M")
	b.ReportMetric(atLarge.Seconds()/atSmall.Seconds(), "x_of_30k")
}

// BenchmarkMultiStreamAppendOneClient measures a unit of work of three
// streams (two events, one, one: about what an order writes) from one
// client, alternating one op by one op between one AppendMulti of the three
// parts and three Appends of the same parts one after the other. It reports
// units/s of each and their ratio (x_of_separate_appends: 2.0 means the
// multi-stream append does the unit in half the time). Synchronous commit is
// on, so the ratio includes the two commits saved.
func BenchmarkMultiStreamAppendOneClient(b *testing.B) {
	ctx := b.Context()
	s := New(newTestPool(b))
	unit := func() []eventstore.StreamAppend {
		ev := func(typ string) eventstore.EventData {
			return eventstore.EventData{ID: uuid.Must(uuid.NewV7()).String(), Type: typ, Data: benchData, Metadata: []byte(`{"actor":"actor-1"}`)}
		}
		id := uuid.Must(uuid.NewV7()).String()
		return []eventstore.StreamAppend{
			{Stream: "intent-" + id, Expected: eventstore.NoStream(), Events: []eventstore.EventData{ev("Began"), ev("Claimed")}},
			{Stream: "order-" + id, Expected: eventstore.NoStream(), Events: []eventstore.EventData{ev("Placed")}},
			{Stream: "attempt-" + id, Expected: eventstore.NoStream(), Events: []eventstore.EventData{ev("Started")}},
		}
	}
	multi := func() (time.Duration, error) {
		parts := unit()
		start := time.Now()
		_, err := s.AppendMulti(ctx, parts...)
		return time.Since(start), err
	}
	separate := func() (time.Duration, error) {
		parts := unit()
		start := time.Now()
		for _, p := range parts {
			if _, err := s.Append(ctx, p.Stream, p.Expected, p.Events...); err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	multiSum, separateSum := alternate(b, "AppendMulti", multi, "Append", separate)
	b.ReportMetric(float64(b.N)/multiSum.Seconds(), "multi_units/s")
	b.ReportMetric(float64(b.N)/separateSum.Seconds(), "separate_units/s")
	b.ReportMetric(separateSum.Seconds()/multiSum.Seconds(), "x_of_separate_appends")
}
