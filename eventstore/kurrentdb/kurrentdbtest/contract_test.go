package kurrentdbtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// contractCase is one rule of KurrentDB's behaviour that the double must
// reproduce, checked through the raw client against the double and, when
// BOOKING_TEST_KURRENTDB_URL is set, against a real server.
type contractCase struct {
	rule   string // what the server does
	source string // where KurrentDB defines it
	run    func(t *testing.T, tg target)
}

// contract lists the rules, in the order of the package documentation.
var contract = []contractCase{
	// Appends and expected revisions.
	{"any and no stream append to a new stream, any to an existing one", "IndexWriter.CheckCommit (CheckCommitForNewStream)", testNewStream},
	{"no stream on an existing stream is a wrong expected version carrying the current revision and writes nothing", "IndexWriter.CheckCommit; Streams.Append.cs WrongExpectedVersion", testNoStreamExisting},
	{"stream exists fails on a stream never written and succeeds on one with only metadata", "IndexWriter.CheckCommit (ExpectedVersion.StreamExists)", testStreamExists},
	{"an exact revision appends at the current revision and fails above it", "IndexWriter.CheckCommit (expectedVersion > curVersion)", testExact},
	{"an append of no events only checks the expected revision", "IndexWriter.CheckCommit (eventIds.Length == 0)", testZeroEvents},
	{"a tombstoned stream refuses appends and reads with stream-deleted", "IndexWriter.CheckCommit (EventNumber.DeletedStream); RpcExceptions.StreamDeleted", testTombstone},
	// Idempotency.
	{"a repeat below the current revision with every id in place writes nothing and replies the batch's last revision and position", "IndexWriter.CheckCommit (CommitDecision.Idempotent)", testStrongRepeat},
	{"a repeat below the current revision whose first id differs is a wrong expected version", "IndexWriter.CheckCommit (ConsistencyCheckFailure)", testStrongFirstDiffers},
	{"a repeat whose later id differs is a wrong expected version", "IndexWriter.CheckCommit (CorruptedIdempotency); StorageWriterService.ActOnCommitCheckFailure", testStrongLaterDiffers},
	{"with any or stream exists a batch whose ids are all cached is a repeat", "IndexWriter.CheckCommit (Any/StreamExists, _committedEvents)", testWeakRepeat},
	{"with any a batch whose first id is new is written whole, duplicating stored ids", "IndexWriter.CheckCommit (first id not cached: CommitOk)", testWeakFirstNew},
	{"with any a batch whose first id is cached and a later one not is a wrong expected version", "IndexWriter.CheckCommit (CorruptedIdempotency)", testWeakLaterNew},
	{"an exact revision equal to the current one appends stored ids again", "IndexWriter.CheckCommit (expectedVersion == curVersion)", testExactCurrentDuplicates},
	{"an id stored in another stream is not a repeat", "IndexWriter.CheckCommit (prepInfo.StreamId must match)", testOtherStream},
	{"an id twice in one batch is written twice", "IndexWriter.CheckCommit (no check within a batch)", testDuplicateInBatch},
	{"a repeat of events hidden by $tb succeeds without a position", "IndexWriter.CheckCommit (IdempotentLogPosition -1); Streams.Append.cs NoPosition", testRepeatHidden},
	{"the any-repeat cache is bounded: evicted ids are written again", "BoundedCache; ESConsts.CommittedEventsMemCacheLimit", testCacheBounded},
	{"after a restart the cache is empty: any-repeats are written again, exact repeats still recognised", "IndexWriter (_committedEvents is not rebuilt); IndexReader.ReadPrepare", testRestartCache},
	{"a repeat arriving before the original is indexed is dropped and times out Aborted", "IndexWriter.CheckCommit (IdempotentNotReady); RpcExceptions.Timeout", testNotReady},
	// Positions and $all.
	{"positions are (p, p), increasing, the append reply is the last event's, and stream reads agree with $all", "ResolvedEvent; AllReader; Streams.Append.cs", testPositions},
	{"$all forwards from a position includes it and backwards excludes it", "AllReader.ReadAllEventsForward/BackwardInternal", testAllBounds},
	{"$all shows metadata events, system events and events hidden by $tb, but not the epoch records", "AllReader; EventFilter.DefaultAllFilter", testAllShowsEverything},
	{"reading $all from inside a record is refused", "RpcExceptions.InvalidPositionException", testInvalidPosition},
	// Subscriptions.
	{"a subscription confirms, starts after its position, delivers in order and ends when cancelled", "Enumerator.AllSubscription; Streams.Read.cs", testSubscribeFromPosition},
	{"a subscription without a start begins at the end", "SubscribeToAllOptions.setDefaults; Enumerator.AllSubscription (Position.End)", testSubscribeFromEnd},
	{"a filtered subscription skips system streams and sends checkpoints and caught-up", "Enumerator.AllSubscriptionFiltered; EventFilter.StreamIdRegexStrategy", testFilteredSubscription},
	// Stream reads and metadata.
	{"a stream never written is not found", "Enumerator.ReadStreamForwards (ReadStreamResult.NoStream)", testNeverWritten},
	{"a soft-deleted stream is not found, and an append recreates it after its last revision", "StorageWriterService (soft delete, SoftUndeleteStream)", testSoftDelete},
	{"$tb hides events below it, and a fully truncated stream reads as empty", "IndexReader.ReadStreamEventsForwardInternal (TruncateBefore)", testTruncateBefore},
	{"$maxCount keeps the last events and a metastream keeps only its last", "IndexReader (MaxCount); SystemStreams metastream metadata", testMaxCount},
	{"$maxAge hides events older than it", "IndexReader.ForStreamWithMaxAge", testMaxAge},
	{"reading past the end of a stream returns nothing", "IndexReader.ReadStreamEventsForwardInternal (startEventNumber > lastEventNumber)", testPastEnd},
	{"every event carries type, content-type, created in 100 ns ticks and its bytes as written", "MetadataHelpers.AddGrpcMetadataFrom; EpochExtensions.ToTicksSinceEpoch", testRecordedFields},
}

// doubleOnly marks rules that need a fault or a setting only the double
// offers (a small cache, a restart, an index hold, a position inside a
// record).
var doubleOnly = map[string]string{
	"the any-repeat cache is bounded: evicted ids are written again":                                    "needs a cache small enough to evict (a real server's holds 8 MiB)",
	"after a restart the cache is empty: any-repeats are written again, exact repeats still recognised": "needs a restart of the server",
	"a repeat arriving before the original is indexed is dropped and times out Aborted":                 "needs replication held back",
	"reading $all from inside a record is refused":                                                      "needs the double's record layout",
}

// TestContract holds the double (and a real server where
// BOOKING_TEST_KURRENTDB_URL is set) to KurrentDB's behaviour, one rule per
// case, through the real client.
func TestContract(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			for _, c := range append(contract[:len(contract):len(contract)], ported...) {
				t.Run(c.rule, func(t *testing.T) {
					t.Parallel()
					if c.source != "" {
						t.Logf("ported from KurrentDB %s: %s", portedTag, c.source)
					}
					if why, ok := doubleOnly[c.rule]; ok && tg.double == nil {
						t.Skipf("double only (%s); KurrentDB source: %s", why, c.source)
					}
					c.run(t, tg)
				})
			}
		})
	}
}

func testNewStream(t *testing.T, tg target) {
	ctx, c := testContext(t), tg.client
	for _, expected := range []esdb.ExpectedRevision{esdb.Any{}, esdb.NoStream{}} {
		stream := newStream("new")
		res := mustAppend(t, ctx, c, stream, expected, events("A", 2)...)
		if res.NextExpectedVersion != 1 {
			t.Errorf("AppendToStream(new, %T) revision = %d, want 1", expected, res.NextExpectedVersion)
		}
		res = mustAppend(t, ctx, c, stream, esdb.Any{}, event("B"))
		if res.NextExpectedVersion != 2 {
			t.Errorf("AppendToStream(existing, any) revision = %d, want 2", res.NextExpectedVersion)
		}
	}
}

func testNoStreamExisting(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "nostream")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 3)...)
	appendWEV(t, ctx, c, stream, esdb.NoStream{}, "2", event("B"))
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100); len(got) != 3 {
		t.Errorf("ReadStream after the conflict = %d events, want 3 (nothing written)", len(got))
	}
	appendWEV(t, ctx, c, stream, esdb.Revision(7), "2", event("C"))
}

func testStreamExists(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "exists")
	appendWEV(t, ctx, c, stream, esdb.StreamExists{}, "no_stream", event("A"))
	if _, err := readStream(ctx, c, stream, esdb.ReadStreamOptions{}, 10); err == nil {
		t.Errorf("ReadStream after the conflict = nil error, want not found (nothing written)")
	}
	setMetadata(t, ctx, c, stream, `{"custom":1}`)
	res := mustAppend(t, ctx, c, stream, esdb.StreamExists{}, event("A"))
	if res.NextExpectedVersion != 0 {
		t.Errorf("AppendToStream(metadata only, stream exists) revision = %d, want 0", res.NextExpectedVersion)
	}
}

func testExact(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "exact")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 2)...)
	if res := mustAppend(t, ctx, c, stream, esdb.Revision(1), event("B")); res.NextExpectedVersion != 2 {
		t.Errorf("AppendToStream(exact 1) revision = %d, want 2", res.NextExpectedVersion)
	}
	appendWEV(t, ctx, c, stream, esdb.Revision(3), "2", event("C"))
	appendWEV(t, ctx, c, newStream("exact-new"), esdb.Revision(0), "no_stream", event("C"))
}

func testZeroEvents(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "zero")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 2)...)
	if _, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(1)}); err != nil {
		t.Errorf("AppendToStream(exact 1, no events) = %v, want success", err)
	}
	appendWEV(t, ctx, c, stream, esdb.Revision(0), "1")
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100); len(got) != 2 {
		t.Errorf("ReadStream = %d events, want 2 (nothing written)", len(got))
	}
}

func testTombstone(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "tombstone")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, event("A"))
	if _, err := c.TombstoneStream(ctx, stream, esdb.TombstoneStreamOptions{ExpectedRevision: esdb.Revision(0)}); err != nil {
		t.Fatalf("TombstoneStream = %v", err)
	}
	for _, expected := range []esdb.ExpectedRevision{esdb.Any{}, esdb.NoStream{}, esdb.Revision(0)} {
		_, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: expected}, event("B"))
		wantCode(t, err, esdb.ErrorCodeStreamDeleted)
	}
	_, err := readStream(ctx, c, stream, esdb.ReadStreamOptions{}, 10)
	wantCode(t, err, esdb.ErrorCodeStreamDeleted)
}

func testStrongRepeat(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "strong")
	first, second := events("A", 2), events("B", 2)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, first...)
	want := mustAppend(t, ctx, c, stream, esdb.Revision(1), second...)
	mustAppend(t, ctx, c, stream, esdb.Revision(3), event("C"))

	got := mustAppend(t, ctx, c, stream, esdb.Revision(1), second...)
	if *got != *want {
		t.Errorf("repeat at exact 1 = %+v, want the original's %+v", *got, *want)
	}
	got = mustAppend(t, ctx, c, stream, esdb.NoStream{}, first...)
	if got.NextExpectedVersion != 1 {
		t.Errorf("repeat at no stream revision = %d, want 1", got.NextExpectedVersion)
	}
	got = mustAppend(t, ctx, c, stream, esdb.Revision(1), second[0])
	if got.NextExpectedVersion != 2 {
		t.Errorf("repeat of a prefix revision = %d, want 2", got.NextExpectedVersion)
	}
	if n := len(mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)); n != 5 {
		t.Errorf("ReadStream after repeats = %d events, want 5", n)
	}
}

func testStrongFirstDiffers(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "strong-first")
	first := events("A", 2)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, first...)
	mustAppend(t, ctx, c, stream, esdb.Revision(1), events("B", 2)...)
	for _, batch := range [][]esdb.EventData{{first[1], first[0]}, {event("N")}} {
		appendWEV(t, ctx, c, stream, esdb.NoStream{}, "3", batch...)
	}
	appendWEV(t, ctx, c, stream, esdb.Revision(1), "3", first...)
}

func testStrongLaterDiffers(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "strong-later")
	first := events("A", 2)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, first...)
	mustAppend(t, ctx, c, stream, esdb.Revision(1), event("B"))
	appendWEV(t, ctx, c, stream, esdb.NoStream{}, "2", first[0], event("N"))
	if n := len(mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)); n != 3 {
		t.Errorf("ReadStream = %d events, want 3 (nothing written)", n)
	}
}

func testWeakRepeat(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "weak")
	first, second := events("A", 2), events("B", 2)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, first...)
	want := mustAppend(t, ctx, c, stream, esdb.Any{}, second...)
	for _, expected := range []esdb.ExpectedRevision{esdb.Any{}, esdb.StreamExists{}} {
		got := mustAppend(t, ctx, c, stream, expected, second...)
		if *got != *want {
			t.Errorf("repeat with %T = %+v, want the original's %+v", expected, *got, *want)
		}
		// Neither order nor contiguity is checked: the reply names the
		// last id's revision.
		got = mustAppend(t, ctx, c, stream, expected, second[1], first[0])
		if got.NextExpectedVersion != 0 {
			t.Errorf("repeat of reordered ids with %T revision = %d, want 0", expected, got.NextExpectedVersion)
		}
	}
	if n := len(mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)); n != 4 {
		t.Errorf("ReadStream after repeats = %d events, want 4", n)
	}
}

func testWeakFirstNew(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "weak-first-new")
	stored := event("A")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, stored)
	fresh := event("N")
	res := mustAppend(t, ctx, c, stream, esdb.Any{}, fresh, stored)
	if res.NextExpectedVersion != 2 {
		t.Errorf("AppendToStream(any, [new, stored]) revision = %d, want 2", res.NextExpectedVersion)
	}
	got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)
	if diff := cmp.Diff([]uuid.UUID{stored.EventID, fresh.EventID, stored.EventID}, ids(got)); diff != "" {
		t.Errorf("ReadStream ids mismatch (-want +got):\n%s", diff)
	}
}

func testWeakLaterNew(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "weak-later-new")
	stored := event("A")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, stored)
	appendWEV(t, ctx, c, stream, esdb.Any{}, "0", stored, event("N"))
}

func testExactCurrentDuplicates(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "exact-dup")
	stored := event("A")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, stored)
	if res := mustAppend(t, ctx, c, stream, esdb.Revision(0), stored); res.NextExpectedVersion != 1 {
		t.Errorf("AppendToStream(exact 0, stored id) revision = %d, want 1 (written again)", res.NextExpectedVersion)
	}
	got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)
	if diff := cmp.Diff([]uuid.UUID{stored.EventID, stored.EventID}, ids(got)); diff != "" {
		t.Errorf("ReadStream ids mismatch (-want +got):\n%s", diff)
	}
}

func testOtherStream(t *testing.T, tg target) {
	ctx, c := testContext(t), tg.client
	a, b := newStream("other-a"), newStream("other-b")
	e := event("A")
	mustAppend(t, ctx, c, a, esdb.NoStream{}, e)
	for _, expected := range []esdb.ExpectedRevision{esdb.NoStream{}, esdb.Any{}} {
		stream := b + fmt.Sprintf("-%T", expected)
		if res := mustAppend(t, ctx, c, stream, expected, e); res.NextExpectedVersion != 0 {
			t.Errorf("AppendToStream(%s, %T) revision = %d, want 0 (written)", stream, expected, res.NextExpectedVersion)
		}
	}
}

func testDuplicateInBatch(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "batch-dup")
	e := event("A")
	if res := mustAppend(t, ctx, c, stream, esdb.NoStream{}, e, e); res.NextExpectedVersion != 1 {
		t.Errorf("AppendToStream([e, e]) revision = %d, want 1", res.NextExpectedVersion)
	}
}

func testRepeatHidden(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "hidden-repeat")
	first := events("A", 2)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, first...)
	mustAppend(t, ctx, c, stream, esdb.Revision(1), event("B"))
	setMetadata(t, ctx, c, stream, `{"$tb":2}`)
	got := mustAppend(t, ctx, c, stream, esdb.NoStream{}, first...)
	if want := (esdb.WriteResult{NextExpectedVersion: 1}); *got != want {
		t.Errorf("repeat of hidden events = %+v, want %+v (revision, no position)", *got, want)
	}
}

func testCacheBounded(t *testing.T, tg target) {
	srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{IdempotencyCacheEntries: 4})
	ctx, c := testContext(t), newClient(t, srv.URL())
	stream := newStream("evicted")
	old := event("A")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, old)
	mustAppend(t, ctx, c, stream, esdb.Any{}, events("B", 4)...)
	if res := mustAppend(t, ctx, c, stream, esdb.Any{}, old); res.NextExpectedVersion != 5 {
		t.Errorf("AppendToStream(any, evicted id) revision = %d, want 5 (written again)", res.NextExpectedVersion)
	}
	// The strong check still finds it through the index.
	if res := mustAppend(t, ctx, c, stream, esdb.NoStream{}, old); res.NextExpectedVersion != 0 {
		t.Errorf("AppendToStream(no stream, evicted id) revision = %d, want 0 (a repeat)", res.NextExpectedVersion)
	}
}

func testRestartCache(t *testing.T, tg target) {
	srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{DataFile: t.TempDir() + "/log"})
	ctx, c := testContext(t), newClient(t, srv.URL())
	stream := newStream("restart")
	batch := events("A", 2)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, batch...)
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart() = %v", err)
	}
	// The client reconnects by itself after its first failed call.
	var res *esdb.WriteResult
	storetest.Eventually(t, ctx, func() error {
		var err error
		res, err = c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, batch...)
		return err
	})
	if res.NextExpectedVersion != 1 {
		t.Errorf("repeat at no stream after restart revision = %d, want 1", res.NextExpectedVersion)
	}
	if res := mustAppend(t, ctx, c, stream, esdb.Any{}, batch...); res.NextExpectedVersion != 3 {
		t.Errorf("repeat with any after restart revision = %d, want 3 (written again)", res.NextExpectedVersion)
	}
}

func testNotReady(t *testing.T, tg target) {
	srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{WriteTimeout: 100 * time.Millisecond})
	ctx, c := testContext(t), newClient(t, srv.URL())
	stream := newStream("not-ready")
	batch := events("A", 2)
	srv.HoldIndex(1)
	_, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, batch...)
	wantCode(t, err, esdb.ErrorAborted)
	if _, err := readStream(ctx, c, stream, esdb.ReadStreamOptions{}, 10); err == nil {
		t.Errorf("ReadStream before indexing = nil error, want not found")
	}
	_, err = c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, batch...)
	wantCode(t, err, esdb.ErrorAborted)
	// The dropped repeat released the hold: the next repeat is recognised.
	res := mustAppend(t, ctx, c, stream, esdb.NoStream{}, batch...)
	got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 10)
	if diff := cmp.Diff(dataIDs(batch), ids(got)); diff != "" {
		t.Fatalf("ReadStream ids mismatch (-want +got):\n%s", diff)
	}
	if res.NextExpectedVersion != 1 || res.CommitPosition != got[1].Position.Commit {
		t.Errorf("repeat after indexing = %+v, want revision 1 at %v", *res, got[1].Position)
	}
}

func testPositions(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "positions")
	res := mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 3)...)
	got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)
	for i, e := range got {
		if e.Position.Commit != e.Position.Prepare || e.Position.Commit == 0 || e.Position.Commit == ^uint64(0) {
			t.Errorf("event %d position = %+v, want (p, p) with 0 < p < 2^64-1", i, e.Position)
		}
		if i > 0 && e.Position.Commit <= got[i-1].Position.Commit {
			t.Errorf("event %d position %d not after %d", i, e.Position.Commit, got[i-1].Position.Commit)
		}
	}
	if res.CommitPosition != got[2].Position.Commit || res.PreparePosition != got[2].Position.Prepare {
		t.Errorf("append reply position = %d/%d, want the last event's %+v", res.CommitPosition, res.PreparePosition, got[2].Position)
	}
	fromAll := readAll(t, ctx, c, esdb.ReadAllOptions{From: got[0].Position}, 3)
	if diff := cmp.Diff(got, fromAll); diff != "" {
		t.Errorf("$all from the first event and the stream disagree (-stream +all):\n%s", diff)
	}
}

func testAllBounds(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "bounds")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 3)...)
	got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)
	fwd := readAll(t, ctx, c, esdb.ReadAllOptions{From: got[1].Position}, 1)
	if len(fwd) != 1 || fwd[0].EventID != got[1].EventID {
		t.Errorf("$all forwards from event 1's position = %v, want event 1 itself", ids(fwd))
	}
	bwd := readAll(t, ctx, c, esdb.ReadAllOptions{From: got[1].Position, Direction: esdb.Backwards}, 1)
	if len(bwd) != 1 || bwd[0].EventID != got[0].EventID {
		t.Errorf("$all backwards from event 1's position = %v, want event 0", ids(bwd))
	}
}

func testAllShowsEverything(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "all-shows")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 2)...)
	setMetadata(t, ctx, c, stream, `{"$tb":1}`)
	var sysPos uint64
	if tg.double != nil {
		p, err := tg.double.AppendSystemEvent("$stats-"+stream, "$statsCollected", []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		sysPos = uint64(p)
	}
	if n := len(mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)); n != 1 {
		t.Fatalf("ReadStream after $tb 1 = %d events, want 1", n)
	}
	if n := len(streamOf(t, ctx, c, stream)); n != 2 {
		t.Errorf("$all holds %d events of %s, want 2 (including the one $tb hides)", n, stream)
	}
	meta := streamOf(t, ctx, c, "$$"+stream)
	if len(meta) != 1 || meta[0].EventType != "$metadata" {
		t.Errorf("$all events of $$%s = %v, want one $metadata event", stream, meta)
	}
	// The default $all filter hides only the epoch records (and persistent
	// subscription checkpoints), which sit at the start of the log.
	for _, e := range readAll(t, ctx, c, esdb.ReadAllOptions{From: esdb.Start{}}, 100) {
		if e.StreamID == "$epoch-information" {
			t.Errorf("$all from the start shows an event of $epoch-information, want it hidden")
		}
	}
	if tg.double != nil {
		sys := readAll(t, ctx, c, esdb.ReadAllOptions{From: esdb.Position{Commit: sysPos, Prepare: sysPos}}, 1)
		if len(sys) != 1 || sys[0].EventType != "$statsCollected" {
			t.Errorf("$all at a system event = %v, want the $statsCollected event", sys)
		}
	}
}

func testInvalidPosition(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "invalid-pos")
	res := mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 2)...)
	inside := esdb.Position{Commit: res.CommitPosition - 1, Prepare: res.CommitPosition - 1}
	rs, err := c.ReadAll(ctx, esdb.ReadAllOptions{From: inside}, 1)
	if err == nil {
		defer rs.Close()
		_, err = rs.Recv()
	}
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("ReadAll from inside a record = %v, want an invalid position error", err)
	}
}

// collect receives from sub until n events of stream arrived or ctx is done.
func collect(t *testing.T, ctx context.Context, sub *esdb.Subscription, stream string, n int) (got []*esdb.RecordedEvent, checkpoints int, caughtUp bool) {
	t.Helper()
	return receive(t, ctx, sub, stream, false, func(got int, _ bool) bool { return got >= n })
}

// receive receives from sub until done, given the number of events of
// stream received so far and whether caught_up came, returns true, or ctx
// is done. It returns those events, the number of checkpoints and whether
// caught_up came. noSystem fails t on an event of a system stream (for a
// subscription filtered to exclude them).
func receive(t *testing.T, ctx context.Context, sub *esdb.Subscription, stream string, noSystem bool, done func(got int, caughtUp bool) bool) (got []*esdb.RecordedEvent, checkpoints int, caughtUp bool) {
	t.Helper()
	for !done(len(got), caughtUp) {
		if ctx.Err() != nil {
			t.Fatalf("subscription got %d events (caught up %v) before %v", len(got), caughtUp, ctx.Err())
		}
		ev := sub.Recv()
		switch {
		case ev.EventAppeared != nil:
			e := ev.EventAppeared.OriginalEvent()
			if noSystem && e.StreamID[0] == '$' {
				t.Fatalf("filtered subscription delivered an event of system stream %s", e.StreamID)
			}
			if e.StreamID == stream {
				got = append(got, e)
			}
		case ev.CheckPointReached != nil:
			checkpoints++
		case ev.CaughtUp != nil:
			caughtUp = true
		case ev.SubscriptionDropped != nil:
			t.Fatalf("subscription dropped after %d events, caught up %v: %v", len(got), caughtUp, ev.SubscriptionDropped.Error)
		}
	}
	return got, checkpoints, caughtUp
}

func testSubscribeFromPosition(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "sub")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 3)...)
	stored := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)
	sub, err := c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{From: stored[0].Position})
	if err != nil {
		t.Fatalf("SubscribeToAll = %v", err)
	}
	defer sub.Close()
	if sub.Id() == "" {
		t.Errorf("subscription id is empty, want the confirmation's id")
	}
	live := events("B", 2)
	mustAppend(t, ctx, c, stream, esdb.Revision(2), live...)
	got, _, _ := collect(t, ctx, sub, stream, 4)
	want := append(ids(stored[1:]), dataIDs(live)...)
	if diff := cmp.Diff(want, ids(got)); diff != "" {
		t.Errorf("subscription ids mismatch (-want +got): the start is exclusive\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3, 4}, numbers(got)); diff != "" {
		t.Errorf("subscription revisions mismatch (-want +got):\n%s", diff)
	}
	sub.Close()
	if ev := sub.Recv(); ev.SubscriptionDropped == nil {
		t.Errorf("Recv after Close = %+v, want a drop", ev)
	}
}

func testSubscribeFromEnd(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "sub-end")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, event("Old"))
	sub, err := c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{})
	if err != nil {
		t.Fatalf("SubscribeToAll = %v", err)
	}
	defer sub.Close()
	fresh := event("New")
	mustAppend(t, ctx, c, stream, esdb.Revision(0), fresh)
	got, _, _ := collect(t, ctx, sub, stream, 1)
	if got[0].EventID != fresh.EventID {
		t.Errorf("first event of a subscription without a start = %s, want the live one %s", got[0].EventID, fresh.EventID)
	}
}

func testFilteredSubscription(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "sub-filter")
	marker := mustAppend(t, ctx, c, newStream("sub-filter-marker"), esdb.NoStream{}, event("Marker"))
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 3)...)
	setMetadata(t, ctx, c, stream, `{"custom":true}`)
	stored := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)
	sub, err := c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{
		From:            esdb.Position{Commit: marker.CommitPosition, Prepare: marker.PreparePosition},
		Filter:          &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Regex: "^[^$]"},
		MaxSearchWindow: 1, CheckpointInterval: 1,
	})
	if err != nil {
		t.Fatalf("SubscribeToAll = %v", err)
	}
	defer sub.Close()
	// With a window of 1 every considered event is followed by a
	// checkpoint; caught_up comes when the subscription goes live.
	got, checkpoints, _ := receive(t, ctx, sub, stream, true, func(got int, caughtUp bool) bool { return got >= len(stored) && caughtUp })
	if diff := cmp.Diff(ids(stored), ids(got)); diff != "" {
		t.Errorf("filtered subscription ids mismatch (-want +got):\n%s", diff)
	}
	if checkpoints < len(stored) {
		t.Errorf("filtered subscription sent %d checkpoints for %d events with a window of 1, want at least %d", checkpoints, len(stored), len(stored))
	}
}

func testNeverWritten(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "never")
	rs, err := c.ReadStream(ctx, stream, esdb.ReadStreamOptions{}, 10)
	if err != nil {
		t.Fatalf("ReadStream(never written) opening = %v, want nil (not found comes from Recv)", err)
	}
	defer rs.Close()
	_, err = rs.Recv()
	wantCode(t, err, esdb.ErrorCodeResourceNotFound)
}

func testSoftDelete(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "soft")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 2)...)
	if _, err := c.DeleteStream(ctx, stream, esdb.DeleteStreamOptions{ExpectedRevision: esdb.Revision(1)}); err != nil {
		t.Fatalf("DeleteStream = %v", err)
	}
	_, err := readStream(ctx, c, stream, esdb.ReadStreamOptions{}, 10)
	wantCode(t, err, esdb.ErrorCodeResourceNotFound)
	// Expecting it to exist is refused as stream-deleted, not as a wrong
	// expected version (RequestManagerBase.Handle(ConsistencyChecksFailed)).
	_, err = c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.StreamExists{}}, event("B"))
	wantCode(t, err, esdb.ErrorCodeStreamDeleted)
	fresh := event("C")
	if res := mustAppend(t, ctx, c, stream, esdb.NoStream{}, fresh); res.NextExpectedVersion != 2 {
		t.Errorf("AppendToStream(soft-deleted, no stream) revision = %d, want 2", res.NextExpectedVersion)
	}
	got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 10)
	if len(got) != 1 || got[0].EventID != fresh.EventID || got[0].EventNumber != 2 {
		t.Errorf("ReadStream after recreating = %v at %v, want only the new event at 2", ids(got), numbers(got))
	}
}

func testTruncateBefore(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "tb")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 4)...)
	setMetadata(t, ctx, c, stream, `{"$tb":2}`)
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100); !cmp.Equal(numbers(got), []uint64{2, 3}) {
		t.Errorf("ReadStream with $tb 2 = revisions %v, want [2 3]", numbers(got))
	}
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{From: esdb.Revision(0)}, 1); !cmp.Equal(numbers(got), []uint64{2}) {
		t.Errorf("ReadStream(from 0, count 1) with $tb 2 = revisions %v, want [2] (paging past the hidden events)", numbers(got))
	}
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 100); !cmp.Equal(numbers(got), []uint64{3, 2}) {
		t.Errorf("ReadStream backwards with $tb 2 = revisions %v, want [3 2]", numbers(got))
	}
	setMetadata(t, ctx, c, stream, `{"$tb":4}`)
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100); len(got) != 0 {
		t.Errorf("ReadStream fully truncated = revisions %v, want none and no error", numbers(got))
	}
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1); len(got) != 0 {
		t.Errorf("ReadStream backwards fully truncated = revisions %v, want none", numbers(got))
	}
	appendWEV(t, ctx, c, stream, esdb.NoStream{}, "3", event("B"))
	if res := mustAppend(t, ctx, c, stream, esdb.Revision(3), event("B")); res.NextExpectedVersion != 4 {
		t.Errorf("AppendToStream(exact 3) after truncation revision = %d, want 4", res.NextExpectedVersion)
	}
}

func testMaxCount(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "maxcount")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 5)...)
	setMetadata(t, ctx, c, stream, `{"$maxCount":2}`)
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100); !cmp.Equal(numbers(got), []uint64{3, 4}) {
		t.Errorf("ReadStream with $maxCount 2 = revisions %v, want [3 4]", numbers(got))
	}
	setMetadata(t, ctx, c, stream, `{"$maxCount":3}`)
	meta := mustRead(t, ctx, c, "$$"+stream, esdb.ReadStreamOptions{}, 100)
	if len(meta) != 1 || meta[0].EventNumber != 1 || string(meta[0].Data) != `{"$maxCount":3}` {
		t.Errorf("ReadStream($$%s) = %d events, want only the last metadata event (revision 1)", stream, len(meta))
	}
}

func testMaxAge(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "maxage")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, event("Old"))
	setMetadata(t, ctx, c, stream, `{"$maxAge":1}`)
	// Wait (polling) until the event is older than a second; a new one
	// stays visible.
	storetest.Eventually(t, ctx, func() error {
		if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100); len(got) != 0 {
			return fmt.Errorf("%d events still visible", len(got))
		}
		return nil
	})
	fresh := event("New")
	mustAppend(t, ctx, c, stream, esdb.Revision(0), fresh)
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100); len(got) != 1 || got[0].EventID != fresh.EventID {
		t.Errorf("ReadStream with $maxAge 1 = %v, want only the fresh event", ids(got))
	}
}

func testPastEnd(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "past-end")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 2)...)
	if got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{From: esdb.Revision(5)}, 10); len(got) != 0 {
		t.Errorf("ReadStream(from 5) = %v, want nothing and no error", numbers(got))
	}
}

func testRecordedFields(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "fields")
	before := time.Now().Add(-time.Minute)
	e := esdb.EventData{
		EventID: uuid.New(), EventType: "Exact", ContentType: esdb.ContentTypeJson,
		Data: []byte(`{"z": 1,  "a":"caf\u00e9"}`), Metadata: []byte(`{"k" : [1, 2]}`),
	}
	bin := esdb.EventData{EventID: uuid.New(), EventType: "Bin", ContentType: esdb.ContentTypeBinary, Data: []byte{0, 1, 2}}
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, e, bin)
	got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 10)
	if len(got) != 2 {
		t.Fatalf("ReadStream = %d events, want 2", len(got))
	}
	r := got[0]
	if r.EventID != e.EventID || r.EventType != "Exact" || string(r.Data) != string(e.Data) || string(r.UserMetadata) != string(e.Metadata) {
		t.Errorf("recorded event = %s %s %q %q, want the written id, type and bytes", r.EventID, r.EventType, r.Data, r.UserMetadata)
	}
	if r.ContentType != "application/json" || got[1].ContentType != "application/octet-stream" {
		t.Errorf("content types = %q, %q, want application/json, application/octet-stream", r.ContentType, got[1].ContentType)
	}
	created, err := strconv.ParseInt(r.SystemMetadata["created"], 10, 64)
	if err != nil || r.CreatedDate.Before(before) || r.CreatedDate.After(time.Now().Add(time.Minute)) ||
		r.CreatedDate.UnixNano()/100 != created {
		t.Errorf("created = %q (%v), want 100 ns ticks since the Unix epoch of about now", r.SystemMetadata["created"], r.CreatedDate)
	}
}
