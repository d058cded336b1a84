package projections

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// BenchmarkRebuild generates a realistic log (shows, holds, expiries,
// orders, payments with declines, unknown outcomes, cancels, refunds and
// intents) of at least BOOKING_BENCH_EVENTS events (default 200,000)
// through pgstore appends, then measures, in the same run, the raw rate of
// reading the whole log with ReadAll (batches of DefaultRebuildBatch) and
// the rate of Rebuild of every read model. It reports both in events/s and
// their ratio (rebuild/read): the rebuild's cost over just reading the log.
func BenchmarkRebuild(b *testing.B) {
	want := 200_000
	if s := os.Getenv("BOOKING_BENCH_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("BOOKING_BENCH_EVENTS=%q: want a positive integer", s)
		}
		want = n
	}
	db := mustDB(b)
	ctx := context.Background()
	start := time.Now()
	a := &appender{tb: b, store: db.fast, clock: &clock{}}
	for seed := uint64(1); a.n.Load() < int64(want); seed++ {
		workload{shows: 16, perShow: 200, workers: 16, seed: seed}.run(ctx, a)
	}
	waitHorizon(b, ctx, db)
	if _, err := db.pool.Exec(ctx, "VACUUM ANALYZE events"); err != nil {
		b.Fatal(err)
	}
	b.Logf("generated %d events in %s", a.n.Load(), time.Since(start).Round(time.Millisecond))
	ps := All(24 * time.Hour)

	var readTime, rebuildTime time.Duration
	var events int64
	b.ResetTimer()
	for range b.N {
		// Raw read of the same log, the way Rebuild reads it.
		t0 := time.Now()
		var (
			after eventstore.Position
			read  int64
		)
		for {
			batch, err := db.store.ReadAll(ctx, after, DefaultRebuildBatch)
			if err != nil {
				b.Fatal(err)
			}
			read += int64(len(batch))
			if len(batch) < DefaultRebuildBatch {
				break
			}
			after = batch[len(batch)-1].Position
		}
		readTime += time.Since(t0)

		t1 := time.Now()
		res, err := Rebuild(ctx, db.pool, db.store, ps, RebuildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		rebuildTime += time.Since(t1)
		if res.Events != read {
			b.Fatalf("rebuild read %d events, the raw read %d", res.Events, read)
		}
		events += res.Events
	}
	b.StopTimer()
	readRate := float64(events) / readTime.Seconds()
	rebuildRate := float64(events) / rebuildTime.Seconds()
	b.ReportMetric(float64(events)/float64(b.N), "events")
	b.ReportMetric(rebuildRate, "rebuild-events/s")
	b.ReportMetric(readRate, "read-events/s")
	b.ReportMetric(rebuildRate/readRate, "rebuild/read")
}
