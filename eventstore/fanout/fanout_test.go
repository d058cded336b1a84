package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/memstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/eventstore/storetest"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// memLog is a fanout.Log over a memstore, which cannot hold an append open.
type memLog struct{ *fanout.Log }

func (memLog) HoldOpenUnsupported() string {
	return "memstore has no transactions (see the memstore conformance test)"
}

// TestConformanceOverMemstore runs the store conformance suite through one
// Log shared by every case, with a window of 16 events, so the cases'
// subscriptions are served from memory, fall behind it and catch up.
func TestConformanceOverMemstore(t *testing.T) {
	l := memLog{fanout.New(memstore.New(), fanout.Config{MaxEvents: 16, BatchSize: 5})}
	storetest.Run(t, func(t *testing.T) eventstore.Store { return l }, storetest.WithoutClock()) // a memstore without SetClock has no shared clock
}

// counting wraps a store and counts its subscriptions and reads.
type counting struct {
	eventstore.Store
	subscribes, active, readAlls atomic.Int64
	// failAfter, when > 0, makes each of the first failures subscriptions
	// fail after delivering failAfter batches.
	failAfter int
	failures  atomic.Int64
}

var errInjected = errors.New("injected subscription failure")

func (c *counting) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(context.Context, []eventstore.RecordedEvent) error) error {
	c.subscribes.Add(1)
	c.active.Add(1)
	defer c.active.Add(-1)
	fail := c.failAfter > 0 && c.failures.Add(1) <= 2
	batches := 0
	err := c.Store.SubscribeAll(ctx, after, func(ctx context.Context, batch []eventstore.RecordedEvent) error {
		if fail && batches == c.failAfter {
			return errInjected
		}
		batches++
		return fn(ctx, batch)
	})
	return err
}

func (c *counting) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	c.readAlls.Add(1)
	return c.Store.ReadAll(ctx, after, limit)
}

// consumer collects what one SubscribeAll delivers and checks the order.
type consumer struct {
	mu       sync.Mutex
	got      []string
	last     eventstore.Position
	problems []string
	done     chan error
	cancel   context.CancelFunc
}

// consume subscribes to l after after; gate, if not nil, is called before
// each batch (a slow consumer blocks in it).
func consume(ctx context.Context, l eventstore.Store, after eventstore.Position, gate func()) *consumer {
	ctx, cancel := context.WithCancel(ctx)
	c := &consumer{last: after, done: make(chan error, 1), cancel: cancel}
	go func() {
		c.done <- l.SubscribeAll(ctx, after, func(_ context.Context, batch []eventstore.RecordedEvent) error {
			if gate != nil {
				gate()
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(batch) == 0 {
				c.problems = append(c.problems, "empty batch")
			}
			for _, e := range batch {
				if !c.last.Less(e.Position) {
					c.problems = append(c.problems, fmt.Sprintf("position %s after %s", e.Position, c.last))
				}
				c.last = e.Position
				c.got = append(c.got, e.ID)
			}
			return nil
		})
	}()
	return c
}

func (c *consumer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// stop cancels the consumer and checks that SubscribeAll returned
// context.Canceled and that it received exactly want, in that order.
func (c *consumer) stop(t *testing.T, name string, want []string) {
	t.Helper()
	c.cancel()
	if err := <-c.done; !errors.Is(err, context.Canceled) {
		t.Errorf("%s: SubscribeAll = %v, want context.Canceled", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.problems {
		t.Errorf("%s: %s", name, p)
	}
	if diff := cmp.Diff(want, c.got); diff != "" {
		t.Errorf("%s: delivered events differ from the log (-log +delivered):\n%s", name, diff)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newEvent(i int) eventstore.EventData {
	return eventstore.EventData{ID: uuid.Must(uuid.NewV7()).String(), Type: "Tested", Data: fmt.Appendf(nil, `{"i":%d}`, i)}
}

// appendConcurrently appends n events from w writers to their own streams.
func appendConcurrently(t *testing.T, ctx context.Context, s eventstore.Store, run string, w, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for k := range w {
		wg.Go(func() {
			for i := range n / w {
				if _, err := s.Append(ctx, fmt.Sprintf("%s-%d", run, k), eventstore.Any(), newEvent(i)); err != nil {
					t.Errorf("Append = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// readLog returns the ids of the log's events after after (ReadAll).
func readLog(t *testing.T, ctx context.Context, s eventstore.Store, after eventstore.Position) []string {
	t.Helper()
	var ids []string
	for {
		page, err := s.ReadAll(ctx, after, 1000)
		if err != nil {
			t.Fatalf("ReadAll = %v", err)
		}
		if len(page) == 0 {
			return ids
		}
		ids = append(ids, storetest.IDs(page)...)
		after = page[len(page)-1].Position
	}
}

// readLogWhole waits until the log's readable part holds n events after
// after, and returns their ids. On PostgreSQL ReadAll stops at the readable
// horizon, which any transaction still open on the server holds back —
// another package's test on the same throwaway server included — so events
// just appended may not be readable yet.
func readLogWhole(t *testing.T, ctx context.Context, s eventstore.Store, after eventstore.Position, n int) []string {
	t.Helper()
	var ids []string
	storetest.Eventually(t, ctx, func() error {
		if ids = readLog(t, ctx, s, after); len(ids) < n {
			return fmt.Errorf("the log's readable part holds %d of %d events", len(ids), n)
		}
		return nil
	})
	return ids
}

// waitCount waits until every consumer has n events.
func waitCount(t *testing.T, ctx context.Context, n int, cs ...*consumer) {
	t.Helper()
	storetest.Eventually(t, ctx, func() error {
		for i, c := range cs {
			if got := c.count(); got < n {
				return fmt.Errorf("consumer %d has %d of %d events", i, got, n)
			}
		}
		return nil
	})
}

// testOrderUnderConcurrentAppends: consumers started before, during and
// after concurrent appends — one at the start of the log, one in the
// middle, one blocked until the appends are done (so the window has moved
// past it) — each receive exactly the log after their position, in log
// order, while one subscription of the store serves them all.
func testOrderUnderConcurrentAppends(t *testing.T, store eventstore.Store) {
	ctx := testContext(t)
	under := &counting{Store: store}
	l := fanout.New(under, fanout.Config{MaxEvents: 40, BatchSize: 7})
	run := uuid.NewString()[:8]
	appendConcurrently(t, ctx, l, run+"a", 4, 100)
	readLogWhole(t, ctx, store, eventstore.Position{}, 100)
	mid, err := store.ReadAll(ctx, eventstore.Position{}, 50)
	if err != nil || len(mid) != 50 {
		t.Fatalf("ReadAll = %d events, %v; want 50", len(mid), err)
	}
	first := consume(ctx, l, eventstore.Position{}, nil)
	gate := make(chan struct{})
	slow := consume(ctx, l, eventstore.Position{}, func() { <-gate })
	middle := consume(ctx, l, mid[49].Position, nil)
	appendConcurrently(t, ctx, l, run+"b", 4, 400)
	close(gate)
	late := consume(ctx, l, eventstore.Position{}, nil)
	appendConcurrently(t, ctx, l, run+"c", 2, 100)
	want := readLogWhole(t, ctx, store, eventstore.Position{}, 100+400+100)
	waitCount(t, ctx, len(want), first, slow, late)
	waitCount(t, ctx, len(want)-50, middle)
	first.stop(t, "first", want)
	slow.stop(t, "slow", want)
	late.stop(t, "late", want)
	middle.stop(t, "middle", want[50:])
	st := l.Stats()
	if st.Subscriptions != 1 || under.subscribes.Load() != 1 {
		t.Errorf("store subscriptions = %d (Stats %d), want 1 for four consumers", under.subscribes.Load(), st.Subscriptions)
	}
	if st.CatchUpReads == 0 {
		t.Errorf("Stats = %+v: want catch-up reads (the slow and late consumers were behind the window)", st)
	}
	storetest.Eventually(t, ctx, func() error {
		if n := under.active.Load(); n != 0 {
			return fmt.Errorf("%d store subscriptions still running after the last consumer left", n)
		}
		return nil
	})
	t.Logf("%d events, 4 consumers: %+v; store ReadAll calls by consumers %d", len(want), st, under.readAlls.Load())
}

func TestOrderUnderConcurrentAppends_Memstore(t *testing.T) {
	testOrderUnderConcurrentAppends(t, memstore.New())
}

func TestOrderUnderConcurrentAppends_Pgstore(t *testing.T) {
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	testOrderUnderConcurrentAppends(t, pgstore.New(pool))
}

// TestCatchUpFromBehindTheWindow: a consumer whose position was evicted
// reads the store until it reaches the window, then is served from memory,
// and gets every event once, in order.
func TestCatchUpFromBehindTheWindow(t *testing.T) {
	ctx := testContext(t)
	store := memstore.New()
	under := &counting{Store: store}
	l := fanout.New(under, fanout.Config{MaxEvents: 10, BatchSize: 8})
	appendConcurrently(t, ctx, store, "s", 1, 100)
	a := consume(ctx, l, eventstore.Position{}, nil)
	waitCount(t, ctx, 100, a)
	b := consume(ctx, l, eventstore.Position{}, nil)
	waitCount(t, ctx, 100, b)
	reads := under.readAlls.Load()
	if reads == 0 {
		t.Fatalf("consumer b made no catch-up read, want it to read the store up to the window")
	}
	appendConcurrently(t, ctx, store, "t", 1, 5)
	want := readLog(t, ctx, store, eventstore.Position{})
	waitCount(t, ctx, 105, a, b)
	if got := under.readAlls.Load(); got != reads {
		t.Errorf("store ReadAll calls grew from %d to %d after b joined the window, want no more", reads, got)
	}
	a.stop(t, "a", want)
	b.stop(t, "b", want)
}

// TestConsumerErrorAndCancel: a consumer whose fn fails gets its error back
// as is; one cancelled gets context.Canceled; the others go on, and the
// store subscription stops with the last consumer and starts again with
// the next.
func TestConsumerErrorAndCancel(t *testing.T) {
	ctx := testContext(t)
	store := memstore.New()
	under := &counting{Store: store}
	l := fanout.New(under, fanout.Config{})
	if n := under.subscribes.Load(); n != 0 {
		t.Fatalf("store subscriptions before any consumer = %d, want 0 (lazy)", n)
	}
	appendConcurrently(t, ctx, store, "s", 1, 10)
	ok := consume(ctx, l, eventstore.Position{}, nil)
	waitCount(t, ctx, 10, ok)
	boom := errors.New("boom")
	if err := l.SubscribeAll(ctx, eventstore.Position{}, func(context.Context, []eventstore.RecordedEvent) error { return boom }); err != boom { //nolint:errorlint // returned as is
		t.Fatalf("SubscribeAll with a failing fn = %v, want the fn's error as is", err)
	}
	appendConcurrently(t, ctx, store, "t", 1, 3)
	waitCount(t, ctx, 13, ok)
	ok.stop(t, "ok", readLog(t, ctx, store, eventstore.Position{}))
	storetest.Eventually(t, ctx, func() error {
		if n := under.active.Load(); n != 0 {
			return fmt.Errorf("%d store subscriptions running with no consumer", n)
		}
		return nil
	})
	again := consume(ctx, l, eventstore.Position{}, nil)
	waitCount(t, ctx, 13, again)
	again.stop(t, "again", readLog(t, ctx, store, eventstore.Position{}))
	if n := under.subscribes.Load(); n != 2 {
		t.Errorf("store subscriptions = %d, want 2 (stopped with the last consumer, started with the next)", n)
	}
}

// TestRestartAfterSubscriptionError: a failing store subscription is
// restarted from the window's last event; consumers see no error, no gap
// and no repeat.
func TestRestartAfterSubscriptionError(t *testing.T) {
	ctx := testContext(t)
	store := memstore.New()
	under := &counting{Store: store, failAfter: 1}
	l := fanout.New(under, fanout.Config{BatchSize: 4, RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond})
	c := consume(ctx, l, eventstore.Position{}, nil)
	for i := range 5 {
		appendConcurrently(t, ctx, store, fmt.Sprintf("s%d", i), 1, 3)
		waitCount(t, ctx, 3*(i+1), c)
	}
	c.stop(t, "c", readLog(t, ctx, store, eventstore.Position{}))
	if n := l.Stats().Subscriptions; n < 3 {
		t.Errorf("Stats().Subscriptions = %d, want at least 3 (two injected failures)", n)
	}
}

// heldSubscription is a store whose subscription delivers nothing until
// release is closed (a shared subscription still reading a long backlog).
type heldSubscription struct {
	eventstore.Store
	release chan struct{}
}

func (h heldSubscription) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(context.Context, []eventstore.RecordedEvent) error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.release:
	}
	return h.Store.SubscribeAll(ctx, after, fn)
}

// TestConsumerAheadDoesNotWaitForTheSharedSubscription: the shared
// subscription starts at the first consumer's position (far back, say the
// expiry job); a consumer that joins later at the head of the log is served
// from the store while the shared subscription has not reached it, instead
// of waiting for it to read the whole backlog. Both still get exactly the
// log after their position, in order.
func TestConsumerAheadDoesNotWaitForTheSharedSubscription(t *testing.T) {
	ctx := testContext(t)
	ms := memstore.New()
	appendConcurrently(t, ctx, ms, "backlog", 1, 50)
	head, err := ms.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store := heldSubscription{Store: ms, release: make(chan struct{})}
	l := fanout.New(store, fanout.Config{MaxEvents: 16, BatchSize: 5})
	behind := consume(ctx, l, eventstore.Position{}, nil)
	storetest.Eventually(t, ctx, func() error { // the shared subscription started at 0
		if l.Stats().Subscriptions == 0 {
			return errors.New("no shared subscription yet")
		}
		return nil
	})
	ahead := consume(ctx, l, head, nil)
	appendConcurrently(t, ctx, ms, "new", 1, 3)
	waitCount(t, ctx, 3, ahead) // the shared subscription is still held
	if n := behind.count(); n != 0 {
		t.Fatalf("the consumer behind got %d events while the shared subscription was held, want 0", n)
	}
	close(store.release)
	waitCount(t, ctx, 53, behind)
	ahead.stop(t, "ahead", readLog(t, ctx, ms, head))
	behind.stop(t, "behind", readLog(t, ctx, ms, eventstore.Position{}))
}
