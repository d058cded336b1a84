package commands

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// newIntentFix returns a handler on memstore with one scheduled show of
// capacity 2, and the show's id.
func newIntentFix(t *testing.T) (*Handler, *memStore, string) {
	t.Helper()
	store, clock := newMemStore(), newFakeClock(payT0)
	store.SetClock(clock)
	cfg := DefaultConfig()
	cfg.Executor = execA
	h := New(cfg, store, clock, newFakePayments(), newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithKeys(newMemKeys()))
	show, _, err := h.ScheduleShow(context.Background(), Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Show", StartsAt: payT0.Add(48 * time.Hour), Capacity: 2, Price: payPrice})
	if err != nil {
		t.Fatalf("ScheduleShow() error = %v", err)
	}
	return h, store, show.ID
}

// aliceReserves is alice's request to reserve quantity seats of showID
// under the idempotency key key.
func aliceReserves(showID, key string, quantity int) (Request, ReserveSeatsCommand) {
	return Request{Actor: "alice", Operation: OpReserveSeats, Key: key}, ReserveSeatsCommand{ShowID: showID, Quantity: quantity}
}

// TestRejectionIsStoredAsADomainOutcome shows a new definitive refusal
// recorded as IntentRejected version 2 with its kind and code and no HTTP
// status, and every repeat answering the same kind and code.
func TestRejectionIsStoredAsADomainOutcome(t *testing.T) {
	t.Parallel()
	h, store, showID := newIntentFix(t)
	ctx := context.Background()
	req, cmd := aliceReserves(showID, "too-many", 3)
	for i, wantReplayed := range []bool{false, true, true} {
		_, _, err := h.ReserveSeats(ctx, req, cmd)
		var rej *Rejection
		if !errors.As(err, &rej) {
			t.Fatalf("ReserveSeats() #%d error = %v, want a *Rejection", i+1, err)
		}
		if rej.Err.Kind != domain.Conflict || rej.Err.Code != domain.ErrSoldOut.Code || rej.LegacyStatus != 0 || rej.Replayed != wantReplayed {
			t.Errorf("ReserveSeats() #%d = {Kind %v, Code %q, LegacyStatus %d, Replayed %t}, want {conflict, %q, 0, %t}",
				i+1, rej.Err.Kind, rej.Err.Code, rej.LegacyStatus, rej.Replayed, domain.ErrSoldOut.Code, wantReplayed)
		}
	}
	recs, err := store.ReadStream(ctx, IntentStream(req.Actor, req.Operation, req.Key), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := store.Types(IntentStream(req.Actor, req.Operation, req.Key)); len(got) != 2 || got[1] != "IntentRejected" {
		t.Fatalf("intent stream = %v, want [IntentRecorded IntentRejected] (one rejection for three requests)", got)
	}
	var meta eventstore.Metadata
	if err := json.Unmarshal(recs[1].Metadata, &meta); err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(recs[1].Data, &data); err != nil {
		t.Fatal(err)
	}
	if _, ok := data["status"]; ok || meta.SchemaVersion != 2 || data["kind"] != "conflict" || data["code"] != domain.ErrSoldOut.Code {
		t.Errorf("IntentRejected = %s (schema version %d), want version 2 with kind conflict, code %s and no status",
			recs[1].Data, meta.SchemaVersion, domain.ErrSoldOut.Code)
	}
}

// TestVersion1RejectionReplaysItsStoredStatus shows an IntentRejected
// written before rejections stored only their kind (version 1, with the
// HTTP status it answered) still decoding, and a repeat answering the status
// it stored.
func TestVersion1RejectionReplaysItsStoredStatus(t *testing.T) {
	t.Parallel()
	h, store, showID := newIntentFix(t)
	ctx := context.Background()
	req, cmd := aliceReserves(showID, "old", 1)
	run, err := h.beginIntent(ctx, req, cmd.Canonical(), nil, nil)
	if err != nil {
		t.Fatalf("beginIntent() error = %v", err)
	}
	v1 := domain.IntentRejected{Status: 402, Kind: "rejected", Code: "payment-declined", Detail: "the payment was declined"}
	ed, err := eventstore.Encode(DerivedID(run.stream, "rejected"), v1, eventstore.Metadata{SchemaVersion: 1, Actor: req.Actor, Intent: run.stream})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, run.stream, eventstore.Exact(run.rev), ed); err != nil {
		t.Fatal(err)
	}
	_, _, err = h.ReserveSeats(ctx, req, cmd)
	var rej *Rejection
	if !errors.As(err, &rej) {
		t.Fatalf("ReserveSeats() error = %v, want a *Rejection", err)
	}
	if rej.LegacyStatus != 402 || rej.Err.Kind != domain.Rejected || rej.Err.Code != "payment-declined" || !rej.Replayed {
		t.Errorf("ReserveSeats() = {LegacyStatus %d, Kind %v, Code %q, Replayed %t}, want {402, rejected, payment-declined, true}",
			rej.LegacyStatus, rej.Err.Kind, rej.Err.Code, rej.Replayed)
	}
}

// TestRetryConflictsPolicy pins the retry policy: a revision conflict or
// errRetry is tried again up to ConflictAttempts times and ends in
// domain.ErrContention; any other error, and success, end it at once.
func TestRetryConflictsPolicy(t *testing.T) {
	t.Parallel()
	conflict := &eventstore.RevisionConflictError{Stream: "s", Expected: eventstore.NoStream(), Actual: 0}
	other := errors.New("boom")
	tests := []struct {
		name      string
		results   []error // the results of the tries, in order; the last repeats
		wantTries int
		want      error
	}{
		{"A first success is one try.", []error{nil}, 1, nil},
		{"A conflict then a success is two tries.", []error{conflict, nil}, 2, nil},
		{"errRetry is tried again like a conflict.", []error{errRetry, errRetry, nil}, 3, nil},
		{"Another error ends at once.", []error{other}, 1, other},
		{"A conflict then another error returns the other error.", []error{conflict, other}, 2, other},
		{"Conflicts until the bound end in contention.", []error{conflict}, 4, domain.ErrContention},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := New(Config{ConflictAttempts: 4}, newMemStore(), newFakeClock(payT0), nil, newTestRegistry(), nil)
			tries := 0
			err := h.retryConflicts(context.Background(), func() error {
				r := tt.results[min(tries, len(tt.results)-1)]
				tries++
				return r
			})
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("retryConflicts() = %v, want %v", err, tt.want)
			}
			if tries != tt.wantTries {
				t.Errorf("retryConflicts() tried %d times, want %d", tries, tt.wantTries)
			}
		})
	}
}

// TestIntentAgeIsTheServiceClock shows an intent's age taken from its first
// event's occurred_at (the handler's clock, PostgreSQL's in the service),
// not from the event store's own timestamp: with the store's clock two days
// behind (a KurrentDB leader with a wrong clock), a repeat an hour later is
// still a replay of the same reservation, not a new intent after expiry.
func TestIntentAgeIsTheServiceClock(t *testing.T) {
	t.Parallel()
	h, store, showID := newIntentFix(t)
	clock := h.clock.(*fakeClock)
	store.SetClock(newFakeClock(payT0.Add(-48 * time.Hour)))
	ctx := context.Background()
	req, cmd := aliceReserves(showID, "skew", 1)
	first, _, err := h.ReserveSeats(ctx, req, cmd)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	again, out, err := h.ReserveSeats(ctx, req, cmd)
	if err != nil || !out.Replayed || again.ID != first.ID {
		t.Fatalf("repeat an hour later = %s, replayed %t, %v; want a replay of %s", again.ID, out.Replayed, err, first.ID)
	}
}

// TestRepeatOnAnotherProcessIsAReplay shows a repeat reaching a process
// that has not seen its intent (recordFirst: the append at no stream
// conflicts, then the intent is read) answered exactly as on the process
// that recorded it: the same reservation and order, replayed; a different
// body is 422; nothing more is appended to the intent streams; and the key
// row the order repeat made for an order that never exists is deleted.
func TestRepeatOnAnotherProcessIsAReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProcesses()
	store, keys, pay := p.mem, p.keys, p.pay
	a, b := p.handler(execA, nil, nil), p.handler(execB, nil, nil)
	show := scheduleShow(t, a, 2, 48*time.Hour)
	req, cmd := aliceReserves(show.ID, "k", 1)
	first, out, err := a.ReserveSeats(ctx, req, cmd)
	if err != nil || out.Replayed {
		t.Fatalf("ReserveSeats on A = %+v, %v", out, err)
	}
	again, out, err := b.ReserveSeats(ctx, req, cmd)
	if err != nil || !out.Replayed || again.ID != first.ID {
		t.Fatalf("repeat on B = %s, replayed %t, %v; want a replay of %s", again.ID, out.Replayed, err, first.ID)
	}
	_, cmd2 := aliceReserves(show.ID, "k", 2)
	if _, _, err := b.ReserveSeats(ctx, req, cmd2); !errors.Is(err, domain.ErrKeyReused) {
		t.Fatalf("repeat on B with another body = %v, want the key-reused error (422)", err)
	}

	oreq := Request{Actor: "alice", Operation: OpPlaceOrder, Key: "o", Wait: 10 * time.Second}
	ocmd := PlaceOrderCommand{ReservationID: first.ID, PaymentToken: "tok_visa"}
	placed, err := a.PlaceOrder(ctx, oreq, ocmd)
	if err != nil || placed.Replayed || placed.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder on A = %+v, %v; want a new confirmed order", placed, err)
	}
	replay, err := b.PlaceOrder(ctx, oreq, ocmd)
	if err != nil || !replay.Replayed || replay.Order.ID != placed.Order.ID || replay.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("repeat of the order on B = %+v, %v; want a replay of confirmed order %s", replay, err, placed.Order.ID)
	}
	for _, intent := range []Request{req, oreq} {
		recs, err := store.ReadStream(ctx, IntentStream(intent.Actor, intent.Operation, intent.Key), 0, 0)
		if err != nil || len(recs) != 1 || recs[0].Type != "IntentRecorded" {
			t.Errorf("intent %s: %d events, %v; want IntentRecorded only", intent.Operation, len(recs), err)
		}
	}
	if net, n := pay.net(); net != payPrice.Amount || n != 1 {
		t.Errorf("provider: net %d over %d charges, want %d over 1", net, n, payPrice.Amount)
	}
	for deadline := time.Now().Add(30 * time.Second); keys.len() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d key rows 30 s after the order ended and its repeat, want 0", keys.len())
		}
		time.Sleep(20 * time.Millisecond) // polling for a state, with a deadline
	}
}

// TestKeyReusedNamesTheDifferingFieldsAsAList: the 422's message lists the
// differing top-level fields separated by commas, never their values.
func TestKeyReusedNamesTheDifferingFieldsAsAList(t *testing.T) {
	t.Parallel()
	h, _, _ := newIntentFix(t)
	_, _, err := h.ScheduleShow(context.Background(), Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Other", StartsAt: payT0.Add(48 * time.Hour), Capacity: 3, Price: payPrice})
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != domain.ErrKeyReused.Code {
		t.Fatalf("ScheduleShow(same key, other name and capacity) = %v, want the key-reused error", err)
	}
	if want := "this idempotency key was used with a different request; differing fields: capacity, name"; de.Msg != want {
		t.Errorf("message = %q, want %q", de.Msg, want)
	}
}
