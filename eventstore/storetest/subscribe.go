package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/eventstore"
)

// subscriber runs SubscribeAll in a goroutine and records the events of the
// streams it owns, checking as it goes that the whole log arrives in strictly
// increasing positions and that no own event arrives twice.
type subscriber struct {
	own     func(stream string) bool
	changed chan struct{} // receives after every batch
	done    chan error
	cancel  context.CancelFunc
	stopped sync.Once
	err     error

	mu       sync.Mutex
	events   []eventstore.RecordedEvent
	seen     map[string]bool
	last     eventstore.Position
	problems []string
}

// subscribe starts a subscription after after and stops it when t ends.
func subscribe(t testing.TB, ctx context.Context, s eventstore.Store, after eventstore.Position, own func(stream string) bool) *subscriber {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	sub := &subscriber{
		own:     own,
		changed: make(chan struct{}, 1),
		done:    make(chan error, 1),
		cancel:  cancel,
		seen:    map[string]bool{},
		last:    after,
	}
	go func() { sub.done <- s.SubscribeAll(ctx, after, sub.handle) }()
	t.Cleanup(func() {
		if err := sub.stop(); !errors.Is(err, context.Canceled) {
			t.Errorf("SubscribeAll(%s) = %v, want context.Canceled after cancel", after, err)
		}
		sub.check(t)
	})
	return sub
}

func (sub *subscriber) handle(_ context.Context, batch []eventstore.RecordedEvent) error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(batch) == 0 {
		sub.problems = append(sub.problems, "SubscribeAll called fn with an empty batch")
	}
	for _, e := range batch {
		if !sub.last.Less(e.Position) {
			sub.problems = append(sub.problems, fmt.Sprintf("SubscribeAll delivered position %s after %s, want increasing positions", e.Position, sub.last))
		}
		sub.last = e.Position
		if !sub.own(e.Stream) {
			continue
		}
		if sub.seen[e.ID] {
			sub.problems = append(sub.problems, fmt.Sprintf("SubscribeAll delivered event %s (%s@%d) twice", e.ID, e.Stream, e.Revision))
		}
		sub.seen[e.ID] = true
		sub.events = append(sub.events, e)
	}
	select {
	case sub.changed <- struct{}{}:
	default:
	}
	return nil
}

// snapshot returns the own events delivered so far.
func (sub *subscriber) snapshot() []eventstore.RecordedEvent {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return append([]eventstore.RecordedEvent(nil), sub.events...)
}

// waitFor waits until n own events have been delivered and returns them. It
// fails t if the subscription ends or ctx is done first.
func (sub *subscriber) waitFor(t testing.TB, ctx context.Context, n int) []eventstore.RecordedEvent {
	t.Helper()
	for {
		got := sub.snapshot()
		if len(got) >= n {
			return got
		}
		select {
		case <-sub.changed:
		case err := <-sub.done:
			sub.done <- err
			t.Fatalf("SubscribeAll ended with %v after %d of %d events", err, len(got), n)
		case <-ctx.Done():
			t.Fatalf("SubscribeAll delivered %d of %d events before %v", len(got), n, ctx.Err())
		}
	}
}

// stop cancels the subscription and returns what SubscribeAll returned.
func (sub *subscriber) stop() error {
	sub.stopped.Do(func() {
		sub.cancel()
		sub.err = <-sub.done
	})
	return sub.err
}

func (sub *subscriber) check(t testing.TB) {
	t.Helper()
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for _, p := range sub.problems {
		t.Error(p)
	}
}

// prefixed returns a stream filter for the streams whose names start with
// run + "-".
func prefixed(run string) func(string) bool {
	return func(stream string) bool { return strings.HasPrefix(stream, run+"-") }
}

// checkStreamOrder fails t unless the events of each stream come in
// consecutive revision order from first[stream] (0 when absent).
func checkStreamOrder(t testing.TB, events []eventstore.RecordedEvent, first map[string]eventstore.Revision) {
	t.Helper()
	next := map[string]eventstore.Revision{}
	for s, r := range first {
		next[s] = r
	}
	for _, e := range events {
		if e.Revision != next[e.Stream] {
			t.Errorf("event %s of %s has revision %d, want %d (revision order)", e.ID, e.Stream, e.Revision, next[e.Stream])
		}
		next[e.Stream] = e.Revision + 1
	}
}

// holdOpener returns s as a HoldOpener, or skips t with the reason the
// backend gives (HoldOpenUnsupported).
func holdOpener(t *testing.T, s eventstore.Store) HoldOpener {
	t.Helper()
	if h, ok := s.(HoldOpener); ok {
		return h
	}
	if u, ok := s.(HoldOpenUnsupported); ok {
		t.Skip("the backend cannot hold an append open: " + u.HoldOpenUnsupported())
	}
	t.Skip("the store does not implement storetest.HoldOpener")
	return nil
}

// watchNew starts a case that watches the log: it returns the case's
// context, a new run name (streams prefixed run- belong to the case), the
// filter of those streams, the head at the start, and a subscriber to the
// case's streams from that head.
func watchNew(t *testing.T, s eventstore.Store, prefix string) (ctx context.Context, run string, own func(string) bool, start eventstore.Position, sub *subscriber) {
	t.Helper()
	ctx = testContext(t)
	run = newStream(prefix)
	own = prefixed(run)
	start = mustHead(t, ctx, s)
	return ctx, run, own, start, subscribe(t, ctx, s, start, own)
}

func testHeldOpenCommit(t *testing.T, s eventstore.Store) {
	h := holdOpener(t, s)
	ctx, run, own, start, sub := watchNew(t, s, "held")

	pre := newEvents(t, "Before", 1)
	MustAppend(t, ctx, s, run+"-pre", eventstore.NoStream(), pre...)
	prePos := sub.waitFor(t, ctx, 1)[0].Position

	held := newEvents(t, "Held", 2)
	commit, abort, err := h.HoldOpenAppend(ctx, run+"-held", eventstore.NoStream(), held...)
	if err != nil {
		t.Fatalf("HoldOpenAppend(%s-held, no_stream) = %v, want nil", run, err)
	}
	defer abort()

	// Later appends commit while the held transaction is still open.
	const appenders, perAppender = 4, 5
	appendLaterStreams(t, ctx, s, run, appenders, perAppender)
	checkHiddenBehind(t, ctx, s, run, prePos, own, sub, perAppender)

	res, err := commit(ctx)
	if err != nil {
		t.Fatalf("commit of the held append = %v, want nil", err)
	}
	MustAppend(t, ctx, s, run+"-post", eventstore.NoStream(), newEvents(t, "After", 1)...)

	total := 1 + len(held) + appenders*perAppender + 1
	delivered := sub.waitFor(t, ctx, total)
	if len(delivered) != total {
		t.Fatalf("SubscribeAll delivered %d events, want %d", len(delivered), total)
	}
	fromAll := readOwn(t, ctx, s, start, 1000, own, total)
	if diff := cmp.Diff(fromAll, delivered); diff != "" {
		t.Errorf("SubscribeAll and ReadAll disagree (-ReadAll +SubscribeAll):\n%s", diff)
	}
	wantFirst := append(IDs(pre), IDs(held)...)
	if diff := cmp.Diff(wantFirst, IDs(delivered[:3])); diff != "" {
		t.Errorf("SubscribeAll first events mismatch (-want +got): the held append began first, so it comes first\n%s", diff)
	}
	if want := (eventstore.AppendResult{NextRevision: 1, Position: delivered[2].Position}); withoutNow(res) != want {
		t.Errorf("commit of the held append = %+v, want %+v", res, want)
	}
	checkStreamOrder(t, delivered, nil)
}

// appendLaterStreams appends perAppender events to each of the streams
// RUN-later-0 … RUN-later-(appenders-1), the streams concurrently, and
// fails t on any error.
func appendLaterStreams(t *testing.T, ctx context.Context, s eventstore.Store, run string, appenders, perAppender int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, appenders*perAppender)
	for i := range appenders {
		wg.Go(func() {
			stream := fmt.Sprintf("%s-later-%d", run, i)
			for j := range perAppender {
				expected := eventstore.NoStream()
				if j > 0 {
					expected = eventstore.Exact(eventstore.Revision(j - 1))
				}
				if _, err := s.Append(ctx, stream, expected, newEvents(t, "Later", 1)...); err != nil {
					errs <- fmt.Errorf("Append(%s, %s) = %w, want nil", stream, expected, err)
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

// checkHiddenBehind checks what a held-open append before them does to the
// later appends (appendLaterStreams): they are committed and stream reads see
// them, but neither ReadAll after prePos nor the subscription sub shows
// them, and the head stays at or after prePos.
func checkHiddenBehind(t *testing.T, ctx context.Context, s eventstore.Store, run string, prePos eventstore.Position,
	own func(string) bool, sub *subscriber, perAppender int) {
	t.Helper()
	if got := mustReadStream(t, ctx, s, run+"-later-0"); len(got) != perAppender {
		t.Fatalf("ReadStream(%s-later-0) = %d events, want %d", run, len(got), perAppender)
	}
	// The log must not show them while an earlier append may still commit
	// before them.
	page, err := s.ReadAll(ctx, prePos, 1000)
	if err != nil {
		t.Fatalf("ReadAll(%s, 1000) = %v, want nil", prePos, err)
	}
	for _, e := range page {
		if own(e.Stream) {
			t.Fatalf("ReadAll(%s, 1000) returned %s@%d while an earlier append was uncommitted, want none of this test's events", prePos, e.Stream, e.Revision)
		}
	}
	if head := mustHead(t, ctx, s); head.Less(prePos) {
		t.Fatalf("Head() = %s, want at or after %s", head, prePos)
	}
	// Give the subscriber, already woken by the appends, time to misbehave.
	time.Sleep(50 * time.Millisecond)
	if got := sub.snapshot(); len(got) != 1 {
		t.Fatalf("SubscribeAll delivered %d events while an earlier append was uncommitted, want 1 (%v)", len(got), IDs(got))
	}
}

func testHeldOpenAbort(t *testing.T, s eventstore.Store) {
	h := holdOpener(t, s)
	ctx, run, _, _, sub := watchNew(t, s, "aborted")

	_, abort, err := h.HoldOpenAppend(ctx, run+"-held", eventstore.NoStream(), newEvents(t, "Held", 2)...)
	if err != nil {
		t.Fatalf("HoldOpenAppend(%s-held, no_stream) = %v, want nil", run, err)
	}
	later := newEvents(t, "Later", 3)
	MustAppend(t, ctx, s, run+"-later", eventstore.NoStream(), later...)
	abort()

	delivered := sub.waitFor(t, ctx, len(later))
	if diff := cmp.Diff(IDs(later), IDs(delivered)); diff != "" {
		t.Errorf("SubscribeAll events mismatch (-want +got):\n%s", diff)
	}
	if got, err := s.ReadStream(ctx, run+"-held", 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Errorf("ReadStream(%s-held) after abort = %d events, %v, want ErrStreamNotFound", run, len(got), err)
	}
	MustAppend(t, ctx, s, run+"-held", eventstore.NoStream(), newEvents(t, "Again", 1)...)
	sub.waitFor(t, ctx, len(later)+1)
}

var errStop = errors.New("storetest: stop here")

func testResume(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	run := newStream("resume")
	own := prefixed(run)
	stream := run + "-s"
	start := mustHead(t, ctx, s)
	var all []eventstore.EventData
	for i := range 5 {
		events := newEvents(t, "Resumed", 2)
		expected := eventstore.NoStream()
		if i > 0 {
			expected = eventstore.Exact(eventstore.Revision(2*i - 1))
		}
		MustAppend(t, ctx, s, stream, expected, events...)
		all = append(all, events...)
	}

	// The first subscriber handles 4 events, checkpointing each, then fails
	// in the middle of a batch.
	var (
		handled    []eventstore.RecordedEvent
		checkpoint = start
	)
	err := s.SubscribeAll(ctx, start, func(_ context.Context, batch []eventstore.RecordedEvent) error {
		for _, e := range batch {
			if own(e.Stream) {
				if len(handled) == 4 {
					return errStop
				}
				handled = append(handled, e)
			}
			checkpoint = e.Position
		}
		return nil
	})
	if err != errStop {
		t.Fatalf("SubscribeAll(%s) = %v, want fn's error as is", start, err)
	}

	more := newEvents(t, "Resumed", 5)
	MustAppend(t, ctx, s, stream, eventstore.Exact(9), more...)
	all = append(all, more...)

	sub := subscribe(t, ctx, s, checkpoint, own)
	rest := sub.waitFor(t, ctx, len(all)-len(handled))
	got := append(handled, rest...)
	if diff := cmp.Diff(IDs(all), IDs(got)); diff != "" {
		t.Errorf("events handled before and after resuming mismatch (-want +got):\n%s", diff)
	}
	checkStreamOrder(t, got, nil)
}

func testSubscribeCancel(t *testing.T, s eventstore.Store) {
	ctx, run, _, start, sub := watchNew(t, s, "cancel")
	MustAppend(t, ctx, s, run+"-s", eventstore.NoStream(), newEvents(t, "Live", 1)...)
	sub.waitFor(t, ctx, 1)

	stopped := make(chan error, 1)
	go func() { stopped <- sub.stop() }()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("SubscribeAll(%s) after cancel = %v, want context.Canceled", start, err)
		}
	case <-ctx.Done():
		t.Fatalf("SubscribeAll(%s) did not return after its context was cancelled", start)
	}
}

func testManyAppenders(t *testing.T, s eventstore.Store) {
	const (
		appenders   = 8
		perAppender = 200
		streams     = 16
	)
	ctx, run, own, start, sub := watchNew(t, s, "many")

	// Every appender appends single events to all streams in turn, with Any,
	// so appenders contend on each stream and revisions interleave.
	var (
		mu      sync.Mutex
		results = map[string]eventstore.AppendResult{} // by event id
		wg      sync.WaitGroup
	)
	errs := make(chan error, appenders)
	for a := range appenders {
		wg.Go(func() {
			for i := range perAppender {
				stream := fmt.Sprintf("%s-%d", run, (a+i)%streams)
				event := newEvents(t, "Many", 1)
				res, err := s.Append(ctx, stream, eventstore.Any(), event...)
				if err != nil {
					errs <- fmt.Errorf("Append(%s, any) = %w, want nil", stream, err)
					return
				}
				mu.Lock()
				results[event[0].ID] = res
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	total := appenders * perAppender
	delivered := sub.waitFor(t, ctx, total)
	if len(delivered) != total {
		t.Fatalf("SubscribeAll delivered %d events, want %d", len(delivered), total)
	}
	checkStreamOrder(t, delivered, nil)
	for _, e := range delivered {
		res, ok := results[e.ID]
		if !ok {
			t.Fatalf("SubscribeAll delivered event %s that no append returned", e.ID)
		}
		if want := (eventstore.AppendResult{NextRevision: e.Revision, Position: e.Position}); withoutNow(res) != want {
			t.Errorf("Append of event %s = %+v, want %+v as delivered", e.ID, res, want)
		}
	}
	fromAll := readOwn(t, ctx, s, start, 500, own, total)
	if diff := cmp.Diff(IDs(fromAll), IDs(delivered)); diff != "" {
		t.Errorf("SubscribeAll and ReadAll order disagree (-ReadAll +SubscribeAll):\n%s", diff)
	}
}
