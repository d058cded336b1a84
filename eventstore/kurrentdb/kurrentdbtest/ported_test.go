package kurrentdbtest_test

// The server's own tests as the double's judge: scenarios of KurrentDB's
// test suites, read at tag v26.1.0 of github.com/kurrent-io/KurrentDB, redone
// through the gRPC API with the real client. Each case names the test it
// comes from. They run against the double always and against a real server
// where BOOKING_TEST_KURRENTDB_URL is set; on the double, cases that check a
// subscription's exact sequence of messages get a server of their own (a
// quiet log), while on a shared real server they check what holds whatever
// else is written meanwhile.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
)

// portedTag is the KurrentDB release whose tests the ported cases follow.
const portedTag = "v26.1.0"

// tests is the prefix of every ported test's path.
const tests = "src/KurrentDB.Core.Tests/"

// ported lists the cases ported from the server's tests; their source is
// "<path>:<fixture>.<test>" at portedTag.
var ported = []contractCase{
	// Subscriptions to $all (Enumerator.AllSubscription).
	{"ported: a subscription from the start reads the existing events, then caught-up", tests + "Services/Transport/Enumerators/Enumerator.AllSubscription.Tests.cs:subscribe_all_from_start.should_receive_live_caught_up_message_after_reading_existing_events", portSubscribeFromStart},
	{"ported: a subscription from the end is caught up at once", tests + "Services/Transport/Enumerators/Enumerator.AllSubscription.Tests.cs:subscribe_all_from_end.should_receive_live_caught_up_message_immediately", portSubscribeFromEnd},
	{"ported: a subscription from a position receives the events after it", tests + "Services/Transport/Enumerators/Enumerator.AllSubscription.Tests.cs:subscribe_all_from_position.should_receive_events_after_start_position", portSubscribeFromPosition},
	{"ported: a subscription at the last event goes live and gets only new events", tests + "Services/Transport/Enumerators/Enumerator.AllSubscription.CombinationTests.cs:AllSubscriptionCombinationTests(subscribe to $all at last event).enumeration_is_correct", portSubscribeAtLast(0)},
	{"ported: a subscription one byte after the last event goes live", tests + "Services/Transport/Enumerators/Enumerator.AllSubscription.CombinationTests.cs:AllSubscriptionCombinationTests(subscribe to $all at one byte after last event).enumeration_is_correct", portSubscribeAtLast(1)},
	{"ported: a subscription past the end of the log skips the events below its start", tests + "Services/Transport/Enumerators/Enumerator.AllSubscription.CombinationTests.cs:AllSubscriptionCombinationTests(subscribe to $all at one byte after last event).enumeration_is_correct, with the start far past the end (Enumerator.AllSubscription.GoLive skips events at or before the checkpoint)", portSubscribePastEnd},
	{"ported: a subscription at an invalid position is confirmed, then fails", tests + "Services/Transport/Enumerators/Enumerator.AllSubscription.CombinationTests.cs:AllSubscriptionCombinationTests(subscribe to $all at an invalid position).enumeration_is_correct", portSubscribeInvalid},
	// Filtered subscriptions to $all (Enumerator.AllSubscriptionFiltered).
	{"ported: a filtered subscription from the start sends the match, a checkpoint, then caught-up", tests + "Services/Transport/Enumerators/Enumerator.AllSubscriptionFiltered.Tests.cs:subscribe_filtered_all_from_start.should_receive_live_caught_up_message_after_reading_existing_events", portFilteredFromStart},
	{"ported: a filtered subscription matching nothing checkpoints at the page start (0, 0)", tests + "Services/Transport/Enumerators/Enumerator.AllSubscriptionFiltered.Tests.cs:subscribe_filtered_all_from_start.when_matching_nothing_transition_to_live_checkpoint_should_be_valid", portFilteredNothingFromStart},
	{"ported: a filtered subscription from a position sends the matches after it", tests + "Services/Transport/Enumerators/Enumerator.AllSubscriptionFiltered.Tests.cs:subscribe_filtered_all_from_position.should_receive_matching_events_after_start_position", portFilteredFromPosition},
	{"ported: a filtered subscription from a position matching nothing checkpoints at its start", tests + "Services/Transport/Enumerators/Enumerator.AllSubscriptionFiltered.Tests.cs:subscribe_filtered_all_from_position.when_matching_nothing_transition_to_live_checkpoint_should_be_valid", portFilteredNothingFromPosition},
	{"ported: filtered catch-up checkpoints never repeat nor move back, at most an interval apart", tests + "Services/Transport/Enumerators/Enumerator.AllSubscriptionFiltered.CombinationTests.cs:AllSubscriptionFilteredCombinationTests(subscription to filtered $all receives checkpoints during catch-up (6-15)).enumeration_is_correct", portFilteredCatchUpCheckpoints(15, 5)},
	{"ported: filtered catch-up checkpoints over two intervals", tests + "Services/Transport/Enumerators/Enumerator.AllSubscriptionFiltered.CombinationTests.cs:AllSubscriptionFilteredCombinationTests(subscription to filtered $all receives checkpoints during catch-up (4)).enumeration_is_correct", portFilteredCatchUpCheckpoints(32, 0)},
	{"ported: a live filtered subscription checkpoints every interval", tests + "Services/Transport/Enumerators/Enumerator.AllSubscriptionFiltered.CombinationTests.cs:AllSubscriptionFilteredCombinationTests(subscription to filtered $all receives checkpoints when live (4)).enumeration_is_correct", portFilteredLiveCheckpoints},
	// Soft delete, expected versions and idempotency.
	{"ported: stream exists on a soft-deleted stream is stream-deleted", tests + "ClientAPI/append_to_stream.cs:append_to_stream.should_fail_appending_with_stream_exists_exp_ver_to_soft_deleted_stream", portStreamExistsSoftDeleted},
	{"ported: a soft-deleted stream reads as not found", tests + "ClientAPI/soft_delete.cs:soft_delete.soft_deleted_stream_returns_no_stream_and_no_events_on_read", portSoftDeletedNotFound},
	{"ported: a soft-deleted stream is recreated by its first write only, after its last revision", tests + "ClientAPI/soft_delete.cs:soft_delete.soft_deleted_stream_allows_recreation_when_expver_any and soft_deleted_stream_allows_recreation_only_for_first_write", portSoftDeletedRecreated},
	{"ported: a repeat of a soft-deleted stream's first write succeeds without a position", tests + "Integration/Idempotency/when_soft_deleted_stream_is_written_to_idempotently.cs:when_soft_deleted_stream_is_written_to_idempotently.should_return_negative_1_as_log_position", portSoftDeletedRepeat},
	{"ported: a second batch after the first is replicated: repeats, next revision, conflicts", tests + "Services/Storage/Idempotency/when_writing_a_second_batch_of_events_after_the_first_batch_has_been_replicated.cs (all six tests)", portSecondBatchReplicated},
	// Size limits (Streams.Append, ClusterVNodeStartup).
	{"ported: an event over the event size limit is refused naming it and its size", tests + "Services/Transport/Grpc/StreamsTests/AppendBatchToStreamTests.cs:single_batch_with_too_large_events.contains_error_details (same check in Streams.Append.cs)", portEventTooLarge},
	{"ported: an event over gRPC's 4 MiB default and under the receive limit is written", "src/KurrentDB.Core/ClusterVNodeStartup.cs (Streams MaxReceiveMessageSize = TFConsts.EffectiveMaxLogRecordSize); " + tests + "ClientAPI/append_to_stream.cs:append_to_stream.can_append_multiple_events_at_once", portLargeEvent},
	{"ported: the append size limit follows the server version", "src/KurrentDB.Core/Configuration/ClusterVNodeOptions.cs MaxAppendSize at v25.0.0 and v26.1.0; " + tests + "Services/Transport/Grpc/StreamsTests/AppendBatchToStreamTests.cs:single_batch_with_too_large_events", portAppendSizeByVersion},
}

func init() {
	for _, c := range ported {
		if !strings.Contains(c.source, ".cs") {
			panic("ported case " + c.rule + " does not name the server file it comes from")
		}
	}
	for _, rule := range []string{
		"ported: an event over the event size limit is refused naming it and its size",
		"ported: the append size limit follows the server version",
	} {
		doubleOnly[rule] = "needs limits other than the server's defaults"
	}
}

// quiet returns a client on a log only this case writes (a server of its
// own on the double) and true, or the shared client and false on a real
// server, where other cases write meanwhile.
func (tg target) quiet(t *testing.T) (*esdb.Client, bool) {
	t.Helper()
	if tg.double == nil {
		return tg.client, false
	}
	srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
	return newClient(t, srv.URL()), true
}

// item is one message of a subscription after its confirmation.
type item struct {
	kind   string // "event", "checkpoint" or "caught-up"
	pos    esdb.Position
	stream string
	id     uuid.UUID
}

func (it item) String() string {
	if it.kind == "event" {
		return fmt.Sprintf("event %s@%d/%d", it.stream, it.pos.Commit, it.pos.Prepare)
	}
	return fmt.Sprintf("%s %d/%d", it.kind, it.pos.Commit, it.pos.Prepare)
}

// recvItems receives from sub until done(items) or ctx ends, failing t on a
// drop.
func recvItems(t *testing.T, ctx context.Context, sub *esdb.Subscription, done func([]item) bool) []item {
	t.Helper()
	var items []item
	for !done(items) {
		if ctx.Err() != nil {
			t.Fatalf("subscription: %v after %v", ctx.Err(), items)
		}
		ev := sub.Recv()
		switch {
		case ev.EventAppeared != nil:
			e := ev.EventAppeared.OriginalEvent()
			items = append(items, item{kind: "event", pos: e.Position, stream: e.StreamID, id: e.EventID})
		case ev.CheckPointReached != nil:
			items = append(items, item{kind: "checkpoint", pos: *ev.CheckPointReached})
		case ev.CaughtUp != nil:
			items = append(items, item{kind: "caught-up"})
		case ev.SubscriptionDropped != nil:
			t.Fatalf("subscription dropped after %v: %v", items, ev.SubscriptionDropped.Error)
		}
	}
	return items
}

// caughtUp reports whether the last item is caught-up.
func caughtUp(items []item) bool { return len(items) > 0 && items[len(items)-1].kind == "caught-up" }

// only keeps the events whose stream starts with prefix, and every
// checkpoint and caught-up.
func only(items []item, prefix string) []item {
	var out []item
	for _, it := range items {
		if it.kind != "event" || strings.HasPrefix(it.stream, prefix) {
			out = append(out, it)
		}
	}
	return out
}

// kinds returns the kinds of items, events named by their stream.
func kinds(items []item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.kind
		if it.kind == "event" {
			out[i] = "event " + it.stream
		}
	}
	return out
}

func eventIDs(items []item) []uuid.UUID {
	var out []uuid.UUID
	for _, it := range items {
		if it.kind == "event" {
			out = append(out, it.id)
		}
	}
	return out
}

func subscribe(t *testing.T, ctx context.Context, c *esdb.Client, opts esdb.SubscribeToAllOptions) *esdb.Subscription {
	t.Helper()
	sub, err := c.SubscribeToAll(ctx, opts)
	if err != nil {
		t.Fatalf("SubscribeToAll(%+v) = %v", opts, err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

// appendEach appends n events of type typ, each to its own stream
// prefix+i, and returns them as read back (with their positions).
func appendEach(t *testing.T, ctx context.Context, c *esdb.Client, prefix, typ string, n int) []*esdb.RecordedEvent {
	t.Helper()
	var out []*esdb.RecordedEvent
	for i := range n {
		stream := fmt.Sprintf("%s%d", prefix, i)
		mustAppend(t, ctx, c, stream, esdb.Any{}, event(typ))
		out = append(out, mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 1)...)
	}
	return out
}

// lastOfAll returns the last event of $all.
func lastOfAll(t *testing.T, ctx context.Context, c *esdb.Client) *esdb.RecordedEvent {
	t.Helper()
	got := readAll(t, ctx, c, esdb.ReadAllOptions{From: esdb.End{}, Direction: esdb.Backwards}, 1)
	if len(got) != 1 {
		t.Fatalf("ReadAll(end, backwards, 1) = %d events, want 1", len(got))
	}
	return got[0]
}

func portSubscribeFromStart(t *testing.T, tg target) {
	ctx, stream := testContext(t), newStream("port-start")
	c, _ := tg.quiet(t)
	written := events("type", 3)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, written...)
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: esdb.Start{}})
	got := only(recvItems(t, ctx, sub, caughtUp), stream)
	want := []string{"event " + stream, "event " + stream, "event " + stream, "caught-up"}
	if diff := cmp.Diff(want, kinds(got)); diff != "" {
		t.Errorf("subscription from the start (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(dataIDs(written), eventIDs(got)); diff != "" {
		t.Errorf("subscription from the start ids (-want +got):\n%s", diff)
	}
}

func portSubscribeFromEnd(t *testing.T, tg target) {
	ctx, stream := testContext(t), newStream("port-end")
	c, _ := tg.quiet(t)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("type", 3)...)
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: esdb.End{}})
	first := recvItems(t, ctx, sub, func(items []item) bool { return len(items) > 0 })
	if first[0].kind != "caught-up" {
		t.Fatalf("first message of a subscription from the end = %v, want caught-up", first[0])
	}
	fresh := event("live")
	mustAppend(t, ctx, c, stream, esdb.Revision(2), fresh)
	got := only(recvItems(t, ctx, sub, func(items []item) bool { return len(eventIDs(only(items, stream))) > 0 }), stream)
	if ids := eventIDs(got); len(ids) != 1 || ids[0] != fresh.EventID {
		t.Errorf("events after caught-up = %v, want only the live one", got)
	}
}

func portSubscribeFromPosition(t *testing.T, tg target) {
	ctx, stream := testContext(t), newStream("port-pos")
	c, _ := tg.quiet(t)
	written := events("type", 6)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, written...)
	stored := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 10)
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: stored[2].Position})
	got := only(recvItems(t, ctx, sub, caughtUp), stream)
	if diff := cmp.Diff(dataIDs(written[3:]), eventIDs(got)); diff != "" {
		t.Errorf("subscription from the third event's position (-want +got):\n%s", diff)
	}
	if !caughtUp(got) || len(got) != 4 {
		t.Errorf("subscription from a position = %v, want three events then caught-up", got)
	}
}

// portSubscribeAtLast subscribes at the last event of $all plus offset
// bytes: no catch-up (caught-up first), then exactly the live events.
func portSubscribeAtLast(offset uint64) func(t *testing.T, tg target) {
	return func(t *testing.T, tg target) {
		ctx, prefix := testContext(t), newStream("port-last")+"-"
		c, exact := tg.quiet(t)
		appendEach(t, ctx, c, prefix, "type", 10)
		last := lastOfAll(t, ctx, c)
		from := esdb.Position{Commit: last.Position.Commit + offset, Prepare: last.Position.Prepare + offset}
		sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: from})
		first := recvItems(t, ctx, sub, func(items []item) bool { return len(items) > 0 })
		if exact && first[0].kind != "caught-up" {
			t.Fatalf("first message of a subscription at the last event = %v, want caught-up (nothing to catch up)", first[0])
		}
		live := appendEach(t, ctx, c, prefix+"live-", "type", 3)
		got := only(recvItems(t, ctx, sub, func(items []item) bool { return len(eventIDs(only(items, prefix))) >= 3 }), prefix)
		if diff := cmp.Diff(ids(live), eventIDs(got)); diff != "" {
			t.Errorf("events of a subscription at %v (-want +got):\n%s", from, diff)
		}
	}
}

func portSubscribePastEnd(t *testing.T, tg target) {
	ctx, prefix := testContext(t), newStream("port-past")+"-"
	c, _ := tg.quiet(t)
	appendEach(t, ctx, c, prefix+"before-", "type", 1)
	last := lastOfAll(t, ctx, c)
	start := last.Position.Commit + 4096
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: esdb.Position{Commit: start, Prepare: start}})
	// Write until the log has passed the start, then three more.
	var below, above []*esdb.RecordedEvent
	for i := 0; len(above) < 3; i++ {
		if i > 1000 {
			t.Fatalf("the log did not pass %d after %d appends", start, i)
		}
		e := appendEach(t, ctx, c, fmt.Sprintf("%s%d-", prefix, i), "type", 1)[0]
		if e.Position.Commit <= start {
			below = append(below, e)
		} else {
			above = append(above, e)
		}
	}
	if len(below) == 0 {
		t.Fatalf("no event written below the start %d", start)
	}
	got := only(recvItems(t, ctx, sub, func(items []item) bool { return len(eventIDs(only(items, prefix))) >= 3 }), prefix)
	if diff := cmp.Diff(ids(above), eventIDs(got)); diff != "" {
		t.Errorf("subscription from %d past the end: events (-want: the %d above the start; %d below it must be skipped, +got):\n%s", start, len(above), len(below), diff)
	}
}

func portSubscribeInvalid(t *testing.T, tg target) {
	ctx, prefix := testContext(t), newStream("port-invalid")+"-"
	c, _ := tg.quiet(t)
	appendEach(t, ctx, c, prefix, "type", 10)
	last := lastOfAll(t, ctx, c)
	inside := esdb.Position{Commit: last.Position.Commit - 1, Prepare: last.Position.Prepare - 1}
	sub, err := c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{From: inside})
	if err != nil {
		t.Fatalf("SubscribeToAll(inside a record) = %v, want a confirmed subscription that fails afterwards", err)
	}
	defer sub.Close()
	for {
		ev := sub.Recv()
		if ev.SubscriptionDropped == nil {
			if ev.EventAppeared != nil {
				t.Fatalf("subscription inside a record delivered %s", ev.EventAppeared.OriginalEvent().StreamID)
			}
			continue
		}
		if s, ok := status.FromError(errors.Unwrap(ev.SubscriptionDropped.Error)); !ok || s.Code() != codes.InvalidArgument {
			if !strings.Contains(ev.SubscriptionDropped.Error.Error(), "invalid position") {
				t.Errorf("subscription inside a record dropped with %v, want InvalidArgument, invalid position", ev.SubscriptionDropped.Error)
			}
		}
		return
	}
}

// checkCheckpoints checks a filtered subscription's messages as the
// combination tests' ReadExpectedEvents does: checkpoints strictly increase
// (the enumerator drops the others), never fall behind the last event or
// reach the end, come at most interval matching events apart, and one
// comes between the last event and caught-up.
func checkCheckpoints(t *testing.T, items []item, interval int) {
	t.Helper()
	var lastPos *esdb.Position
	var lastCP *esdb.Position
	since := 0
	for i, it := range items {
		switch it.kind {
		case "event":
			since++
			if since > interval {
				t.Errorf("%d matching events without a checkpoint, want at most %d: %v", since, interval, items)
			}
			p := it.pos
			lastPos = &p
		case "checkpoint":
			p := it.pos
			if lastCP != nil && !posLess(*lastCP, p) {
				t.Errorf("checkpoint %d/%d after checkpoint %d/%d: want strictly increasing (%v)", p.Commit, p.Prepare, lastCP.Commit, lastCP.Prepare, items)
			}
			if lastPos != nil && posLess(p, *lastPos) {
				t.Errorf("checkpoint %d/%d behind the event at %d/%d", p.Commit, p.Prepare, lastPos.Commit, lastPos.Prepare)
			}
			if p.Commit == ^uint64(0) {
				t.Errorf("checkpoint at the end of the log")
			}
			if p.Prepare != 0 && p.Prepare != p.Commit {
				t.Errorf("checkpoint %d/%d is neither an event's position nor a page start (prepare 0)", p.Commit, p.Prepare)
			}
			lastCP, lastPos, since = &p, &p, 0
		case "caught-up":
			if i == 0 || items[i-1].kind != "checkpoint" {
				// The catch-up ends with a checkpoint, unless the last
				// interval checkpoint was already at the same place.
				if since > 0 {
					t.Errorf("caught-up right after an event, want a checkpoint first: %v", items)
				}
			}
		}
	}
}

// posLess compares positions as KurrentDB does: commit, then prepare.
func posLess(a, b esdb.Position) bool {
	return a.Commit < b.Commit || (a.Commit == b.Commit && a.Prepare < b.Prepare)
}

func portFilteredFromStart(t *testing.T, tg target) {
	ctx, stream := testContext(t), newStream("port-fstart")
	c, exact := tg.quiet(t)
	type1 := "type1-" + uuid.NewString()
	first := event(type1)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, first, event("type2"), event("type3"))
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: esdb.Start{},
		Filter: &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Prefixes: []string{type1}}})
	got := recvItems(t, ctx, sub, caughtUp)
	if ids := eventIDs(got); len(ids) != 1 || ids[0] != first.EventID {
		t.Errorf("filtered subscription events = %v, want only the type1 event", got)
	}
	if exact {
		if diff := cmp.Diff([]string{"event " + stream, "checkpoint", "caught-up"}, kinds(got)); diff != "" {
			t.Errorf("filtered subscription from the start (-want +got):\n%s", diff)
		}
	}
	checkCheckpoints(t, got, 32)
}

func portFilteredNothingFromStart(t *testing.T, tg target) {
	ctx, stream := testContext(t), newStream("port-fnothing")
	c, exact := tg.quiet(t)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("type", 3)...)
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: esdb.Start{},
		Filter: &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Prefixes: []string{"match-nothing-" + uuid.NewString()}}})
	got := recvItems(t, ctx, sub, caughtUp)
	if exact {
		want := []item{{kind: "checkpoint", pos: esdb.Position{}}, {kind: "caught-up"}}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(item{})); diff != "" {
			t.Errorf("filtered subscription matching nothing (-want +got):\n%s", diff)
		}
	}
	if len(got) < 2 || got[0].kind != "checkpoint" || got[0].pos != (esdb.Position{}) {
		t.Errorf("first message = %v, want a checkpoint at the first page's start, 0/0", got)
	}
	checkCheckpoints(t, got, 32)
}

func portFilteredFromPosition(t *testing.T, tg target) {
	ctx, stream := testContext(t), newStream("port-fpos")
	c, exact := tg.quiet(t)
	the := "theType-" + uuid.NewString()
	written := []esdb.EventData{event(the), event("type2"), event(the), event(the), event("type3"), event("type4")}
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, written...)
	stored := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 10)
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: stored[2].Position,
		Filter: &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Prefixes: []string{the}}})
	got := recvItems(t, ctx, sub, caughtUp)
	if ids := eventIDs(got); len(ids) != 1 || ids[0] != written[3].EventID {
		t.Errorf("filtered subscription from the third event = %v, want only the fourth event", got)
	}
	if exact {
		if diff := cmp.Diff([]string{"event " + stream, "checkpoint", "caught-up"}, kinds(got)); diff != "" {
			t.Errorf("filtered subscription from a position (-want +got):\n%s", diff)
		}
	}
	checkCheckpoints(t, got, 32)
}

func portFilteredNothingFromPosition(t *testing.T, tg target) {
	ctx, stream := testContext(t), newStream("port-fposnothing")
	c, exact := tg.quiet(t)
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("type", 6)...)
	stored := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 10)
	from := stored[2].Position
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: from,
		Filter: &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Prefixes: []string{"match-nothing-" + uuid.NewString()}}})
	got := recvItems(t, ctx, sub, caughtUp)
	if len(got) < 2 || got[0].kind != "checkpoint" || got[0].pos != from {
		t.Errorf("first message = %v, want a checkpoint at the start position %v (the first page's start)", got, from)
	}
	if exact && len(got) != 2 {
		t.Errorf("filtered subscription matching nothing = %v, want a checkpoint then caught-up", got)
	}
	checkCheckpoints(t, got, 32)
}

// portFilteredCatchUpCheckpoints writes existing events, each to its own
// stream of one prefix, subscribes from the start with that stream prefix,
// a search window of 16 and a multiplier of 1 (a checkpoint interval of 16),
// receives them all and caught-up, then live more.
func portFilteredCatchUpCheckpoints(existing, live int) func(t *testing.T, tg target) {
	const interval = 16
	return func(t *testing.T, tg target) {
		ctx, prefix := testContext(t), newStream("port-fcp")+"-"
		c, _ := tg.quiet(t)
		written := appendEach(t, ctx, c, prefix, "type", existing)
		sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: esdb.Start{}, MaxSearchWindow: interval, CheckpointInterval: 1,
			Filter: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{prefix}}})
		got := recvItems(t, ctx, sub, caughtUp)
		if diff := cmp.Diff(ids(written), eventIDs(got)); diff != "" {
			t.Errorf("catch-up events (-want +got):\n%s", diff)
		}
		checkCheckpoints(t, got, interval)
		if live == 0 {
			return
		}
		more := appendEach(t, ctx, c, prefix+"live-", "type", live)
		got = recvItems(t, ctx, sub, func(items []item) bool { return len(eventIDs(items)) >= live })
		if diff := cmp.Diff(ids(more), eventIDs(got)); diff != "" {
			t.Errorf("live events (-want +got):\n%s", diff)
		}
	}
}

func portFilteredLiveCheckpoints(t *testing.T, tg target) {
	const interval = 16
	ctx, prefix := testContext(t), newStream("port-flive")+"-"
	c, exact := tg.quiet(t)
	appendEach(t, ctx, c, prefix+"old-", "type", 3)
	sub := subscribe(t, ctx, c, esdb.SubscribeToAllOptions{From: esdb.End{}, MaxSearchWindow: interval, CheckpointInterval: 1,
		Filter: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{prefix}}})
	if first := recvItems(t, ctx, sub, func(items []item) bool { return len(items) > 0 }); first[0].kind != "caught-up" {
		t.Fatalf("first message from the end = %v, want caught-up", first[0])
	}
	live := appendEach(t, ctx, c, prefix, "type", 2*interval)
	got := recvItems(t, ctx, sub, func(items []item) bool {
		return len(eventIDs(items)) == 2*interval && items[len(items)-1].kind == "checkpoint"
	})
	if diff := cmp.Diff(ids(live), eventIDs(got)); diff != "" {
		t.Errorf("live events (-want +got):\n%s", diff)
	}
	checkCheckpoints(t, got, interval)
	if exact {
		// Every 16th event written while live is followed by a checkpoint
		// at its position.
		var cps []esdb.Position
		for _, it := range got {
			if it.kind == "checkpoint" {
				cps = append(cps, it.pos)
			}
		}
		want := []esdb.Position{live[interval-1].Position, live[2*interval-1].Position}
		if diff := cmp.Diff(want, cps); diff != "" {
			t.Errorf("live checkpoints (-want +got):\n%s", diff)
		}
	}
}

func portStreamExistsSoftDeleted(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "port-exists-soft")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, event("A"))
	if _, err := c.DeleteStream(ctx, stream, esdb.DeleteStreamOptions{ExpectedRevision: esdb.StreamExists{}}); err != nil {
		t.Fatalf("DeleteStream(stream exists) = %v", err)
	}
	_, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.StreamExists{}}, event("B"))
	wantCode(t, err, esdb.ErrorCodeStreamDeleted)
}

func portSoftDeletedNotFound(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "port-soft-read")
	if res := mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 2)...); res.NextExpectedVersion != 1 {
		t.Fatalf("AppendToStream revision = %d, want 1", res.NextExpectedVersion)
	}
	if _, err := c.DeleteStream(ctx, stream, esdb.DeleteStreamOptions{ExpectedRevision: esdb.Revision(1)}); err != nil {
		t.Fatalf("DeleteStream = %v", err)
	}
	got, err := readStream(ctx, c, stream, esdb.ReadStreamOptions{}, 100)
	if len(got) != 0 {
		t.Errorf("ReadStream(soft-deleted) = %d events, want none", len(got))
	}
	wantCode(t, err, esdb.ErrorCodeResourceNotFound)
}

// metadataOf returns the last $metadata event of stream's metastream: its
// revision and its JSON.
func metadataOf(t *testing.T, ctx context.Context, c *esdb.Client, stream string) (uint64, map[string]any) {
	t.Helper()
	got := mustRead(t, ctx, c, "$$"+stream, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
	if len(got) != 1 {
		t.Fatalf("ReadStream($$%s) = %d events, want 1", stream, len(got))
	}
	var m map[string]any
	if err := json.Unmarshal(got[0].Data, &m); err != nil {
		t.Fatalf("metadata %q: %v", got[0].Data, err)
	}
	return got[0].EventNumber, m
}

func portSoftDeletedRecreated(t *testing.T, tg target) {
	for _, expected := range []esdb.ExpectedRevision{esdb.Any{}, esdb.NoStream{}, esdb.Revision(1)} {
		t.Run(fmt.Sprintf("%T", expected), func(t *testing.T) {
			ctx, c, stream := tg.begin(t, "port-soft-recreate")
			mustAppend(t, ctx, c, stream, esdb.NoStream{}, events("A", 2)...)
			if _, err := c.DeleteStream(ctx, stream, esdb.DeleteStreamOptions{ExpectedRevision: esdb.Revision(1)}); err != nil {
				t.Fatalf("DeleteStream = %v", err)
			}
			written := events("B", 3)
			if res := mustAppend(t, ctx, c, stream, expected, written...); res.NextExpectedVersion != 4 {
				t.Errorf("AppendToStream(soft-deleted, %T) revision = %d, want 4", expected, res.NextExpectedVersion)
			}
			got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 100)
			if diff := cmp.Diff(dataIDs(written), ids(got)); diff != "" {
				t.Errorf("ReadStream ids (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]uint64{2, 3, 4}, numbers(got)); diff != "" {
				t.Errorf("ReadStream revisions (-want +got):\n%s", diff)
			}
			if rev, m := metadataOf(t, ctx, c, stream); rev != 1 || m["$tb"] != float64(2) {
				t.Errorf("metadata after recreation = revision %d %v, want revision 1 with $tb 2", rev, m)
			}
			if _, ok := expected.(esdb.NoStream); ok {
				// Only the first write recreates the stream.
				appendWEV(t, ctx, c, stream, esdb.NoStream{}, "4", event("C"))
			}
		})
	}
}

func portSoftDeletedRepeat(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "port-soft-repeat")
	first := event("event-type")
	mustAppend(t, ctx, c, stream, esdb.NoStream{}, first)
	if _, err := c.DeleteStream(ctx, stream, esdb.DeleteStreamOptions{ExpectedRevision: esdb.Any{}}); err != nil {
		t.Fatalf("DeleteStream = %v", err)
	}
	got := mustAppend(t, ctx, c, stream, esdb.NoStream{}, first)
	if want := (esdb.WriteResult{NextExpectedVersion: 0}); *got != want {
		t.Errorf("repeat of the first write of a soft-deleted stream = %+v, want %+v (no position)", *got, want)
	}
}

func portSecondBatchReplicated(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "port-second-batch")
	batch := events("type", 10)
	first := mustAppend(t, ctx, c, stream, esdb.NoStream{}, batch...)
	// check_commit_with_same_expectedversion_should_return_idempotent_decision
	if got := mustAppend(t, ctx, c, stream, esdb.NoStream{}, batch...); *got != *first {
		t.Errorf("repeat at no stream = %+v, want the original %+v", *got, *first)
	}
	// check_commit_with_expectedversion_any_should_return_idempotent_decision
	if got := mustAppend(t, ctx, c, stream, esdb.Any{}, batch...); *got != *first {
		t.Errorf("repeat with any = %+v, want the original %+v", *got, *first)
	}
	// ..._but_different_non_first_event_id_should_return_corruptedidempotency_decision
	changed := append([]esdb.EventData(nil), batch...)
	changed[len(changed)-2] = event("type")
	appendWEV(t, ctx, c, stream, esdb.NoStream{}, "9", changed...)
	// ..._but_different_first_event_id_should_return_wrongexpectedversion_decision
	changed = append([]esdb.EventData(nil), batch...)
	changed[0] = event("type")
	appendWEV(t, ctx, c, stream, esdb.NoStream{}, "9", changed...)
	// check_commit_with_incorrect_expectedversion_should_return_wrongexpectedversion_decision
	appendWEV(t, ctx, c, stream, esdb.Revision(10), "9", batch...)
	// check_commit_with_next_expectedversion_should_return_ok_decision
	if got := mustAppend(t, ctx, c, stream, esdb.Revision(9), batch...); got.NextExpectedVersion != 19 {
		t.Errorf("append at the next revision = %d, want 19 (written again)", got.NextExpectedVersion)
	}
}

func portEventTooLarge(t *testing.T, tg target) {
	const limit = 1024
	srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{MaxAppendEventSize: limit})
	ctx, c, stream := testContext(t), newClient(t, srv.URL()), newStream("port-too-large")
	big := esdb.EventData{EventID: uuid.New(), EventType: "-", ContentType: esdb.ContentTypeBinary,
		Data: make([]byte, limit), Metadata: make([]byte, limit)}
	_, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Any{}}, big)
	want := fmt.Sprintf("Event with Id: %s, Size: %d, exceeds Maximum Append Event Size of %d.", big.EventID, 2*limit+2, limit)
	if s, ok := status.FromError(errors.Unwrap(err)); !ok || s.Code() != codes.InvalidArgument || s.Message() != want {
		t.Errorf("AppendToStream(an event of %d bytes) = %v, want InvalidArgument %q", 2*limit+2, err, want)
	}
	if _, err := readStream(ctx, c, stream, esdb.ReadStreamOptions{}, 1); err == nil {
		t.Errorf("the refused event was written")
	}
}

func portLargeEvent(t *testing.T, tg target) {
	ctx, c, stream := tg.begin(t, "port-large")
	big := esdb.EventData{EventID: uuid.New(), EventType: "big", ContentType: esdb.ContentTypeBinary, Data: make([]byte, 5<<20)}
	if res := mustAppend(t, ctx, c, stream, esdb.NoStream{}, big); res.NextExpectedVersion != 0 {
		t.Errorf("AppendToStream(5 MiB) revision = %d, want 0", res.NextExpectedVersion)
	}
	got := mustRead(t, ctx, c, stream, esdb.ReadStreamOptions{}, 1)
	if len(got) != 1 || len(got[0].Data) != 5<<20 {
		t.Errorf("ReadStream = %d events, want the 5 MiB one back", len(got))
	}
}

func portAppendSizeByVersion(t *testing.T, tg target) {
	// Two events of 600 KiB: over 25.0's 1 MiB per append, far under
	// 26.1's 256 MiB.
	batch := func() []esdb.EventData {
		return []esdb.EventData{
			{EventID: uuid.New(), EventType: "half", ContentType: esdb.ContentTypeBinary, Data: make([]byte, 600<<10)},
			{EventID: uuid.New(), EventType: "half", ContentType: esdb.ContentTypeBinary, Data: make([]byte, 600<<10)},
		}
	}
	for _, c := range []struct {
		version string
		ok      bool
	}{{"24.10", false}, {"25.0", false}, {"25.1", true}, {"26.1.1", true}} {
		t.Run(c.version, func(t *testing.T) {
			srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{Version: c.version})
			ctx, client := testContext(t), newClient(t, srv.URL())
			_, err := client.AppendToStream(ctx, newStream("port-size"), esdb.AppendToStreamOptions{ExpectedRevision: esdb.Any{}}, batch()...)
			if c.ok {
				if err != nil {
					t.Errorf("KurrentDB %s: AppendToStream(1.2 MiB) = %v, want success", c.version, err)
				}
				return
			}
			if s, ok := status.FromError(errors.Unwrap(err)); !ok || s.Code() != codes.InvalidArgument || s.Message() != "Maximum Append Size of 1048576 Exceeded." {
				t.Errorf("KurrentDB %s: AppendToStream(1.2 MiB) = %v, want InvalidArgument \"Maximum Append Size of 1048576 Exceeded.\"", c.version, err)
			}
		})
	}
}
