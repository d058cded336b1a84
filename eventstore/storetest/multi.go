package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/eventstore"
)

// MultiHoldOpener is implemented by a test adapter of a backend that can
// start an AppendMulti and keep its transaction open (see HoldOpener). The
// suite skips the case that needs it when the store does not implement it,
// with the reason HoldOpenUnsupported gives.
type MultiHoldOpener interface {
	// HoldOpenAppendMulti performs AppendMulti(ctx, appends...) up to but
	// excluding its commit and returns once the events are written (with
	// their log positions taken) but invisible to readers. commit commits
	// and returns what AppendMulti would have; abort rolls back, and is a
	// no-op after commit. Exactly one of them must be called.
	HoldOpenAppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (commit func(context.Context) ([]eventstore.AppendResult, error), abort func(), err error)
}

// MultiAppendNotAtomic is implemented by a test adapter of a backend whose
// AppendMulti is not atomic (it appends part by part, so a failed call can
// leave its first parts written), to say so: the suite skips the cases that
// check atomicity with the reason given, and runs the others (order,
// positions, idempotency, errors).
type MultiAppendNotAtomic interface {
	// MultiAppendNotAtomic returns why the backend's AppendMulti is not
	// atomic and what covers the gap.
	MultiAppendNotAtomic() string
}

// multiCases are the suite's cases of AppendMulti (see Run).
func (c config) multiCases() []suiteCase {
	return []suiteCase{
		{"a multi-stream append writes every part at its expected revision", onStore(c.testMultiRoundTrip)},
		{"a multi-stream append's events are contiguous in the log", onStore(testMultiContiguous)},
		{"a conflict in any part fails the call and names that part", onStore(testMultiConflictNamesPart)},
		{"a conflict in any part writes nothing of the call", onStore(testMultiConflictWritesNothing)},
		{"invalid multi-stream appends are refused without a revision conflict", onStore(testMultiInvalid)},
		{"a repeated multi-stream append is recognised and writes nothing", onStore(c.testMultiRepeat)},
		{"a multi-stream append cut short is completed by its repeat", onStore(testMultiCompletes)},
		{"concurrent multi-stream appends sharing a stream: one wins, the others write nothing", onStore(testMultiSharedStream)},
		{"concurrent multi-stream appends over the same streams in opposite orders all succeed", onStore(testMultiOppositeOrders)},
		{"a subscriber never passes a multi-stream append whose transaction commits late", onStore(testMultiHeldOpen)},
		{"many concurrent multi-stream appends and a subscriber agree on every event", onStore(testMultiManyAppenders)},
	}
}

// atomicity returns the reason s's AppendMulti is not atomic, or "" if it is.
func atomicity(s eventstore.Store) string {
	if n, ok := s.(MultiAppendNotAtomic); ok {
		return n.MultiAppendNotAtomic()
	}
	return ""
}

// requireAtomic skips t unless s's AppendMulti is atomic.
func requireAtomic(t *testing.T, s eventstore.Store) {
	t.Helper()
	if why := atomicity(s); why != "" {
		t.Skip("the backend's multi-stream append is not atomic: " + why)
	}
}

// MustAppendMulti appends appends and returns the results; it fails t if
// AppendMulti returns an error.
func MustAppendMulti(t testing.TB, ctx context.Context, s eventstore.Store, appends ...eventstore.StreamAppend) []eventstore.AppendResult {
	t.Helper()
	res, err := s.AppendMulti(ctx, appends...)
	if err != nil {
		t.Fatalf("AppendMulti(%s) = %v, want nil", describeParts(appends), err)
	}
	if len(res) != len(appends) {
		t.Fatalf("AppendMulti(%s) returned %d results, want %d", describeParts(appends), len(res), len(appends))
	}
	return res
}

// describeParts formats parts as stream@expected×events for messages.
func describeParts(appends []eventstore.StreamAppend) string {
	out := ""
	for i, a := range appends {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s@%s×%d", a.Stream, a.Expected, len(a.Events))
	}
	return out
}

// wantPartConflict fails t unless err is an *eventstore.AppendPartError for
// part of parts on stream, wrapping a *RevisionConflictError for stream and
// expected with the given Actual.
func wantPartConflict(t testing.TB, err error, part, parts int, stream string, expected eventstore.ExpectedRevision, actual int64) {
	t.Helper()
	var pe *eventstore.AppendPartError
	if !errors.As(err, &pe) {
		t.Fatalf("AppendMulti = %v, want an *eventstore.AppendPartError", err)
	}
	if pe.Part != part || pe.Parts != parts || pe.Stream != stream {
		t.Fatalf("AppendMulti failed on part %d of %d (%s), want part %d of %d (%s): %v", pe.Part, pe.Parts, pe.Stream, part, parts, stream, err)
	}
	wantConflict(t, err, stream, expected, actual)
}

// streamIDs returns the ids of stream's live events, or nil if it has none.
func streamIDs(t testing.TB, ctx context.Context, s eventstore.Store, stream string) []string {
	t.Helper()
	events, err := s.ReadStream(ctx, stream, 0, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("ReadStream(%s) = %v, want nil", stream, err)
	}
	return IDs(events)
}

func (c config) testMultiRoundTrip(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	run := newStream("multi")
	a, b, cs, d := run+"-a", run+"-b", run+"-c", run+"-d"
	MustAppend(t, ctx, s, b, eventstore.NoStream(), newEvents(t, "Before", 1)...)
	MustAppend(t, ctx, s, cs, eventstore.NoStream(), newEvents(t, "Before", 2)...)
	MustAppend(t, ctx, s, d, eventstore.NoStream(), newEvents(t, "Before", 1)...)
	parts := []eventstore.StreamAppend{
		{Stream: a, Expected: eventstore.NoStream(), Events: newEvents(t, "New", 2)},
		{Stream: b, Expected: eventstore.Exact(0), Events: newEvents(t, "Next", 1)},
		{Stream: cs, Expected: eventstore.Any(), Events: newEvents(t, "More", 2)},
		{Stream: d, Expected: eventstore.StreamExists(), Events: newEvents(t, "Also", 3)},
	}
	first := []eventstore.Revision{0, 1, 2, 1}

	res := MustAppendMulti(t, ctx, s, parts...)

	var prev eventstore.Position
	for i, p := range parts {
		got := mustReadStream(t, ctx, s, p.Stream)
		if diff := cmp.Diff(recorded(p.Stream, first[i], p.Events), got[first[i]:], recordedOptions); diff != "" {
			t.Errorf("ReadStream(%s) after AppendMulti mismatch (-want +got):\n%s", p.Stream, diff)
			continue
		}
		last := got[len(got)-1]
		want := eventstore.AppendResult{NextRevision: first[i] + eventstore.Revision(len(p.Events)) - 1, Position: last.Position}
		if withoutNow(res[i]) != want {
			t.Errorf("AppendMulti result %d (%s) = %+v, want %+v", i, p.Stream, res[i], want)
		}
		c.checkNow(t, fmt.Sprintf("AppendMulti result %d (%s)", i, p.Stream), res[i], last.RecordedAt)
		for _, e := range got[first[i]:] {
			if !prev.Less(e.Position) {
				t.Errorf("event %s of part %d (%s) at %s, want after %s (part order, then event order)", e.ID, i, p.Stream, e.Position, prev)
			}
			prev = e.Position
		}
	}
}

func testMultiContiguous(t *testing.T, s eventstore.Store) {
	requireAtomic(t, s)
	ctx := testContext(t)
	run := newStream("contiguous")
	start := mustHead(t, ctx, s)
	parts := []eventstore.StreamAppend{
		{Stream: run + "-a", Expected: eventstore.NoStream(), Events: newEvents(t, "One", 2)},
		{Stream: run + "-b", Expected: eventstore.NoStream(), Events: newEvents(t, "Two", 3)},
	}
	MustAppendMulti(t, ctx, s, parts...)
	want := append(IDs(parts[0].Events), IDs(parts[1].Events)...)

	// Every event of the log from the first of the call on, until all of
	// the call's are seen: nothing else may come between them.
	var (
		seen  []string
		after = start
		began = false
	)
	for len(seen) < len(want) {
		page, err := s.ReadAll(ctx, after, 100)
		if err != nil {
			t.Fatalf("ReadAll(%s, 100) = %v, want nil", after, err)
		}
		if len(page) == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("ReadAll: %d of %d events of the call readable before %v", len(seen), len(want), ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		for _, e := range page {
			after = e.Position
			began = began || e.ID == want[0]
			if began && len(seen) < len(want) {
				seen = append(seen, e.ID)
			}
		}
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("the log from the call's first event on (-the call's events +the log):\n%s", diff)
	}
}

// conflictRows are the rows of the conflict cases: three parts on streams
// that each have one event, one of them (conflict) with an expected
// revision that fails, each row with another kind.
var conflictRows = []struct {
	name     string
	conflict int
	expected eventstore.ExpectedRevision
	actual   int64
	missing  bool // the conflicting part's stream has no event
}{
	{"in the first part (no stream on an existing stream)", 0, eventstore.NoStream(), 0, false},
	{"in the middle part (a stale exact revision)", 1, eventstore.Exact(5), 0, false},
	{"in the last part (stream exists on a new stream)", 2, eventstore.StreamExists(), -1, true},
}

// conflictCall sets up a conflict row's streams and returns its parts.
func conflictCall(t *testing.T, ctx context.Context, s eventstore.Store, row int) []eventstore.StreamAppend {
	t.Helper()
	r := conflictRows[row]
	run := newStream("conflict")
	parts := make([]eventstore.StreamAppend, 3)
	for i := range parts {
		stream := fmt.Sprintf("%s-%d", run, i)
		parts[i] = eventstore.StreamAppend{Stream: stream, Expected: eventstore.Exact(0), Events: newEvents(t, "Appended", 2)}
		if i == r.conflict {
			parts[i].Expected = r.expected
		}
		if i != r.conflict || !r.missing {
			MustAppend(t, ctx, s, stream, eventstore.NoStream(), newEvents(t, "Existing", 1)...)
		}
	}
	return parts
}

func testMultiConflictNamesPart(t *testing.T, s eventstore.Store) {
	for i, r := range conflictRows {
		t.Run(r.name, func(t *testing.T) {
			ctx := testContext(t)
			parts := conflictCall(t, ctx, s, i)
			_, err := s.AppendMulti(ctx, parts...)
			wantPartConflict(t, err, r.conflict, len(parts), parts[r.conflict].Stream, r.expected, r.actual)
		})
	}
}

func testMultiConflictWritesNothing(t *testing.T, s eventstore.Store) {
	requireAtomic(t, s)
	for i, r := range conflictRows {
		t.Run(r.name, func(t *testing.T) {
			ctx := testContext(t)
			parts := conflictCall(t, ctx, s, i)
			before := make([][]string, len(parts))
			for j, p := range parts {
				before[j] = streamIDs(t, ctx, s, p.Stream)
			}
			if _, err := s.AppendMulti(ctx, parts...); !errors.Is(err, eventstore.ErrWrongExpectedRevision) {
				t.Fatalf("AppendMulti(%s) = %v, want a wrong expected revision", describeParts(parts), err)
			}
			for j, p := range parts {
				if diff := cmp.Diff(before[j], streamIDs(t, ctx, s, p.Stream)); diff != "" {
					t.Errorf("ReadStream(%s) (part %d) changed by a failed AppendMulti (-before +after):\n%s", p.Stream, j, diff)
				}
			}
			// The streams take the same parts once the conflict is gone.
			parts[r.conflict].Expected = eventstore.Any()
			MustAppendMulti(t, ctx, s, parts...)
		})
	}
}

func testMultiInvalid(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	run := newStream("invalid")
	one, two := newEvents(t, "Valid", 1), newEvents(t, "Valid", 1)
	tests := []struct {
		name  string
		parts []eventstore.StreamAppend
	}{
		{"no parts", nil},
		{"a part without events", []eventstore.StreamAppend{
			{Stream: run + "-a", Events: one}, {Stream: run + "-b"}}},
		{"a part without a stream name", []eventstore.StreamAppend{
			{Stream: run + "-a", Events: one}, {Events: two}}},
		{"two parts on one stream", []eventstore.StreamAppend{
			{Stream: run + "-a", Events: one}, {Stream: run + "-a", Events: two}}},
		{"one event id in two parts", []eventstore.StreamAppend{
			{Stream: run + "-a", Events: one}, {Stream: run + "-b", Events: one}}},
	}
	for _, tt := range tests {
		_, err := s.AppendMulti(ctx, tt.parts...)
		if err == nil || errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			t.Errorf("AppendMulti with %s = %v, want a validation error", tt.name, err)
		}
	}
	for _, stream := range []string{run + "-a", run + "-b"} {
		if ids := streamIDs(t, ctx, s, stream); ids != nil {
			t.Errorf("ReadStream(%s) after refused appends = %v, want no events", stream, ids)
		}
	}
}

func (c config) testMultiRepeat(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	run := newStream("multirepeat")
	MustAppend(t, ctx, s, run+"-b", eventstore.NoStream(), newEvents(t, "Before", 1)...)
	parts := []eventstore.StreamAppend{
		{Stream: run + "-a", Expected: eventstore.NoStream(), Events: newEvents(t, "New", 2)},
		{Stream: run + "-b", Expected: eventstore.Exact(0), Events: newEvents(t, "Next", 1)},
		{Stream: run + "-c", Expected: eventstore.Any(), Events: newEvents(t, "Any", 1)},
	}
	first := MustAppendMulti(t, ctx, s, parts...)
	before := make([][]eventstore.RecordedEvent, len(parts))
	for i, p := range parts {
		before[i] = mustReadStream(t, ctx, s, p.Stream)
	}

	again := MustAppendMulti(t, ctx, s, parts...)

	for i, p := range parts {
		if withoutNow(again[i]) != withoutNow(first[i]) {
			t.Errorf("repeated AppendMulti result %d (%s) = %+v, want %+v (the first call's)", i, p.Stream, again[i], first[i])
		}
		c.checkNow(t, fmt.Sprintf("repeated AppendMulti result %d", i), again[i], time.Time{})
		if diff := cmp.Diff(before[i], mustReadStream(t, ctx, s, p.Stream)); diff != "" {
			t.Errorf("ReadStream(%s) after the repeat changed (-before +after):\n%s", p.Stream, diff)
		}
	}

	// A repeat that puts a stored part elsewhere is a conflict, as for Append.
	moved := slices.Clone(parts)
	moved[1].Expected = eventstore.Exact(3)
	_, err := s.AppendMulti(ctx, moved...)
	wantPartConflict(t, err, 1, len(parts), parts[1].Stream, moved[1].Expected, 1)
}

func testMultiCompletes(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	run := newStream("completes")
	parts := []eventstore.StreamAppend{
		{Stream: run + "-a", Expected: eventstore.NoStream(), Events: newEvents(t, "First", 2)},
		{Stream: run + "-b", Expected: eventstore.NoStream(), Events: newEvents(t, "Second", 1)},
	}
	// Only the first part made it (a call cut short where the multi-stream
	// append is not atomic).
	stored := MustAppend(t, ctx, s, parts[0].Stream, parts[0].Expected, parts[0].Events...)

	res := MustAppendMulti(t, ctx, s, parts...)

	if withoutNow(res[0]) != withoutNow(stored) {
		t.Errorf("AppendMulti result 0 (%s, already stored) = %+v, want %+v", parts[0].Stream, res[0], stored)
	}
	for i, p := range parts {
		if diff := cmp.Diff(IDs(p.Events), streamIDs(t, ctx, s, p.Stream)); diff != "" {
			t.Errorf("ReadStream(%s) mismatch (-want +got):\n%s", p.Stream, diff)
		}
		if res[i].NextRevision != eventstore.Revision(len(p.Events)-1) {
			t.Errorf("AppendMulti result %d (%s).NextRevision = %d, want %d", i, p.Stream, res[i].NextRevision, len(p.Events)-1)
		}
	}
}

func testMultiSharedStream(t *testing.T, s eventstore.Store) {
	requireAtomic(t, s)
	const appenders = 12
	ctx := testContext(t)
	run := newStream("shared")
	shared := run + "-shared"
	MustAppend(t, ctx, s, shared, eventstore.NoStream(), newEvents(t, "Existing", 1)...)
	calls := make([][]eventstore.StreamAppend, appenders)
	errs := make([]error, appenders)
	for i := range calls {
		calls[i] = []eventstore.StreamAppend{
			{Stream: fmt.Sprintf("%s-own-%d", run, i), Expected: eventstore.NoStream(), Events: newEvents(t, "Own", 2)},
			{Stream: shared, Expected: eventstore.Exact(0), Events: newEvents(t, "Shared", 1)},
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() {
			<-start
			_, errs[i] = s.AppendMulti(ctx, calls[i]...)
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("AppendMulti succeeded for appenders %d and %d, want exactly one winner", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("AppendMulti failed for all %d appenders (first: %v), want exactly one winner", appenders, errs[0])
	}
	for i, err := range errs {
		if i == winner {
			continue
		}
		wantPartConflict(t, err, 1, 2, shared, eventstore.Exact(0), 1)
		if ids := streamIDs(t, ctx, s, calls[i][0].Stream); ids != nil {
			t.Errorf("ReadStream(%s) of a losing call = %v, want no events (the call failed whole)", calls[i][0].Stream, ids)
		}
	}
	want := append(streamIDs(t, ctx, s, shared)[:1], IDs(calls[winner][1].Events)...)
	if diff := cmp.Diff(want, streamIDs(t, ctx, s, shared)); diff != "" {
		t.Errorf("ReadStream(%s) mismatch (-want +got):\n%s", shared, diff)
	}
	if diff := cmp.Diff(IDs(calls[winner][0].Events), streamIDs(t, ctx, s, calls[winner][0].Stream)); diff != "" {
		t.Errorf("ReadStream(%s) of the winner mismatch (-want +got):\n%s", calls[winner][0].Stream, diff)
	}
}

func testMultiOppositeOrders(t *testing.T, s eventstore.Store) {
	const (
		appenders = 6
		calls     = 15
	)
	ctx, run, _, _, sub := watchNew(t, s, "opposite")
	a, b := run+"-a", run+"-b"
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	for i := range appenders {
		wg.Go(func() {
			for range calls {
				parts := []eventstore.StreamAppend{
					{Stream: a, Expected: eventstore.Any(), Events: newEvents(t, "A", 1)},
					{Stream: b, Expected: eventstore.Any(), Events: newEvents(t, "B", 1)},
				}
				if i%2 == 1 {
					parts[0], parts[1] = parts[1], parts[0]
				}
				if _, err := s.AppendMulti(ctx, parts...); err != nil {
					errs <- fmt.Errorf("AppendMulti(%s) = %w, want nil", describeParts(parts), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 2 * appenders * calls
	delivered := sub.waitFor(t, ctx, total)
	checkStreamOrder(t, delivered, nil)
	for _, stream := range []string{a, b} {
		if n := len(streamIDs(t, ctx, s, stream)); n != appenders*calls {
			t.Errorf("ReadStream(%s) = %d events, want %d", stream, n, appenders*calls)
		}
	}
}

// multiHoldOpener returns s as a MultiHoldOpener, or skips t.
func multiHoldOpener(t *testing.T, s eventstore.Store) MultiHoldOpener {
	t.Helper()
	if h, ok := s.(MultiHoldOpener); ok {
		return h
	}
	if u, ok := s.(HoldOpenUnsupported); ok {
		t.Skip("the backend cannot hold an append open: " + u.HoldOpenUnsupported())
	}
	t.Skip("the store does not implement storetest.MultiHoldOpener")
	return nil
}

// appendLater makes appenders goroutines each append perAppender calls of
// one event to each of two streams of their own (run-later-N-a and -b), and
// fails t if any call fails.
func appendLater(t *testing.T, ctx context.Context, s eventstore.Store, run string, appenders, perAppender int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, appenders*perAppender)
	for i := range appenders {
		wg.Go(func() {
			for j := range perAppender {
				expected := eventstore.NoStream()
				if j > 0 {
					expected = eventstore.Exact(eventstore.Revision(j - 1))
				}
				parts := []eventstore.StreamAppend{
					{Stream: fmt.Sprintf("%s-later-%d-a", run, i), Expected: expected, Events: newEvents(t, "Later", 1)},
					{Stream: fmt.Sprintf("%s-later-%d-b", run, i), Expected: expected, Events: newEvents(t, "Later", 1)},
				}
				if _, err := s.AppendMulti(ctx, parts...); err != nil {
					errs <- fmt.Errorf("AppendMulti(%s) = %w, want nil", describeParts(parts), err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testMultiHeldOpen(t *testing.T, s eventstore.Store) {
	h := multiHoldOpener(t, s)
	ctx, run, own, start, sub := watchNew(t, s, "multiheld")

	pre := newEvents(t, "Before", 1)
	MustAppend(t, ctx, s, run+"-pre", eventstore.NoStream(), pre...)
	prePos := sub.waitFor(t, ctx, 1)[0].Position

	held := []eventstore.StreamAppend{
		{Stream: run + "-held-a", Expected: eventstore.NoStream(), Events: newEvents(t, "Held", 2)},
		{Stream: run + "-held-b", Expected: eventstore.NoStream(), Events: newEvents(t, "Held", 1)},
	}
	commit, abort, err := h.HoldOpenAppendMulti(ctx, held...)
	if err != nil {
		t.Fatalf("HoldOpenAppendMulti(%s) = %v, want nil", describeParts(held), err)
	}
	defer abort()

	// Later multi-stream appends commit while the held one is still open.
	const appenders, perAppender = 3, 4
	appendLater(t, ctx, s, run, appenders, perAppender)
	if got := streamIDs(t, ctx, s, run+"-later-0-b"); len(got) != perAppender {
		t.Fatalf("ReadStream(%s-later-0-b) = %d events, want %d", run, len(got), perAppender)
	}
	page, err := s.ReadAll(ctx, prePos, 1000)
	if err != nil {
		t.Fatalf("ReadAll(%s, 1000) = %v, want nil", prePos, err)
	}
	for _, e := range page {
		if own(e.Stream) {
			t.Fatalf("ReadAll(%s, 1000) returned %s@%d while an earlier multi-stream append was uncommitted, want none of this test's events", prePos, e.Stream, e.Revision)
		}
	}
	// Give the subscriber, already woken by the appends, time to misbehave.
	time.Sleep(50 * time.Millisecond)
	if got := sub.snapshot(); len(got) != 1 {
		t.Fatalf("SubscribeAll delivered %d events while an earlier multi-stream append was uncommitted, want 1 (%v)", len(got), IDs(got))
	}

	res, err := commit(ctx)
	if err != nil {
		t.Fatalf("commit of the held multi-stream append = %v, want nil", err)
	}
	MustAppend(t, ctx, s, run+"-post", eventstore.NoStream(), newEvents(t, "After", 1)...)

	total := 1 + 3 + 2*appenders*perAppender + 1
	delivered := sub.waitFor(t, ctx, total)
	if len(delivered) != total {
		t.Fatalf("SubscribeAll delivered %d events, want %d", len(delivered), total)
	}
	fromAll := readOwn(t, ctx, s, start, 1000, own, total)
	if diff := cmp.Diff(fromAll, delivered); diff != "" {
		t.Errorf("SubscribeAll and ReadAll disagree (-ReadAll +SubscribeAll):\n%s", diff)
	}
	wantFirst := append(append(IDs(pre), IDs(held[0].Events)...), IDs(held[1].Events)...)
	if diff := cmp.Diff(wantFirst, IDs(delivered[:4])); diff != "" {
		t.Errorf("SubscribeAll first events mismatch (-want +got): the held append began first, so it comes first\n%s", diff)
	}
	want := []eventstore.AppendResult{
		{NextRevision: 1, Position: delivered[2].Position},
		{NextRevision: 0, Position: delivered[3].Position},
	}
	if len(res) != 2 || withoutNow(res[0]) != want[0] || withoutNow(res[1]) != want[1] {
		t.Errorf("commit of the held multi-stream append = %+v, want %+v", res, want)
	}
	checkStreamOrder(t, delivered, nil)
}

func testMultiManyAppenders(t *testing.T, s eventstore.Store) {
	const (
		appenders   = 6
		perAppender = 40
		streams     = 8
	)
	ctx, run, _, _, sub := watchNew(t, s, "multimany")
	contiguous := atomicity(s) == ""

	// Every call appends one or two events to two or three of the streams,
	// with Any, so calls contend on streams and revisions interleave.
	var (
		mu    sync.Mutex
		lasts = map[string]eventstore.AppendResult{} // by the id of a part's last event
		calls = map[string][]string{}                // a call's event ids, by its first event's id
		wg    sync.WaitGroup
		total int
	)
	errs := make(chan error, appenders)
	for a := range appenders {
		wg.Go(func() {
			for i := range perAppender {
				n := 2 + (a+i)%2
				parts := make([]eventstore.StreamAppend, n)
				var ids []string
				for k := range parts {
					parts[k] = eventstore.StreamAppend{
						Stream:   fmt.Sprintf("%s-%d", run, (a+i+3*k)%streams),
						Expected: eventstore.Any(),
						Events:   newEvents(t, "Many", 1+(i+k)%2),
					}
					ids = append(ids, IDs(parts[k].Events)...)
				}
				res, err := s.AppendMulti(ctx, parts...)
				if err != nil {
					errs <- fmt.Errorf("AppendMulti(%s) = %w, want nil", describeParts(parts), err)
					return
				}
				mu.Lock()
				for k, p := range parts {
					lasts[p.Events[len(p.Events)-1].ID] = res[k]
				}
				calls[ids[0]] = ids
				total += len(ids)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	delivered := sub.waitFor(t, ctx, total)
	if len(delivered) != total {
		t.Fatalf("SubscribeAll delivered %d events, want %d", len(delivered), total)
	}
	checkStreamOrder(t, delivered, nil)
	for i, e := range delivered {
		if res, ok := lasts[e.ID]; ok {
			if want := (eventstore.AppendResult{NextRevision: e.Revision, Position: e.Position}); withoutNow(res) != want {
				t.Errorf("AppendMulti result of the part ending with event %s = %+v, want %+v as delivered", e.ID, res, want)
			}
		}
		if ids, ok := calls[e.ID]; ok && contiguous {
			if diff := cmp.Diff(ids, IDs(delivered[i:min(i+len(ids), len(delivered))])); diff != "" {
				t.Errorf("the events of one multi-stream append are not together in the log (-call +log):\n%s", diff)
			}
		}
	}
}
