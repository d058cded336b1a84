// Package storetest is the conformance suite of eventstore.Store: every
// backend's tests call Run, so every backend keeps the same contract.
//
// The suite tolerates a shared log: each case appends to its own uniquely
// named streams and looks only at them when it reads the log, so newStore may
// return the same store (and database) to every case, and other tests may
// append to the same log meanwhile. Cases run in parallel.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore"
)

// HoldOpener is implemented by a test adapter of a backend that can start an
// append and keep its transaction open, so the suite can check that a log
// reader never passes an event whose transaction commits late. It is a test
// hook, not part of eventstore.Store; the suite skips the cases that need it
// when the store from newStore does not implement it.
type HoldOpener interface {
	// HoldOpenAppend performs Append(ctx, stream, expected, events...) up to
	// but excluding its commit and returns once the events are written (with
	// their log positions taken) but invisible to readers. commit commits and
	// returns what Append would have; abort rolls back, and is a no-op after
	// commit, so it can be deferred. Exactly one of them must be called.
	HoldOpenAppend(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (commit func(context.Context) (eventstore.AppendResult, error), abort func(), err error)
}

// HoldOpenUnsupported is implemented by a test adapter of a backend that
// cannot hold an append open (it has no client-visible transactions), to say
// why: the suite skips the held-open cases with that reason. Backends that
// implement neither this nor HoldOpener are skipped with a generic reason.
type HoldOpenUnsupported interface {
	// HoldOpenUnsupported returns why the backend cannot hold an append open.
	HoldOpenUnsupported() string
}

// timeout bounds every case: generous, because the suite runs its cases
// in parallel on machines that may be fully busy.
const timeout = 2 * time.Minute

// Option configures Run.
type Option func(*config)

// config is what the options set.
type config struct {
	// clock says the backend reports its clock in AppendResult.Now.
	clock bool
}

// WithoutClock declares that the backend has no clock shared with the
// service, so its appends leave eventstore.AppendResult.Now zero by design
// (KurrentDB). Without it the suite requires Now to be set on every
// successful append: equal to the RecordedAt of the events the append
// wrote, and for a repeat the clock of the repeat (UTC, not zero).
func WithoutClock() Option {
	return func(c *config) { c.clock = false }
}

// Run runs the conformance suite against the stores newStore returns.
// newStore is called once per case or table row, from that test's goroutine
// and in parallel with other cases; it may fail or skip t. Stores may share
// their log with each other and with other tests (see the package comment).
// The cases that hold an append open run only if the stores implement
// HoldOpener (MultiHoldOpener for AppendMulti); they are skipped with the
// reason HoldOpenUnsupported gives otherwise. The cases that check that
// AppendMulti is atomic are skipped with the reason MultiAppendNotAtomic
// gives, for stores that implement it. The stores must report their clock
// in AppendResult.Now unless WithoutClock is given.
func Run(t *testing.T, newStore func(t *testing.T) eventstore.Store, opts ...Option) {
	c := config{clock: true}
	for _, opt := range opts {
		opt(&c)
	}
	cases := []suiteCase{
		{"appended events read back from their stream exactly as written", onStore(c.testRoundTrip)},
		{"reading a stream honours from and limit", onStore(testReadStreamRange)},
		{"each expected revision kind succeeds or conflicts with the actual revision", c.testExpectedRevisions},
		{"concurrent appends at the same expected revision let exactly one win", onStore(testConcurrentSameRevision)},
		{"a repeated append is recognised and writes nothing", c.testIdempotentRepeat},
		{"concurrent repeats of one append all succeed and write it once", onStore(c.testConcurrentRepeat)},
		{"truncate hides old events and keeps the stream's last revision", onStore(testTruncate)},
		{"read all returns events in log order and honours the limit", onStore(testReadAllOrder)},
		{"a subscriber never passes an append whose transaction commits late", onStore(testHeldOpenCommit)},
		{"a subscriber never sees an append whose transaction rolls back", onStore(testHeldOpenAbort)},
		{"a subscriber resumes from its checkpoint without loss or duplicates", onStore(testResume)},
		{"a subscriber returns the context's error when it is cancelled", onStore(testSubscribeCancel)},
		{"many concurrent appenders and a subscriber agree on every event", onStore(testManyAppenders)},
	}
	cases = append(cases, c.multiCases()...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore)
		})
	}
}

// suiteCase is one case of the suite: its name and how it runs.
type suiteCase struct {
	name string
	run  func(t *testing.T, newStore func(t *testing.T) eventstore.Store)
}

// withoutNow returns res with Now cleared, for comparing the rest.
func withoutNow(res eventstore.AppendResult) eventstore.AppendResult {
	res.Now = time.Time{}
	return res
}

// checkNow checks res.Now of a successful append: zero for a backend
// without a clock; otherwise a UTC time, equal to recordedAt when that is
// not zero (the RecordedAt of the events the append wrote).
func (c config) checkNow(t testing.TB, call string, res eventstore.AppendResult, recordedAt time.Time) {
	t.Helper()
	switch {
	case !c.clock:
		if !res.Now.IsZero() {
			t.Errorf("%s.Now = %v, want the zero time (the backend declares no clock)", call, res.Now)
		}
	case res.Now.IsZero() || res.Now.Location() != time.UTC:
		t.Errorf("%s.Now = %v, want the store's clock in UTC", call, res.Now)
	case !recordedAt.IsZero() && !res.Now.Equal(recordedAt):
		t.Errorf("%s.Now = %v, want %v (the RecordedAt of the events it wrote)", call, res.Now, recordedAt)
	}
}

// onStore adapts a case that needs one store to the table in Run.
func onStore(test func(t *testing.T, s eventstore.Store)) func(*testing.T, func(*testing.T) eventstore.Store) {
	return func(t *testing.T, newStore func(*testing.T) eventstore.Store) { test(t, newStore(t)) }
}

// testContext returns a context for one case, cancelled when it ends.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// newStream returns a stream name no other test uses.
func newStream(prefix string) string {
	return prefix + "-" + uuid.NewString()
}

// newCase starts a table row: it returns the row's context, a store from
// newStore and a new stream named after prefix.
func newCase(t *testing.T, newStore func(*testing.T) eventstore.Store, prefix string) (context.Context, eventstore.Store, string) {
	t.Helper()
	return testContext(t), newStore(t), newStream(prefix)
}

// newEvents returns n events of type typ with fresh UUIDv7 ids and JSON
// bodies whose bytes (spacing, key order) a store must keep exactly.
func newEvents(t testing.TB, typ string, n int) []eventstore.EventData {
	t.Helper()
	events := make([]eventstore.EventData, n)
	for i := range events {
		id, err := uuid.NewV7()
		if err != nil {
			t.Fatalf("uuid.NewV7() = %v", err)
		}
		events[i] = eventstore.EventData{
			ID:       id.String(),
			Type:     typ,
			Data:     fmt.Appendf(nil, `{"z": %d,  "a":"caf\u00e9 \u2603", "n":1.50}`, i),
			Metadata: fmt.Appendf(nil, `{"correlation_id":"%s" , "actor":"tester"}`, id),
		}
	}
	return events
}

// MustAppend appends events to stream at the expected revision and returns
// the result; it fails t if the append returns an error.
func MustAppend(t testing.TB, ctx context.Context, s eventstore.Store, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(ctx, stream, expected, events...)
	if err != nil {
		t.Fatalf("Append(%s, %s, %d events) = %v, want nil", stream, expected, len(events), err)
	}
	return res
}

func mustReadStream(t testing.TB, ctx context.Context, s eventstore.Store, stream string) []eventstore.RecordedEvent {
	t.Helper()
	events, err := s.ReadStream(ctx, stream, 0, 0)
	if err != nil {
		t.Fatalf("ReadStream(%s, 0, 0) = %v, want nil", stream, err)
	}
	return events
}

func mustHead(t testing.TB, ctx context.Context, s eventstore.Store) eventstore.Position {
	t.Helper()
	p, err := s.Head(ctx)
	if err != nil {
		t.Fatalf("Head() = %v, want nil", err)
	}
	return p
}

// IDs returns the events' ids, in order.
func IDs[E eventstore.EventData | eventstore.RecordedEvent](events []E) []string {
	out := make([]string, len(events))
	for i, e := range events {
		switch e := any(e).(type) {
		case eventstore.EventData:
			out[i] = e.ID
		case eventstore.RecordedEvent:
			out[i] = e.ID
		}
	}
	return out
}

// Eventually polls check every 20 ms until it returns nil, or fails t with
// the last error once ctx is done.
func Eventually(t testing.TB, ctx context.Context, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("condition not met before %v: %v", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// wantConflict fails t unless err is a *RevisionConflictError for stream and
// expected with the given Actual.
func wantConflict(t testing.TB, err error, stream string, expected eventstore.ExpectedRevision, actual int64) {
	t.Helper()
	if !errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		t.Fatalf("Append(%s, %s) = %v, want an error matching ErrWrongExpectedRevision", stream, expected, err)
	}
	var conflict *eventstore.RevisionConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("Append(%s, %s) = %v, want a *RevisionConflictError", stream, expected, err)
	}
	want := eventstore.RevisionConflictError{Stream: stream, Expected: expected, Actual: actual}
	if diff := cmp.Diff(want, *conflict, cmp.AllowUnexported(eventstore.ExpectedRevision{})); diff != "" {
		t.Fatalf("Append(%s, %s) conflict mismatch (-want +got):\n%s", stream, expected, diff)
	}
}

// recordedOptions compares recorded events on what a store must keep:
// Position and RecordedAt are checked separately, and a store may return
// empty bodies as nil or empty.
var recordedOptions = cmp.Options{
	cmpopts.IgnoreFields(eventstore.RecordedEvent{}, "Position", "RecordedAt"),
	cmpopts.EquateEmpty(),
}

// recorded returns what ReadStream should return for events appended to
// stream from revision first on.
func recorded(stream string, first eventstore.Revision, events []eventstore.EventData) []eventstore.RecordedEvent {
	out := make([]eventstore.RecordedEvent, len(events))
	for i, e := range events {
		out[i] = eventstore.RecordedEvent{
			ID: e.ID, Stream: stream, Type: e.Type, Revision: first + eventstore.Revision(i),
			Data: e.Data, Metadata: e.Metadata,
		}
	}
	return out
}

func (c config) testRoundTrip(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	stream := newStream("roundtrip")
	events := newEvents(t, "Tested", 3)
	events[1].Metadata = nil
	events[2].Data = []byte(`{}`)

	res := MustAppend(t, ctx, s, stream, eventstore.NoStream(), events...)
	got := mustReadStream(t, ctx, s, stream)

	if diff := cmp.Diff(recorded(stream, 0, events), got, recordedOptions); diff != "" {
		t.Fatalf("ReadStream(%s) mismatch (-want +got):\n%s", stream, diff)
	}
	if want := (eventstore.AppendResult{NextRevision: 2, Position: got[2].Position}); withoutNow(res) != want {
		t.Errorf("Append(%s, no_stream, 3 events) = %+v, want %+v", stream, res, want)
	}
	c.checkNow(t, fmt.Sprintf("Append(%s, no_stream, 3 events)", stream), res, got[2].RecordedAt)
	for i, e := range got {
		if i > 0 && !got[i-1].Position.Less(e.Position) {
			t.Errorf("ReadStream(%s)[%d].Position = %s, want after %s", stream, i, e.Position, got[i-1].Position)
		}
		if e.RecordedAt.IsZero() || e.RecordedAt.Location() != time.UTC {
			t.Errorf("ReadStream(%s)[%d].RecordedAt = %v, want a UTC time", stream, i, e.RecordedAt)
		}
	}
}

func testReadStreamRange(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	stream := newStream("range")
	events := newEvents(t, "Ranged", 5)
	MustAppend(t, ctx, s, stream, eventstore.NoStream(), events...)

	tests := []struct {
		name  string
		from  eventstore.Revision
		limit int
		want  []eventstore.RecordedEvent
	}{
		{"from the start without a limit returns all", 0, 0, recorded(stream, 0, events)},
		{"a negative limit means all", 0, -1, recorded(stream, 0, events)},
		{"from the middle returns the rest", 3, 0, recorded(stream, 3, events[3:])},
		{"a limit cuts the result", 1, 2, recorded(stream, 1, events[1:3])},
		{"from the last revision returns one", 4, 10, recorded(stream, 4, events[4:])},
		{"from after the last revision returns nothing", 5, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ReadStream(ctx, stream, tt.from, tt.limit)
			if err != nil {
				t.Fatalf("ReadStream(%s, %d, %d) = %v, want nil", stream, tt.from, tt.limit, err)
			}
			if diff := cmp.Diff(tt.want, got, recordedOptions); diff != "" {
				t.Errorf("ReadStream(%s, %d, %d) mismatch (-want +got):\n%s", stream, tt.from, tt.limit, diff)
			}
		})
	}
	t.Run("a stream that never existed is not found", func(t *testing.T) {
		missing := newStream("missing")
		got, err := s.ReadStream(ctx, missing, 0, 0)
		if !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Errorf("ReadStream(%s, 0, 0) = %v, %v, want ErrStreamNotFound", missing, got, err)
		}
	})
}

func (c config) testExpectedRevisions(t *testing.T, newStore func(t *testing.T) eventstore.Store) {
	tests := []struct {
		name     string
		existing int // events in the stream before the append
		expected eventstore.ExpectedRevision
		wantNext eventstore.Revision
		conflict bool
		actual   int64
	}{
		{name: "any on a new stream appends", existing: 0, expected: eventstore.Any(), wantNext: 1},
		{name: "any on an existing stream appends", existing: 2, expected: eventstore.Any(), wantNext: 3},
		{name: "no stream on a new stream appends", existing: 0, expected: eventstore.NoStream(), wantNext: 1},
		{name: "no stream on an existing stream conflicts", existing: 2, expected: eventstore.NoStream(), conflict: true, actual: 1},
		{name: "stream exists on an existing stream appends", existing: 2, expected: eventstore.StreamExists(), wantNext: 3},
		{name: "stream exists on a new stream conflicts", existing: 0, expected: eventstore.StreamExists(), conflict: true, actual: -1},
		{name: "exact last revision appends", existing: 2, expected: eventstore.Exact(1), wantNext: 3},
		{name: "exact revision zero after one event appends", existing: 1, expected: eventstore.Exact(0), wantNext: 2},
		{name: "exact stale revision conflicts", existing: 3, expected: eventstore.Exact(0), conflict: true, actual: 2},
		{name: "exact future revision conflicts", existing: 2, expected: eventstore.Exact(5), conflict: true, actual: 1},
		{name: "exact revision on a new stream conflicts", existing: 0, expected: eventstore.Exact(0), conflict: true, actual: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, s, stream := newCase(t, newStore, "expected")
			var before []eventstore.RecordedEvent
			if tt.existing > 0 {
				MustAppend(t, ctx, s, stream, eventstore.NoStream(), newEvents(t, "Existing", tt.existing)...)
				before = mustReadStream(t, ctx, s, stream)
			}
			events := newEvents(t, "Appended", 2)

			res, err := s.Append(ctx, stream, tt.expected, events...)

			if tt.conflict {
				wantConflict(t, err, stream, tt.expected, tt.actual)
				after, err := s.ReadStream(ctx, stream, 0, 0)
				if tt.existing == 0 {
					if !errors.Is(err, eventstore.ErrStreamNotFound) {
						t.Errorf("ReadStream(%s) after a conflict = %v, %v, want ErrStreamNotFound", stream, after, err)
					}
					return
				}
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("ReadStream(%s) after a conflict changed (-before +after):\n%s", stream, diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Append(%s, %s) = %v, want nil", stream, tt.expected, err)
			}
			if res.NextRevision != tt.wantNext {
				t.Errorf("Append(%s, %s).NextRevision = %d, want %d", stream, tt.expected, res.NextRevision, tt.wantNext)
			}
			got := mustReadStream(t, ctx, s, stream)
			want := append(recorded(stream, 0, nil), recorded(stream, eventstore.Revision(tt.existing), events)...)
			if diff := cmp.Diff(want, got[tt.existing:], recordedOptions); diff != "" {
				t.Errorf("ReadStream(%s) mismatch (-want +got):\n%s", stream, diff)
			}
			if last := got[len(got)-1].Position; res.Position != last {
				t.Errorf("Append(%s, %s).Position = %s, want %s (the last event's)", stream, tt.expected, res.Position, last)
			}
			c.checkNow(t, fmt.Sprintf("Append(%s, %s)", stream, tt.expected), res, got[len(got)-1].RecordedAt)
		})
	}
}

func testConcurrentSameRevision(t *testing.T, s eventstore.Store) {
	const appenders = 24
	tests := []struct {
		name     string
		existing int
		expected eventstore.ExpectedRevision
	}{
		{"no stream on a new stream", 0, eventstore.NoStream()},
		{"exact on an existing stream", 2, eventstore.Exact(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			stream := newStream("race")
			if tt.existing > 0 {
				MustAppend(t, ctx, s, stream, eventstore.NoStream(), newEvents(t, "Existing", tt.existing)...)
			}
			batches := make([][]eventstore.EventData, appenders)
			results := make([]eventstore.AppendResult, appenders)
			errs := make([]error, appenders)
			for i := range batches {
				batches[i] = newEvents(t, "Raced", 2)
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range appenders {
				wg.Go(func() {
					<-start
					results[i], errs[i] = s.Append(ctx, stream, tt.expected, batches[i]...)
				})
			}
			close(start)
			wg.Wait()

			winner := -1
			for i, err := range errs {
				if err == nil {
					if winner >= 0 {
						t.Fatalf("Append(%s, %s) succeeded for appenders %d and %d, want exactly one winner", stream, tt.expected, winner, i)
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("Append(%s, %s) failed for all %d appenders (first: %v), want exactly one winner", stream, tt.expected, appenders, errs[0])
			}
			wantNext := eventstore.Revision(tt.existing + 1)
			if results[winner].NextRevision != wantNext {
				t.Errorf("Append(%s, %s).NextRevision = %d, want %d", stream, tt.expected, results[winner].NextRevision, wantNext)
			}
			for i, err := range errs {
				if i != winner {
					wantConflict(t, err, stream, tt.expected, int64(wantNext))
				}
			}
			got := mustReadStream(t, ctx, s, stream)
			if diff := cmp.Diff(recorded(stream, eventstore.Revision(tt.existing), batches[winner]), got[tt.existing:], recordedOptions); diff != "" {
				t.Errorf("ReadStream(%s) mismatch (-want +got):\n%s", stream, diff)
			}
		})
	}
}

func (c config) testIdempotentRepeat(t *testing.T, newStore func(t *testing.T) eventstore.Store) {
	// Each case writes first (2 events) at no stream, then second (2 events)
	// at exact 1, then repeats repeat at expected; events are drawn from
	// first (f0, f1), second (s0, s1) and fresh (n0).
	tests := []struct {
		name     string
		repeat   []string // "f0", "f1", "s0", "s1", "n0"
		expected eventstore.ExpectedRevision
		wantNext eventstore.Revision // for a recognised repeat
		conflict bool
	}{
		{name: "the same batch at no stream again is a no-op", repeat: []string{"f0", "f1"}, expected: eventstore.NoStream(), wantNext: 1},
		{name: "the same batch at its exact revision again is a no-op", repeat: []string{"s0", "s1"}, expected: eventstore.Exact(1), wantNext: 3},
		{name: "the same batch with any is a no-op", repeat: []string{"f0", "f1"}, expected: eventstore.Any(), wantNext: 1},
		{name: "the same batch with stream exists is a no-op", repeat: []string{"s0", "s1"}, expected: eventstore.StreamExists(), wantNext: 3},
		{name: "a prefix of a batch at its expected revision is a no-op", repeat: []string{"s0"}, expected: eventstore.Exact(1), wantNext: 2},
		{name: "the same batch at the wrong exact revision conflicts", repeat: []string{"f0", "f1"}, expected: eventstore.Exact(1), conflict: true},
		{name: "the same batch at no stream with events from two appends conflicts", repeat: []string{"f1", "s0"}, expected: eventstore.NoStream(), conflict: true},
		{name: "the same events in another order conflict", repeat: []string{"f1", "f0"}, expected: eventstore.NoStream(), conflict: true},
		{name: "stored events with a new one conflict at the old revision", repeat: []string{"f0", "f1", "n0"}, expected: eventstore.NoStream(), conflict: true},
		{name: "stored events with a new one conflict with any", repeat: []string{"s0", "n0"}, expected: eventstore.Any(), conflict: true},
		{name: "a stored event at a future exact revision conflicts", repeat: []string{"s1"}, expected: eventstore.Exact(7), conflict: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, s, stream := newCase(t, newStore, "repeat")
			first, second := newEvents(t, "First", 2), newEvents(t, "Second", 2)
			MustAppend(t, ctx, s, stream, eventstore.NoStream(), first...)
			MustAppend(t, ctx, s, stream, eventstore.Exact(1), second...)
			before := mustReadStream(t, ctx, s, stream)
			byName := map[string]eventstore.EventData{
				"f0": first[0], "f1": first[1], "s0": second[0], "s1": second[1],
				"n0": newEvents(t, "New", 1)[0],
			}
			var repeat []eventstore.EventData
			for _, name := range tt.repeat {
				repeat = append(repeat, byName[name])
			}

			res, err := s.Append(ctx, stream, tt.expected, repeat...)

			if tt.conflict {
				wantConflict(t, err, stream, tt.expected, 3)
			} else {
				if err != nil {
					t.Fatalf("Append(%s, %s, %v) = %v, want nil (a repeat)", stream, tt.expected, tt.repeat, err)
				}
				want := eventstore.AppendResult{NextRevision: tt.wantNext, Position: before[tt.wantNext].Position}
				if withoutNow(res) != want {
					t.Errorf("Append(%s, %s, %v) = %+v, want %+v", stream, tt.expected, tt.repeat, res, want)
				}
				// A repeat reports the clock of the repeat, which runs after
				// the append it repeats has committed.
				call := fmt.Sprintf("Append(%s, %s, %v)", stream, tt.expected, tt.repeat)
				c.checkNow(t, call, res, time.Time{})
				if c.clock && res.Now.Before(before[tt.wantNext].RecordedAt) {
					t.Errorf("%s.Now = %v, want at or after %v (the repeated events' RecordedAt)", call, res.Now, before[tt.wantNext].RecordedAt)
				}
			}
			after := mustReadStream(t, ctx, s, stream)
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("ReadStream(%s) after the repeat changed (-before +after):\n%s", stream, diff)
			}
		})
	}
}

func (c config) testConcurrentRepeat(t *testing.T, s eventstore.Store) {
	const repeats = 12
	ctx := testContext(t)
	stream := newStream("repeats")
	events := newEvents(t, "Repeated", 3)
	results := make([]eventstore.AppendResult, repeats)
	errs := make([]error, repeats)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range repeats {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Append(ctx, stream, eventstore.NoStream(), events...)
		})
	}
	close(start)
	wg.Wait()

	got := mustReadStream(t, ctx, s, stream)
	if diff := cmp.Diff(recorded(stream, 0, events), got, recordedOptions); diff != "" {
		t.Fatalf("ReadStream(%s) mismatch (-want +got):\n%s", stream, diff)
	}
	want := eventstore.AppendResult{NextRevision: 2, Position: got[2].Position}
	for i := range repeats {
		if errs[i] != nil || withoutNow(results[i]) != want {
			t.Errorf("Append(%s, no_stream) #%d = %+v, %v, want %+v, nil", stream, i, results[i], errs[i], want)
		}
		// The winner's clock is its events' RecordedAt; a repeat's is its
		// own, which may be earlier if it started before the winner.
		c.checkNow(t, fmt.Sprintf("Append(%s, no_stream) #%d", stream, i), results[i], time.Time{})
	}
}

func testTruncate(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	stream := newStream("truncate")
	events := newEvents(t, "Kept", 3)
	MustAppend(t, ctx, s, stream, eventstore.NoStream(), events...)

	if err := s.Truncate(ctx, stream, 2); err != nil {
		t.Fatalf("Truncate(%s, 2) = %v, want nil", stream, err)
	}
	got := mustReadStream(t, ctx, s, stream)
	if diff := cmp.Diff(recorded(stream, 2, events[2:]), got, recordedOptions); diff != "" {
		t.Fatalf("ReadStream(%s) after Truncate(2) mismatch (-want +got):\n%s", stream, diff)
	}
	if err := s.Truncate(ctx, stream, 1); err != nil {
		t.Fatalf("Truncate(%s, 1) = %v, want nil", stream, err)
	}
	if got := mustReadStream(t, ctx, s, stream); len(got) != 1 || got[0].Revision != 2 {
		t.Fatalf("ReadStream(%s) after Truncate(1) = revisions %v, want [2] (truncation never moves back)", stream, revisions(got))
	}

	if err := s.Truncate(ctx, stream, 3); err != nil {
		t.Fatalf("Truncate(%s, 3) = %v, want nil", stream, err)
	}
	if got, err := s.ReadStream(ctx, stream, 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("ReadStream(%s) after Truncate(3) = %v, %v, want ErrStreamNotFound", stream, revisions(got), err)
	}
	_, err := s.Append(ctx, stream, eventstore.NoStream(), newEvents(t, "Again", 1)...)
	wantConflict(t, err, stream, eventstore.NoStream(), 2)

	more := newEvents(t, "After", 2)
	res := MustAppend(t, ctx, s, stream, eventstore.Exact(2), more...)
	if res.NextRevision != 4 {
		t.Errorf("Append(%s, 2) after truncation = revision %d, want 4", stream, res.NextRevision)
	}
	got = mustReadStream(t, ctx, s, stream)
	if diff := cmp.Diff(recorded(stream, 3, more), got, recordedOptions); diff != "" {
		t.Errorf("ReadStream(%s) after appending to a truncated stream mismatch (-want +got):\n%s", stream, diff)
	}

	missing := newStream("missing")
	if err := s.Truncate(ctx, missing, 5); err != nil {
		t.Errorf("Truncate(%s, 5) on a stream that never existed = %v, want nil", missing, err)
	}
	MustAppend(t, ctx, s, missing, eventstore.NoStream(), newEvents(t, "First", 1)...)
}

func revisions(events []eventstore.RecordedEvent) []eventstore.Revision {
	out := make([]eventstore.Revision, len(events))
	for i, e := range events {
		out[i] = e.Revision
	}
	return out
}

// readOwn pages through ReadAll after after with limit until it has seen
// want events of the streams own accepts, and returns those events in log order.
// It fails t if a page is longer than limit or out of order, or if the
// events do not all become readable before ctx is done.
func readOwn(t testing.TB, ctx context.Context, s eventstore.Store, after eventstore.Position, limit int, own func(stream string) bool, want int) []eventstore.RecordedEvent {
	t.Helper()
	var got []eventstore.RecordedEvent
	for len(got) < want {
		page, err := s.ReadAll(ctx, after, limit)
		if err != nil {
			t.Fatalf("ReadAll(%s, %d) = %v, want nil", after, limit, err)
		}
		if len(page) > limit {
			t.Fatalf("ReadAll(%s, %d) returned %d events, want at most %d", after, limit, len(page), limit)
		}
		for _, e := range page {
			if !after.Less(e.Position) {
				t.Fatalf("ReadAll(%s, %d) returned position %s, want after %s", after, limit, e.Position, after)
			}
			after = e.Position
			if own(e.Stream) {
				got = append(got, e)
			}
		}
		if len(page) == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("ReadAll(%s, %d): %d of %d events readable before %v", after, limit, len(got), want, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return got
}

func testReadAllOrder(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	start := mustHead(t, ctx, s)
	run := newStream("all")
	own := prefixed(run)
	streams := []string{run + "-a", run + "-b", run + "-c"}
	var want []eventstore.RecordedEvent
	next := map[string]eventstore.Revision{}
	// Sequential appends commit in this order, interleaving the streams.
	for round := range 3 {
		for i, stream := range streams {
			events := newEvents(t, fmt.Sprintf("Round%d", round), i+1)
			expected := eventstore.NoStream()
			if round > 0 {
				expected = eventstore.Exact(next[stream] - 1)
			}
			MustAppend(t, ctx, s, stream, expected, events...)
			want = append(want, recorded(stream, next[stream], events)...)
			next[stream] += eventstore.Revision(len(events))
		}
	}

	for _, limit := range []int{1, 2, 7, 1000} {
		got := readOwn(t, ctx, s, start, limit, own, len(want))
		if diff := cmp.Diff(want, got, recordedOptions); diff != "" {
			t.Errorf("ReadAll(%s, %d) own events mismatch (-want +got):\n%s", start, limit, diff)
		}
	}

	got := readOwn(t, ctx, s, start, 1000, own, len(want))
	if head := mustHead(t, ctx, s); head.Less(got[len(got)-1].Position) {
		t.Errorf("Head() = %s, want at or after %s (the last appended event)", head, got[len(got)-1].Position)
	}
	stream := mustReadStream(t, ctx, s, streams[0])
	var fromAll []eventstore.RecordedEvent
	for _, e := range got {
		if e.Stream == streams[0] {
			fromAll = append(fromAll, e)
		}
	}
	if diff := cmp.Diff(stream, fromAll); diff != "" {
		t.Errorf("ReadStream(%s) and ReadAll disagree (-stream +all):\n%s", streams[0], diff)
	}
}
