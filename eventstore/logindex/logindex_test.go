package logindex_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/domain/domaintest"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/logindex"
	"github.com/retrysafe/booking/eventstore/memstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/eventstore/storetest"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// backends are the stores the index is checked on: memstore, PostgreSQL
// (where truncation deletes the events), and the KurrentDB backend on its
// in-process server double (where truncation is logical: $all still
// returns the truncated events).
var backends = map[string]func(t *testing.T) eventstore.Store{
	"memstore": func(*testing.T) eventstore.Store { return memstore.New() },
	"postgres": func(t *testing.T) eventstore.Store { return pgstore.New(pgtest.NewPool(t, pgtest.NewDatabase(t))) },
	"kurrentdb": func(t *testing.T) eventstore.Store {
		_, s := startDouble(t)
		return s
	},
}

// startDouble starts a KurrentDB server double and the store on it, both
// stopped when t ends.
func startDouble(t *testing.T) (*kurrentdbtest.Server, *kurrentdb.Store) {
	t.Helper()
	srv, err := kurrentdbtest.Start("127.0.0.1:0", kurrentdbtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	s, err := kurrentdb.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return srv, s
}

// clock is a settable clock standing in for PostgreSQL's.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now(context.Context) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now, nil
}

// readable waits (up to a minute) until every event appended to s is one
// ReadAll returns, so an index sees it at its next call. On PostgreSQL
// ReadAll returns nothing above the readable horizon, which any write
// transaction still running on the server holds back (a parallel test's,
// in another database): the index answers up to it, as a log reader.
func readable(t *testing.T, s eventstore.Store) {
	t.Helper()
	pg, ok := s.(*pgstore.Store)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	storetest.Eventually(t, ctx, func() error {
		lag, err := pg.HorizonLag(ctx)
		if err == nil && lag.Events > 0 {
			err = fmt.Errorf("%d events above the readable horizon", lag.Events)
		}
		return err
	})
}

func appendEvents(t *testing.T, s eventstore.Store, stream string, at time.Time, evs ...domain.Event) {
	t.Helper()
	data := make([]eventstore.EventData, len(evs))
	for i, e := range evs {
		d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), e, eventstore.Metadata{OccurredAt: at})
		if err != nil {
			t.Fatal(err)
		}
		data[i] = d
	}
	if _, err := s.Append(context.Background(), stream, eventstore.Any(), data...); err != nil {
		t.Fatal(err)
	}
}

// TestPendingOrders pages through the orders the reconciler must visit
// (orders without an ending event, refunds still due, payments waiting for
// the customer's action to cancel) and sees orders appended after the
// first call.
func TestPendingOrders(t *testing.T) {
	for name, newStore := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := context.Background()
			money := domain.Money{Amount: 100, Currency: "EUR"}
			placed := func(id string) domain.Event {
				return domain.OrderPlaced{OrderID: id, Amount: money, PaymentDeadline: time.Now().Add(time.Hour)}
			}
			orders := map[string][]domain.Event{
				"00000000-0000-7000-8000-000000000001": {placed("1")},
				"00000000-0000-7000-8000-000000000002": {placed("2"), domain.OrderConfirmed{}},
				"00000000-0000-7000-8000-000000000003": {placed("3"), domain.OrderCancelRequested{}},
				"00000000-0000-7000-8000-000000000004": {placed("4"), domain.OrderFailed{}, domain.RefundRequested{ChargeID: "ch"}},
				"00000000-0000-7000-8000-000000000005": {placed("5"), domain.OrderFailed{}, domain.RefundRequested{ChargeID: "ch"}, domain.RefundSucceeded{ChargeID: "ch"}},
				"00000000-0000-7000-8000-000000000006": {placed("6"), domain.OrderNeedsReview{}},
				"00000000-0000-7000-8000-000000000007": {placed("7"), domain.OrderCancelled{}, domain.RefundRequested{ChargeID: "ch"},
					domain.RefundRefused{ChargeID: "ch"}, domain.OrderNeedsReview{}},
				"00000000-0000-7000-8000-000000000008": {placed("8"), domain.OrderCancelled{}, domain.RefundRequested{ChargeID: "ch1"},
					domain.RefundRefused{ChargeID: "ch1"}, domain.OrderNeedsReview{}, domain.RefundSucceeded{ChargeID: "ch1"},
					domain.RefundRequested{ChargeID: "ch2"}},
				"00000000-0000-7000-8000-00000000000a": {placed("a"), domain.PaymentActionRequired{PaymentID: "pi1"}, domain.OrderFailed{}},
				"00000000-0000-7000-8000-00000000000b": {placed("b"), domain.PaymentActionRequired{PaymentID: "pi1"}, domain.OrderFailed{},
					domain.PaymentFailed{ChargeID: "pi1"}},
				"00000000-0000-7000-8000-00000000000c": {placed("c"), domain.PaymentActionRequired{PaymentID: "pi1"}, domain.PaymentSucceeded{ChargeID: "pi1"},
					domain.OrderConfirmed{}, domain.PaymentFailed{}},
			}
			for id, evs := range orders {
				appendEvents(t, s, domain.OrderStream(id), time.Now(), evs...)
			}
			appendEvents(t, s, domain.ClaimStream("00000000-0000-7000-8000-000000000009"), time.Now(), domain.OrderClaimed{})
			readable(t, s)
			ix := logindex.New(s, &clock{now: time.Now()}, domaintest.OrderRule(), domain.CategoryIntent)
			pages := func() []string {
				var got []string
				after := ""
				for {
					page, err := ix.Pending(ctx, after, 2)
					if err != nil {
						t.Fatalf("PendingOrders: %v", err)
					}
					got = append(got, page...)
					if len(page) < 2 {
						return got
					}
					after = page[len(page)-1]
				}
			}
			want := []string{"00000000-0000-7000-8000-000000000001", "00000000-0000-7000-8000-000000000003",
				"00000000-0000-7000-8000-000000000004", "00000000-0000-7000-8000-000000000008", "00000000-0000-7000-8000-00000000000a"}
			if got := pages(); !cmp.Equal(want, got) || !slices.IsSorted(got) {
				t.Errorf("PendingOrders pages (-want +got):\n%s", cmp.Diff(want, got))
			}
			// Later appends are seen by the next call: order 1 ends, order 0 starts.
			appendEvents(t, s, domain.OrderStream("00000000-0000-7000-8000-000000000001"), time.Now(), domain.OrderConfirmed{})
			appendEvents(t, s, domain.OrderStream("00000000-0000-7000-8000-000000000000"), time.Now(), placed("0"))
			readable(t, s)
			want = []string{"00000000-0000-7000-8000-000000000000", "00000000-0000-7000-8000-000000000003",
				"00000000-0000-7000-8000-000000000004", "00000000-0000-7000-8000-000000000008", "00000000-0000-7000-8000-00000000000a"}
			if got := pages(); !cmp.Equal(want, got) {
				t.Errorf("PendingOrders after more appends (-want +got):\n%s", cmp.Diff(want, got))
			}
		})
	}
}

// TestPurgeStreams truncates exactly the intent streams whose first live
// event occurred (metadata occurred_at, by the given clock) more than the
// age ago, keeps their last revision, and after a restart of the index
// (which reads the truncated events again where $all still has them)
// purges nothing twice.
func TestPurgeStreams(t *testing.T) {
	for name, newStore := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := context.Background()
			now := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
			c := &clock{now: now}
			oldAt, newAt := now.Add(-2*time.Hour), now.Add(-time.Minute)
			appendEvents(t, s, "intent-old1", oldAt, domain.OrderConfirmed{}, domain.OrderConfirmed{})
			appendEvents(t, s, "intent-old2", oldAt, domain.OrderConfirmed{})
			appendEvents(t, s, "intent-new", newAt, domain.OrderConfirmed{})
			// The store's own timestamps (recorded now, by its host clock) do not count:
			// an event with no occurred_at is never judged old.
			appendEvents(t, s, "intent-undated", time.Time{}, domain.OrderConfirmed{})
			appendEvents(t, s, "order-old", oldAt, domain.OrderConfirmed{})
			readable(t, s)
			ix := logindex.New(s, c, domaintest.OrderRule(), domain.CategoryIntent)
			if n, err := ix.EventCount(ctx); err != nil || n != 6 {
				t.Fatalf("EventCount() = %d, %v; want 6", n, err)
			}
			if n, err := ix.PurgeStreams(ctx, "intent-", time.Hour, 1); err != nil || n != 1 {
				t.Fatalf("PurgeStreams(limit 1) = %d, %v; want 1", n, err)
			}
			if n, err := ix.PurgeStreams(ctx, "intent-", time.Hour, 10); err != nil || n != 1 {
				t.Fatalf("PurgeStreams(limit 10) = %d, %v; want the other old intent", n, err)
			}
			if n, err := ix.PurgeStreams(ctx, "intent-", time.Hour, 10); err != nil || n != 0 {
				t.Fatalf("PurgeStreams again = %d, %v; want 0", n, err)
			}
			if _, err := ix.PurgeStreams(ctx, "order-", time.Hour, 10); err == nil {
				t.Errorf("PurgeStreams(order-) succeeded; want an error (only intents are indexed)")
			}
			for stream, want := range map[string]int{"intent-old1": 0, "intent-old2": 0, "intent-new": 1, "intent-undated": 1, "order-old": 1} {
				evs, err := s.ReadStream(ctx, stream, 0, 10)
				if want == 0 && errors.Is(err, eventstore.ErrStreamNotFound) {
					continue
				}
				if err != nil || len(evs) != want {
					t.Errorf("ReadStream(%s) = %d events, %v; want %d", stream, len(evs), err, want)
				}
			}
			// A new intent on a purged key continues at its last revision and
			// is judged by its own age; a fresh index purges nothing twice.
			d, _ := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), domain.OrderConfirmed{}, eventstore.Metadata{OccurredAt: newAt})
			if _, err := s.Append(ctx, "intent-old1", eventstore.Exact(1), d); err != nil {
				t.Fatalf("Append(intent-old1, Exact(1)) after the purge = %v", err)
			}
			readable(t, s)
			ix = logindex.New(s, c, domaintest.OrderRule(), domain.CategoryIntent)
			if n, err := ix.PurgeStreams(ctx, "intent-", time.Hour, 10); err != nil || n != 0 {
				t.Fatalf("PurgeStreams on a fresh index = %d, %v; want 0", n, err)
			}
			c.mu.Lock()
			c.now = now.Add(2 * time.Hour)
			c.mu.Unlock()
			if n, err := ix.PurgeStreams(ctx, "intent-", time.Hour, 10); err != nil || n != 2 {
				t.Fatalf("PurgeStreams two hours later = %d, %v; want 2 (intent-new and the new intent-old1)", n, err)
			}
			if _, err := s.ReadStream(ctx, "intent-old1", 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
				t.Errorf("ReadStream(intent-old1) after the second purge = %v; want ErrStreamNotFound", err)
			}
		})
	}
}

// memSnapshots keeps one snapshot in memory.
type memSnapshots struct {
	mu    sync.Mutex
	b     []byte
	saves int
}

func (m *memSnapshots) Load(context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.b, nil
}

func (m *memSnapshots) Save(_ context.Context, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.b, m.saves = append([]byte(nil), b...), m.saves+1
	return nil
}

// countingStore counts the events ReadAll hands out.
type countingStore struct {
	eventstore.Store
	mu   sync.Mutex
	read int
}

func (c *countingStore) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	evs, err := c.Store.ReadAll(ctx, after, limit)
	c.mu.Lock()
	c.read += len(evs)
	c.mu.Unlock()
	return evs, err
}

func (c *countingStore) events() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read
}

// TestBoundedPast100kOrders: over a log of 120,000 orders, of which 120
// stay open and 120 end with a refund owed, the index tracks exactly those
// 240 and answers them; the rest, ended with nothing owed, cost nothing.
// After a restart it answers from its snapshot, reading only the events
// written since; a refund requested later for an evicted order brings it
// back.
func TestBoundedPast100kOrders(t *testing.T) {
	const orders = 120_000
	ctx := context.Background()
	s := memstore.New()
	money := domain.Money{Amount: 100, Currency: "EUR"}
	var want []string
	at := time.Now()
	for i := range orders {
		id := fmt.Sprintf("00000000-0000-7000-8000-%012d", i)
		evs := []domain.Event{domain.OrderPlaced{OrderID: id, Amount: money, PaymentDeadline: at}}
		switch {
		case i%1000 == 0: // open
			want = append(want, id)
		case i%1000 == 500: // ended, refund owed
			evs = append(evs, domain.OrderFailed{}, domain.RefundRequested{ChargeID: "ch-" + id})
			want = append(want, id)
		case i%2 == 0:
			evs = append(evs, domain.OrderConfirmed{})
		default:
			evs = append(evs, domain.OrderCancelled{}, domain.RefundRequested{ChargeID: "ch"}, domain.RefundSucceeded{ChargeID: "ch"})
		}
		appendEvents(t, s, domain.OrderStream(id), at, evs...)
	}
	snaps := &memSnapshots{}
	ix := logindex.New(s, &clock{now: at}, domaintest.OrderRule(), domain.CategoryIntent, logindex.WithSnapshots(snaps, 0))
	all := func(ix *logindex.Index) []string {
		t.Helper()
		got, err := ix.Pending(ctx, "", orders)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := all(ix); !cmp.Equal(want, got) {
		t.Fatalf("PendingOrders = %d ids, want the %d open or owed (diff %s)", len(got), len(want), cmp.Diff(want, got))
	}
	if n, _, err := ix.Tracked(ctx); err != nil || n != len(want) {
		t.Fatalf("Tracked() = %d orders, %v; want %d (only the pending ones)", n, err, len(want))
	}
	if snaps.saves == 0 {
		t.Fatalf("no snapshot saved after %d orders", orders)
	}
	if err := ix.Save(ctx); err != nil {
		t.Fatal(err)
	}

	// A restart: a new index on the same log and snapshots. Meanwhile an
	// open order ends and an evicted one gets a refund requested.
	appendEvents(t, s, domain.OrderStream(want[0]), at, domain.OrderConfirmed{})
	evicted := fmt.Sprintf("00000000-0000-7000-8000-%012d", 2)
	appendEvents(t, s, domain.OrderStream(evicted), at, domain.RefundRequested{ChargeID: "late"})
	counting := &countingStore{Store: s}
	restarted := logindex.New(counting, &clock{now: at}, domaintest.OrderRule(), domain.CategoryIntent, logindex.WithSnapshots(snaps, 0))
	wantAfter := append([]string{evicted}, want[1:]...)
	sort.Strings(wantAfter)
	if got := all(restarted); !cmp.Equal(wantAfter, got) {
		t.Errorf("PendingOrders after the restart (-want +got):\n%s", cmp.Diff(wantAfter, got))
	}
	if n := counting.events(); n > 10 {
		t.Errorf("the restarted index read %d events of the log, want only the 3 after its snapshot (and the check of one)", n)
	}
	if n, err := restarted.EventCount(ctx); err != nil || n < 2*orders {
		t.Errorf("EventCount() after the restart = %d, %v; want the whole log's", n, err)
	}
	// A snapshot of another log is not used.
	other := memstore.New()
	appendEvents(t, other, domain.OrderStream(want[1]), at, domain.OrderPlaced{OrderID: want[1], Amount: money, PaymentDeadline: at})
	if got := all(logindex.New(other, &clock{now: at}, domaintest.OrderRule(), domain.CategoryIntent, logindex.WithSnapshots(snaps, 0))); !cmp.Equal([]string{want[1]}, got) {
		t.Errorf("PendingOrders on another log with this snapshot = %d ids, want only its own order", len(got))
	}
}

// TestSnapshotOfAnotherRule: a snapshot holds the decisions of the rule it
// was taken under (the orders it evicted as ended with nothing owed), so an
// index with another rule — a release that changes the ending types or the
// obligations — does not use it and reads the whole log: the orders the new
// rule calls pending are listed, as the query of the whole log lists them.
func TestSnapshotOfAnotherRule(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	at := time.Now()
	money := domain.Money{Amount: 100, Currency: "EUR"}
	review, refund := "00000000-0000-7000-8000-000000000001", "00000000-0000-7000-8000-000000000002"
	appendEvents(t, s, domain.OrderStream(review), at,
		domain.OrderPlaced{OrderID: review, Amount: money, PaymentDeadline: at}, domain.OrderNeedsReview{})
	appendEvents(t, s, domain.OrderStream(refund), at,
		domain.OrderPlaced{OrderID: refund, Amount: money, PaymentDeadline: at}, domain.OrderConfirmed{}, domain.RefundRequested{ChargeID: "ch"})
	old := domaintest.OrderRule()
	old.Owed = nil
	snaps := &memSnapshots{}
	ix := logindex.New(s, &clock{now: at}, old, "", logindex.WithSnapshots(snaps, 0))
	if got, err := ix.Pending(ctx, "", 10); err != nil || len(got) != 0 {
		t.Fatalf("Pending under the old rule = %v, %v; want none", got, err)
	}
	if err := ix.Save(ctx); err != nil {
		t.Fatal(err)
	}
	// The new rule: an order in review is visited again, refunds are owed.
	rule := domaintest.OrderRule()
	rule.Ends = slices.DeleteFunc(slices.Clone(rule.Ends), func(typ string) bool { return typ == domain.TypeOrderNeedsReview })
	restarted := logindex.New(s, &clock{now: at}, rule, "", logindex.WithSnapshots(snaps, 0))
	got, err := restarted.Pending(ctx, "", 10)
	if want := []string{review, refund}; err != nil || !cmp.Equal(want, got) {
		t.Errorf("Pending under the new rule after a restart from the old rule's snapshot = %v, %v; want %v", got, err, want)
	}
}

// flakySnapshots fails the first Load, then loads from the snapshots it
// wraps.
type flakySnapshots struct {
	*memSnapshots
	failed bool
}

func (f *flakySnapshots) Load(ctx context.Context) ([]byte, error) {
	if !f.failed {
		f.failed = true
		return nil, errors.New("connection reset")
	}
	return f.memSnapshots.Load(ctx)
}

// TestSnapshotLoadRetried: a first call whose snapshot cannot be loaded
// fails, and the next call loads it and reads only the log after it, not
// the whole log.
func TestSnapshotLoadRetried(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	at := time.Now()
	money := domain.Money{Amount: 100, Currency: "EUR"}
	var want []string
	for i := range 50 {
		id := fmt.Sprintf("00000000-0000-7000-8000-%012d", i)
		evs := []domain.Event{domain.OrderPlaced{OrderID: id, Amount: money, PaymentDeadline: at}}
		if i%10 == 0 {
			want = append(want, id)
		} else {
			evs = append(evs, domain.OrderConfirmed{})
		}
		appendEvents(t, s, domain.OrderStream(id), at, evs...)
	}
	snaps := &memSnapshots{}
	ix := logindex.New(s, &clock{now: at}, domaintest.OrderRule(), "", logindex.WithSnapshots(snaps, 0))
	if _, err := ix.Pending(ctx, "", 100); err != nil {
		t.Fatal(err)
	}
	if err := ix.Save(ctx); err != nil {
		t.Fatal(err)
	}
	counting := &countingStore{Store: s}
	restarted := logindex.New(counting, &clock{now: at}, domaintest.OrderRule(), "", logindex.WithSnapshots(&flakySnapshots{memSnapshots: snaps}, 0))
	if _, err := restarted.Pending(ctx, "", 100); err == nil {
		t.Fatal("Pending with the snapshot's load failing = nil error; want the load's error")
	}
	got, err := restarted.Pending(ctx, "", 100)
	if err != nil || !cmp.Equal(want, got) {
		t.Fatalf("Pending after the failed load = %v, %v; want %v", got, err, want)
	}
	if n := counting.events(); n > 1 {
		t.Errorf("the index read %d events of the log after its snapshot's load failed once, want only the check of one (the snapshot's)", n)
	}
}

// TestFollow: an index that follows the log through the shared log reader
// (fanout.Log, as the service wires it) answers as one that reads the whole
// log at one call: first while the reader's batches are held back and the
// index's calls read ahead of it (so the reader then delivers events the
// index has applied already), then while orders are placed, ended and
// refunded concurrently with its calls; once the reader delivered the last
// event, a call reads no event from the store (one without the follower
// reads every event).
func TestFollow(t *testing.T) {
	for name, newStore := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			at := time.Now()
			counting := &countingStore{Store: s}
			ix := logindex.New(counting, &clock{now: at}, domaintest.OrderRule(), domain.CategoryIntent)
			sub := newSwitchGate(fanout.New(s, fanout.Config{BatchSize: 7}))
			sub.set(false)
			var following sync.WaitGroup
			following.Go(func() {
				if err := ix.Follow(ctx, sub); !errors.Is(err, context.Canceled) {
					t.Errorf("Follow returned %v, want context.Canceled", err)
				}
			})
			defer following.Wait()
			defer cancel()
			waitCtx, stopWaiting := context.WithTimeout(ctx, time.Minute)
			defer stopWaiting()
			storetest.Eventually(t, waitCtx, func() error { return sub.reached(eventstore.Position{}) })
			money := domain.Money{Amount: 100, Currency: "EUR"}
			var last eventstore.Position
			for i := range 60 {
				if i == 30 {
					sub.set(true)
				}
				id := fmt.Sprintf("00000000-0000-7000-8000-%012d", i)
				evs := []domain.Event{domain.OrderPlaced{OrderID: id, Amount: money, PaymentDeadline: at}}
				switch i % 3 {
				case 1:
					evs = append(evs, domain.OrderConfirmed{})
				case 2:
					evs = append(evs, domain.OrderFailed{}, domain.RefundRequested{ChargeID: "ch"})
				}
				last = appendAt(t, s, domain.OrderStream(id), at, evs...)
				if i%10 == 9 {
					readable(t, s)
					if _, err := ix.Pending(ctx, "", 100); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A refund requested for an order the index evicted.
			last = appendAt(t, s, domain.OrderStream("00000000-0000-7000-8000-000000000001"), at, domain.RefundRequested{ChargeID: "ch"})
			readable(t, s)
			storetest.Eventually(t, waitCtx, func() error { return sub.reached(last) })
			before := counting.events()
			got, err := ix.Pending(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			if n := counting.events() - before; n != 0 {
				t.Errorf("Pending read %d events from the store after the reader delivered them all, want 0", n)
			}
			fresh := &countingStore{Store: s}
			want, err := logindex.New(fresh, &clock{now: at}, domaintest.OrderRule(), domain.CategoryIntent).Pending(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			if !cmp.Equal(want, got) || len(want) != 41 {
				t.Errorf("Pending of the following index (-reading the whole log +following), %d orders:\n%s", len(want), cmp.Diff(want, got))
			}
			if n := fresh.events(); n != 121 {
				t.Errorf("an index without a follower read %d events, want all 121", n)
			}
			if n, err := ix.EventCount(ctx); err != nil || n != 121 {
				t.Errorf("EventCount of the following index = %d, %v; want 121 (each event counted once)", n, err)
			}
		})
	}
}

// appendAt appends evs to stream and returns the position of the last.
func appendAt(t *testing.T, s eventstore.Store, stream string, at time.Time, evs ...domain.Event) eventstore.Position {
	t.Helper()
	appendEvents(t, s, stream, at, evs...)
	got, err := s.ReadStream(context.Background(), stream, 0, 0)
	if err != nil || len(got) == 0 {
		t.Fatalf("ReadStream(%s) = %d events, %v", stream, len(got), err)
	}
	return got[len(got)-1].Position
}
