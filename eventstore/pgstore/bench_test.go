package pgstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

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
// appender (and one raw inserter): the latency of one append against one
// raw insert, where group commit cannot hide the statement's own cost.
func BenchmarkAppendNewStreamsOneClient(b *testing.B) {
	benchAppendNewStreams(b, 1)
}

// benchAppendNewStreams runs BenchmarkAppendNewStreams with clients
// concurrent appenders and as many raw inserters.
func benchAppendNewStreams(b *testing.B, clients int) {
	ctx := b.Context()
	pool := newTestPool(b)
	s := New(pool)
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_raw (
		actor text NOT NULL, key text NOT NULL, body bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
		UNIQUE (actor, key))`); err != nil {
		b.Fatalf("create baseline table: %v", err)
	}
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
