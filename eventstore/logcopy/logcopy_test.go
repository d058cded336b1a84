package logcopy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/logcopy"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

func events(typ string, n int) []eventstore.EventData {
	out := make([]eventstore.EventData, n)
	for i := range out {
		out[i] = eventstore.EventData{ID: uuid.NewString(), Type: typ, Data: fmt.Appendf(nil, `{"i":%d}`, i),
			Metadata: []byte(`{"occurred_at":"2027-01-01T12:00:00Z"}`)}
	}
	return out
}

func mustAppend(t *testing.T, s eventstore.Store, stream string, exp eventstore.ExpectedRevision, evs ...eventstore.EventData) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(context.Background(), stream, exp, evs...)
	if err != nil {
		t.Fatalf("Append(%s) = %v", stream, err)
	}
	return res
}

// newStores returns the two ends of a copy: a PostgreSQL store on a fresh
// database and a KurrentDB store on a fresh test server, both closed when
// t ends, and a context that ends after two minutes or with t.
func newStores(t *testing.T) (context.Context, *pgstore.Store, *kurrentdb.Store) {
	t.Helper()
	pg := pgstore.New(pgtest.NewPool(t, pgtest.NewDatabase(t)))
	srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
	kdb, err := kurrentdb.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, pg, kdb
}

// copyAll copies src to dst, mirrors the truncations and verifies them,
// failing t on any difference.
func copyAll(t *testing.T, ctx context.Context, src, dst eventstore.Store) logcopy.Result {
	t.Helper()
	res, err := logcopy.Copy(ctx, src, dst, logcopy.Options{Batch: 3})
	if err != nil {
		t.Fatalf("Copy = %v", err)
	}
	if _, err := logcopy.MirrorTruncations(ctx, src, dst, res.Streams); err != nil {
		t.Fatalf("MirrorTruncations = %v", err)
	}
	rep, err := logcopy.Verify(ctx, src, dst, res.Streams)
	if err != nil || len(rep.Differ) > 0 || rep.SourceEvents != rep.TargetEvents {
		t.Fatalf("Verify = %+v, %v; want no difference", rep, err)
	}
	return res
}

// TestCopyPostgresToKurrentDBAndBack: a PostgreSQL log with interleaved
// streams, a purged intent and one purged up to its last event is copied to
// KurrentDB: the first copy is cut short (as a SIGKILL would) and run again;
// every stream shows the same events with the same digests, the purged
// stream keeps its revisions (placeholders below its truncation), and a
// checkpoint maps to the same event. New events written on KurrentDB are
// copied back into the same PostgreSQL log, where the events copied before
// are recognised, not written twice.
func TestCopyPostgresToKurrentDBAndBack(t *testing.T) {
	ctx, pg, kdb := newStores(t)

	mustAppend(t, pg, "show-1", eventstore.NoStream(), events("ShowScheduled", 1)...)
	mustAppend(t, pg, "intent-a", eventstore.NoStream(), events("IntentRecorded", 2)...)
	order := mustAppend(t, pg, "order-1", eventstore.NoStream(), events("OrderPlaced", 2)...)
	mustAppend(t, pg, "intent-b", eventstore.NoStream(), events("IntentRecorded", 3)...)
	mustAppend(t, pg, "show-1", eventstore.Exact(0), events("SeatsHeld", 2)...)
	mustAppend(t, pg, "order-1", eventstore.Exact(1), events("OrderConfirmed", 2)...)
	head := mustAppend(t, pg, "intent-c", eventstore.NoStream(), events("IntentRecorded", 1)...)
	for stream, before := range map[string]eventstore.Revision{"intent-a": 2, "intent-b": 2} {
		if err := pg.Truncate(ctx, stream, before); err != nil {
			t.Fatal(err)
		}
	}

	// A copy cut short after two batches, then run again to the end. Once
	// PostgreSQL holds back none of the events (a transaction of another
	// test's database may), ReadAll pages them 3 by 3: intent-b, the 4th
	// event of the log, is in the second batch.
	mustSettle(t, ctx, pg)
	cut, stop := context.WithCancel(ctx)
	batches := 0
	_, err := logcopy.Copy(cut, pg, kdb, logcopy.Options{Batch: 3, Progress: func(r logcopy.Result) {
		if r.HeldBack > 0 {
			t.Errorf("Copy reports %d events held back after PostgreSQL held back none", r.HeldBack)
		}
		if batches++; batches == 2 {
			stop()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Copy cut short = %v, want context.Canceled", err)
	}
	res := copyAll(t, ctx, pg, kdb)
	// intent-b's placeholders were written by the first run (a repeat now);
	// intent-a, purged whole, gets its own after the log.
	if res.Read != 9 || res.Placeholders != 2 || len(res.Streams) != 5 {
		t.Errorf("Copy after the cut = %+v, want 9 events read, intent-a's 2 placeholders, 5 streams", res)
	}
	// The purged stream kept its revisions: its next append is at 2.
	if got, err := kdb.ReadStream(ctx, "intent-b", 0, 0); err != nil || len(got) != 1 || got[0].Revision != 2 {
		t.Fatalf("KurrentDB intent-b = %v, %v; want only revision 2", got, err)
	}
	if _, err := kdb.ReadStream(ctx, "intent-a", 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Errorf("KurrentDB intent-a = %v, want not found (purged whole)", err)
	}
	mustAppend(t, kdb, "intent-a", eventstore.Exact(1), events("IntentRecorded", 1)...)

	// Checkpoints map to the same event.
	m, err := logcopy.MapPositions(ctx, pg, kdb, []eventstore.Position{{}, order.Position, head.Position})
	if err != nil {
		t.Fatal(err)
	}
	for p, rev := range map[eventstore.Position]struct {
		stream string
		rev    eventstore.Revision
	}{order.Position: {"order-1", 1}, head.Position: {"intent-c", 0}} {
		got, err := kdb.ReadStream(ctx, rev.stream, rev.rev, 1)
		if err != nil || len(got) != 1 || got[0].Position != m[p] {
			t.Errorf("MapPositions(%s) = %s, want %s@%d's position in KurrentDB (%v, %v)", p, m[p], rev.stream, rev.rev, got, err)
		}
	}
	if !m[eventstore.Position{}].IsZero() {
		t.Errorf("MapPositions(zero) = %s, want zero", m[eventstore.Position{}])
	}

	// New events on KurrentDB, then the copy back into the same PostgreSQL
	// log: the old events are recognised, the new ones written once.
	mustAppend(t, kdb, "order-1", eventstore.Exact(3), events("RefundRequested", 1)...)
	mustAppend(t, kdb, "show-2", eventstore.NoStream(), events("ShowScheduled", 1)...)
	before := countAll(t, ctx, pg)
	back := copyAll(t, ctx, kdb, pg)
	if back.Placeholders != 0 {
		t.Errorf("copy back wrote %d placeholders, want 0", back.Placeholders)
	}
	// The copied events are committed, but ReadAll returns them only once
	// no transaction older than theirs runs on the server: other tests'
	// databases share it.
	mustSettle(t, ctx, pg)
	if after := countAll(t, ctx, pg); after != before+3 {
		t.Errorf("PostgreSQL log holds %d events after the copy back, want %d (the 3 written on KurrentDB)", after, before+3)
	}
}

// mustSettle waits, for at most a minute, until s holds back no committed
// event (pgstore.Store.HorizonLag), so ReadAll returns every event
// committed before the call.
func mustSettle(t *testing.T, ctx context.Context, s *pgstore.Store) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		lag, err := s.HorizonLag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if lag.Events == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL still holds back %d committed events after a minute", lag.Events)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdHorizon starts a transaction that holds a transaction id in another
// database of the same server, as another application or another
// package's test would, and returns the function that ends it (at the
// latest when the test ends, before its pool closes). Until then pgstore's
// ReadAll holds back every event committed after it began.
func holdHorizon(t *testing.T, ctx context.Context) (release func()) {
	t.Helper()
	other := pgtest.NewPool(t, pgtest.NewEmptyDatabase(t))
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ended := false
	release = func() {
		if !ended {
			ended = true
			if err := tx.Rollback(context.Background()); err != nil {
				t.Errorf("end the transaction holding the horizon: %v", err)
			}
		}
	}
	t.Cleanup(release)
	if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	return release
}

// TestCopyWaitsForHeldBackEvents: events committed in PostgreSQL behind a
// transaction still running in another database (ReadAll holds them back)
// are not the end of the log: Copy waits for them, says so through
// Progress, and ends with them once the transaction ends; while it runs
// past Options.Wait, Copy fails with a *HeldBackError rather than end
// without them. A whole stream held back would otherwise be missing from
// the copy and from Verify, which compares the streams the copy saw.
func TestCopyWaitsForHeldBackEvents(t *testing.T) {
	ctx, pg, kdb := newStores(t)

	mustAppend(t, pg, "show-1", eventstore.NoStream(), events("ShowScheduled", 3)...)
	release := holdHorizon(t, ctx)
	mustAppend(t, pg, "show-1", eventstore.Exact(2), events("SeatsHeld", 1)...)
	mustAppend(t, pg, "show-2", eventstore.NoStream(), events("ShowScheduled", 2)...)

	var seen int64
	_, err := logcopy.Copy(ctx, pg, kdb, logcopy.Options{Batch: 2, Wait: 300 * time.Millisecond, Progress: func(r logcopy.Result) {
		seen = max(seen, r.HeldBack)
	}})
	// At least the 3 events after the transaction began are held back; a
	// transaction of another database's test may hold back the first 3 too.
	var held *logcopy.HeldBackError
	if !errors.As(err, &held) || held.Events < 3 || held.Events > 6 || seen < 3 {
		t.Fatalf("Copy with 3 events held back past Options.Wait = %v (Progress saw %d held back), want a *HeldBackError for 3 to 6", err, seen)
	}

	released := false
	res, err := logcopy.Copy(ctx, pg, kdb, logcopy.Options{Batch: 2, Progress: func(r logcopy.Result) {
		if r.HeldBack > 0 && !released {
			released = true
			release()
		}
	}})
	if err != nil || !released || res.Read != 6 || fmt.Sprint(res.Streams) != "[show-1 show-2]" {
		t.Fatalf("Copy that waited (released: %v) = %+v, %v; want 6 events of show-1 and show-2", released, res, err)
	}
	rep, err := logcopy.Verify(ctx, pg, kdb, res.Streams)
	if err != nil || len(rep.Differ) > 0 || rep.TargetEvents != 6 {
		t.Errorf("Verify = %+v, %v; want 6 events on each side, no difference", rep, err)
	}
}

// TestMapPositionsWaitsForHeldBackEvents: events copied into PostgreSQL
// behind a transaction still running in another database are found by
// MapPositions once it ends: it waits for them (here until its context
// ends) rather than map a checkpoint to an earlier event, which would
// make the workers handle events again.
func TestMapPositionsWaitsForHeldBackEvents(t *testing.T) {
	ctx, pg, kdb := newStores(t)

	mustAppend(t, kdb, "show-1", eventstore.NoStream(), events("ShowScheduled", 2)...)
	release := holdHorizon(t, ctx)
	head := mustAppend(t, kdb, "show-2", eventstore.NoStream(), events("ShowScheduled", 1)...)
	copyAll(t, ctx, kdb, pg)

	short, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	if m, err := logcopy.MapPositions(short, kdb, pg, []eventstore.Position{head.Position}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("MapPositions with the copied events held back = %v, %v; want it to wait until its context ends", m, err)
	}
	release()
	m, err := logcopy.MapPositions(ctx, kdb, pg, []eventstore.Position{head.Position})
	if err != nil {
		t.Fatal(err)
	}
	got, err := pg.ReadStream(ctx, "show-2", 0, 1)
	if err != nil || len(got) != 1 || m[head.Position] != got[0].Position {
		t.Errorf("MapPositions(%s) = %s, want show-2@0's position in PostgreSQL (%v, %v)", head.Position, m[head.Position], got, err)
	}
}

// countAll counts the events s.ReadAll hands out.
func countAll(t *testing.T, ctx context.Context, s eventstore.Store) int {
	t.Helper()
	var n int
	var after eventstore.Position
	for {
		page, err := s.ReadAll(ctx, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return n
		}
		n += len(page)
		after = page[len(page)-1].Position
	}
}
