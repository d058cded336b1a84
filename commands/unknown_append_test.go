package commands

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// lossyStore is a memStore whose armed appends lose their answer: the
// append of a matching stream (by prefix) and first event type either
// commits (commit) or not, and the caller gets an error of unknown outcome,
// as pgstore returns when the connection drops before the result arrives.
type lossyStore struct {
	*memStore
	mu     sync.Mutex
	prefix string
	typ    string
	lose   int // answers still to lose
	commit bool
	lost   int
}

// arm makes the next n matching appends lose their answer.
func (l *lossyStore) arm(prefix, typ string, n int, commit bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prefix, l.typ, l.lose, l.commit = prefix, typ, n, commit
}

// take reports whether an append that matches (called under the lock)
// loses its answer, counting it, and whether the armed appends commit.
func (l *lossyStore) take(matches func() bool) (hit, commit bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	hit = l.lose > 0 && matches()
	if hit {
		l.lose--
		l.lost++
	}
	return hit, l.commit
}

// Append implements EventStore.
func (l *lossyStore) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	hit, commit := l.take(func() bool {
		return strings.HasPrefix(stream, l.prefix) && len(events) > 0 && events[0].Type == l.typ
	})
	if !hit {
		return l.memStore.Append(ctx, stream, expected, events...)
	}
	if commit {
		if _, err := l.memStore.Append(ctx, stream, expected, events...); err != nil {
			return eventstore.AppendResult{}, err
		}
	}
	return eventstore.AppendResult{}, fmt.Errorf("pgstore: append to %q (outcome unknown): %w", stream, io.ErrUnexpectedEOF)
}

// AppendMulti implements EventStore: a unit with a part of a matching
// stream that holds an event of the armed type loses its answer as a whole
// (committed as a whole, or not at all).
func (l *lossyStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	hit, commit := l.take(func() bool {
		return slices.ContainsFunc(appends, func(a eventstore.StreamAppend) bool {
			return strings.HasPrefix(a.Stream, l.prefix) && slices.ContainsFunc(a.Events, func(e eventstore.EventData) bool { return e.Type == l.typ })
		})
	})
	if !hit {
		return l.memStore.AppendMulti(ctx, appends...)
	}
	if commit {
		if _, err := l.memStore.AppendMulti(ctx, appends...); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("pgstore: append to %d streams (outcome unknown): %w", len(appends), io.ErrUnexpectedEOF)
}

// lostFix is a scheduled show with a held reservation of alice's on fakes.
type lostFix struct {
	store   *lossyStore
	clock   *fakeClock
	pay     *fakePayments
	metrics *recordingMetrics
	h       *Handler
	resID   string
}

func newLostFix(t *testing.T) *lostFix {
	t.Helper()
	f := &lostFix{store: &lossyStore{memStore: newMemStore()}, clock: newFakeClock(payT0), pay: newFakePayments(),
		metrics: newRecordingMetrics()}
	f.store.SetClock(f.clock)
	cfg := DefaultConfig()
	cfg.Executor = execA
	f.h = New(cfg, f.store, f.clock, f.pay, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithMetrics(f.metrics), WithKeys(newMemKeys()))
	ctx := context.Background()
	show, _, err := f.h.ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Show", StartsAt: payT0.Add(48 * time.Hour), Capacity: 10, Price: payPrice})
	if err != nil {
		t.Fatalf("ScheduleShow: %v", err)
	}
	res, _, err := f.h.ReserveSeats(ctx, Request{Actor: "alice", Operation: OpReserveSeats, Key: "res"},
		ReserveSeatsCommand{ShowID: show.ID, Quantity: 2})
	if err != nil {
		t.Fatalf("ReserveSeats: %v", err)
	}
	f.resID = res.ID
	return f
}

func (f *lostFix) order(key string) (OrderResult, error) {
	return f.h.PlaceOrder(context.Background(), Request{Actor: "alice", Operation: OpPlaceOrder, Key: key, Wait: 5 * time.Second},
		PlaceOrderCommand{ReservationID: f.resID, PaymentToken: "tok_visa"})
}

// count returns the number of events of type typ in streams with prefix.
// orderUnavailable makes the store lose the answers of the next lost
// committed appends of typ to a stream named prefix…, then places order k1
// and wants it to fail Unavailable (503).
func (f *lostFix) orderUnavailable(t *testing.T, prefix, typ string, lost int) {
	t.Helper()
	f.store.arm(prefix, typ, lost, true)
	if _, err := f.order("k1"); domain.KindOf(err) != domain.Unavailable {
		t.Fatalf("PlaceOrder() = %v, want Unavailable", err)
	}
}

func (f *lostFix) count(prefix, typ string) int {
	all, err := f.store.ReadAll(context.Background(), eventstore.Position{}, math.MaxInt32)
	if err != nil {
		panic(err)
	}
	n := 0
	for _, e := range all {
		if strings.HasPrefix(e.Stream, prefix) && e.Type == typ {
			n++
		}
	}
	return n
}

// checkOneOrder checks one confirmed order and one charge, with one intent
// record, one claim and one placement.
func (f *lostFix) checkOneOrder(t *testing.T, out OrderResult) {
	t.Helper()
	if out.Order.Status != domain.OrderStatusConfirmed || !out.Final {
		t.Errorf("order %s is %s (final %v), want confirmed", out.Order.ID, out.Order.Status, out.Final)
	}
	got := map[string]int{
		"IntentRecorded": f.count("intent-", "IntentRecorded"), "OrderClaimed": f.count("reservation-order-", "OrderClaimed"),
		"OrderPlaced": f.count("order-", "OrderPlaced"), "PaymentSucceeded": f.count("order-", "PaymentSucceeded"),
		"OrderConfirmed": f.count("order-", "OrderConfirmed"), "IntentRejected": f.count("intent-", "IntentRejected"),
		"charges": f.pay.count("create"),
	}
	want := map[string]int{"IntentRecorded": 3, "OrderClaimed": 1, "OrderPlaced": 1, "PaymentSucceeded": 1, "OrderConfirmed": 1,
		"IntentRejected": 0, "charges": 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("counts (-want +got):\n%s", d)
	}
}

// TestLostAppendAnswerIsRepeatedToLearnTheOutcome: when the answer of the
// intent record, the order claim or a payment attempt's lease is lost, the
// handler repeats the same append (same ids, same expected revision) and
// goes on as if the answer had arrived: one order, one charge, nothing
// written twice. The same holds when the lost append did not commit (the
// repeat writes it).
func TestLostAppendAnswerIsRepeatedToLearnTheOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, prefix, typ string
		commit            bool
	}{
		{"The intent record committed; its answer was lost.", "intent-", "IntentRecorded", true},
		{"The order claim committed; its answer was lost.", "reservation-order-", "OrderClaimed", true},
		{"The payment attempt committed; its answer was lost.", "order-", "PaymentAttemptStarted", true},
		{"The intent record did not commit; its answer was lost.", "intent-", "IntentRecorded", false},
		{"The order claim did not commit; its answer was lost.", "reservation-order-", "OrderClaimed", false},
		{"The payment attempt did not commit; its answer was lost.", "order-", "PaymentAttemptStarted", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newLostFix(t)
			f.store.arm(tc.prefix, tc.typ, 1, tc.commit)
			out, err := f.order("k1")
			if err != nil {
				t.Fatalf("PlaceOrder() = %v, want a confirmed order", err)
			}
			if out.Replayed {
				t.Errorf("PlaceOrder(): Replayed, want a first answer")
			}
			if f.store.lost != 1 {
				t.Errorf("%d answers lost, want 1", f.store.lost)
			}
			f.checkOneOrder(t, out)
			if got := f.store.Types(IntentStream("alice", OpPlaceOrder, "k1")); !cmp.Equal(got, []string{"IntentRecorded"}) {
				t.Errorf("intent stream %v, want [IntentRecorded] (recorded once, the request stayed its executor)", got)
			}
			if n := len(f.store.Types(domain.OrderStream(out.Order.ID))); tc.typ == "PaymentAttemptStarted" && n != 4 {
				t.Errorf("order stream %v, want [OrderPlaced PaymentAttemptStarted PaymentSucceeded OrderConfirmed]",
					f.store.Types(domain.OrderStream(out.Order.ID)))
			}
			if n := f.metrics.get("unknown_append:resolved"); n != 1 {
				t.Errorf("UnknownAppend(resolved) counted %d, want 1", n)
			}
			again, err := f.order("k1")
			if err != nil || !again.Replayed || again.Order.ID != out.Order.ID {
				t.Errorf("repeat: PlaceOrder() = %+v, %v; want order %s replayed", again.Order.ID, err, out.Order.ID)
			}
			f.checkOneOrder(t, again)
		})
	}
}

// TestLostAppendAnswerStillUnknownIs503: when the answer is lost on the
// repeats too, the request fails Unavailable (503) and nothing else is
// written (no transient outcome); a repeat of the request resolves it to
// what committed: one order, one charge.
func TestLostAppendAnswerStillUnknownIs503(t *testing.T) {
	t.Parallel()
	lost := 1 + len(outcomeRepeatDelays)
	t.Run("The intent record.", func(t *testing.T) {
		t.Parallel()
		f := newLostFix(t)
		f.orderUnavailable(t, "intent-", "IntentRecorded", lost)
		if f.store.lost != lost {
			t.Errorf("%d answers lost, want %d (the first try and every repeat)", f.store.lost, lost)
		}
		if n := f.metrics.get("unknown_append:unresolved"); n != 1 {
			t.Errorf("UnknownAppend(unresolved) counted %d, want 1", n)
		}
		// The order's intent is recorded in the unit that claims the order:
		// that unit committed whole, the order placed with its first
		// attempt started; the request stopped there, unsent.
		stream := IntentStream("alice", OpPlaceOrder, "k1")
		if got := f.store.Types(stream); !cmp.Equal(got, []string{"IntentRecorded"}) {
			t.Errorf("intent stream %v, want [IntentRecorded] (nothing transient stored)", got)
		}
		if n := f.count("reservation-order-", "OrderClaimed"); n != 1 {
			t.Errorf("%d OrderClaimed, want 1 (committed with the intent)", n)
		}
		if n := f.count("order-", "OrderPlaced"); n != 1 {
			t.Errorf("%d OrderPlaced, want 1 (committed with the intent)", n)
		}
		if n := f.pay.count("create"); n != 0 {
			t.Errorf("%d payments created, want 0 (the request stopped at the intent's unit)", n)
		}
		// A repeat finds the intent past its commit point and answers the
		// order, paid once; no takeover is needed.
		out, err := f.order("k1")
		if err != nil || !out.Replayed {
			t.Fatalf("repeat: PlaceOrder() = %+v, %v; want the order, replayed", out, err)
		}
		f.checkOneOrder(t, out)
		if got := f.store.Types(stream); !cmp.Equal(got, []string{"IntentRecorded"}) {
			t.Errorf("intent stream %v, want [IntentRecorded]", got)
		}
	})
	t.Run("The order claim.", func(t *testing.T) {
		t.Parallel()
		f := newLostFix(t)
		f.orderUnavailable(t, "reservation-order-", "OrderClaimed", lost)
		// The claim's unit committed whole: the order placed with its
		// first attempt started; the request stopped there, unsent.
		if n := f.count("order-", "OrderPlaced"); n != 1 {
			t.Errorf("%d OrderPlaced, want 1 (committed in the claim's unit)", n)
		}
		if n := f.pay.count("create"); n != 0 {
			t.Errorf("%d payments created, want 0 (the request stopped at the claim's unit)", n)
		}
		if n := f.count("intent-", "IntentRejected"); n != 0 {
			t.Errorf("%d IntentRejected, want 0 (nothing transient stored)", n)
		}
		out, err := f.order("k1")
		if err != nil || !out.Replayed {
			t.Fatalf("repeat: PlaceOrder() = %+v, %v; want the order, replayed", out, err)
		}
		f.checkOneOrder(t, out)
	})
}
