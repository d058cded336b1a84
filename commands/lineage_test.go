package commands

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// updateLineage rewrites the lineage golden files:
// go test ./commands -run Lineage -update-lineage.
var updateLineage = flag.Bool("update-lineage", false, "rewrite the golden files in testdata/lineage")

// lineageWorld is a log with the handlers of two processes on it.
type lineageWorld struct {
	store *memStore
	clock *fakeClock
	keys  *memKeys
	pay   *fakePayments
}

func newLineageWorld() *lineageWorld {
	w := &lineageWorld{store: newMemStore(), clock: newFakeClock(payT0), keys: newMemKeys(), pay: newFakePayments()}
	w.store.SetClock(w.clock)
	return w
}

func (w *lineageWorld) handler(executor string, hooks Hooks) *Handler {
	cfg := DefaultConfig()
	cfg.Executor = executor
	return New(cfg, w.store, w.clock, w.pay, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithKeys(w.keys), WithHooks(hooks))
}

// holdASeat has h schedule the show "Show" (request srv-show) and hold one
// seat of it for alice (request srv-res, of client id client), failing t
// if either is refused, and returns the reservation's id.
func holdASeat(t *testing.T, h *Handler, client string) string {
	t.Helper()
	show, _, err := h.ScheduleShow(request("srv-show", ""), Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Show", StartsAt: payT0.Add(48 * time.Hour), Capacity: 10, Price: payPrice})
	if err != nil {
		t.Fatalf("ScheduleShow = %v", err)
	}
	res, _, err := h.ReserveSeats(request("srv-res", client), Request{Actor: "alice", Operation: OpReserveSeats, Key: "res"},
		ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
	if err != nil {
		t.Fatalf("ReserveSeats = %v", err)
	}
	return res.ID
}

// request returns a context serving the request of server id srv and
// client id client, in a span of a trace of its own (requestTrace).
func request(srv, client string) context.Context {
	ctx := trace.ContextWithSpanContext(context.Background(), requestTrace(srv))
	return WithRequestIDs(ctx, RequestIDs{Server: srv, Client: client})
}

// requestTrace returns the span context of the test request of server id
// srv: trace and span id derived from srv, sampled, with a tracestate.
func requestTrace(srv string) trace.SpanContext {
	sum := sha256.Sum256([]byte(srv))
	ts, _ := trace.ParseTraceState("booking=" + srv)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(sum[:16]), SpanID: trace.SpanID(sum[16:24]),
		TraceFlags: trace.FlagsSampled, TraceState: ts})
}

// traceName names the trace context of metadata m by the test request
// whose span it is ("srv-order"), "" when m keeps none, or shows it as it
// is when no request's.
func traceName(m eventstore.Metadata) string {
	if m.Traceparent == "" && m.Tracestate == "" {
		return ""
	}
	srv, ok := strings.CutPrefix(m.Tracestate, "booking=")
	if sc := requestTrace(srv); ok && m.Traceparent == "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01" {
		return srv
	}
	return m.Traceparent + ";" + m.Tracestate
}

// lineageLines returns one line per event of the log: its stream's kind,
// its type and its lineage, with every event id named by the type and
// stream kind of the event it is ("OrderClaimed@claim"), so the lines do
// not change from run to run; ordered by stream kind, then revision (the
// log's order of two streams' follow-ups may vary). Request ids are the
// tests' own.
func lineageLines(t *testing.T, store *memStore) []string {
	t.Helper()
	all, err := store.ReadAll(context.Background(), eventstore.Position{}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	// An intent stream is named by its operation's last path segment.
	ops := map[string]string{}
	for _, r := range all {
		if r.Type == "IntentRecorded" {
			var rec domain.IntentRecorded
			if err := json.Unmarshal(r.Data, &rec); err != nil {
				t.Fatal(err)
			}
			ops[r.Stream] = "intent:" + rec.Operation[strings.LastIndex(rec.Operation, "/")+1:]
		}
	}
	kind := func(stream string) string {
		switch {
		case ops[stream] != "":
			return ops[stream]
		case strings.HasPrefix(stream, "reservation-order-"):
			return "claim"
		}
		k, _, _ := strings.Cut(stream, "-")
		return k
	}
	names, seen := map[string]string{}, map[string]int{}
	for _, r := range all {
		n := r.Type + "@" + kind(r.Stream)
		seen[n]++
		if seen[n] > 1 {
			n += fmt.Sprintf("#%d", seen[n])
		}
		names[r.ID] = n
	}
	name := func(id string) string {
		if n, ok := names[id]; ok {
			return n
		}
		return id
	}
	slices.SortStableFunc(all, func(a, b eventstore.RecordedEvent) int {
		if c := strings.Compare(kind(a.Stream), kind(b.Stream)); c != 0 {
			return c
		}
		return cmpRev(a.Revision, b.Revision)
	})
	var out []string
	for _, r := range all {
		m, err := eventstore.DecodeMetadata(r.Metadata)
		if err != nil {
			t.Fatalf("%s@%d: %v", r.Stream, r.Revision, err)
		}
		out = append(out, fmt.Sprintf("%-20s %-24s correlation=%s causation=%s request=%s client=%s trace=%s",
			kind(r.Stream), r.Type, name(m.CorrelationID), name(m.CausationID), m.RequestID, m.ClientRequestID, traceName(m)))
	}
	return out
}

func cmpRev(a, b eventstore.Revision) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkLineage compares lines with the golden file name, or rewrites it
// under -update-lineage, and checks what holds for every event: a
// causation id, and a correlation id that is a request's server id.
func checkLineage(t *testing.T, name string, lines []string) {
	t.Helper()
	for _, l := range lines {
		if strings.Contains(l, "causation= ") || !strings.Contains(l, "correlation=srv-") {
			t.Errorf("event without a cause, or not correlated with a request: %s", l)
		}
	}
	path := filepath.Join("testdata", "lineage", name)
	got := strings.Join(lines, "\n") + "\n"
	if *updateLineage {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with go test ./commands -run Lineage -update-lineage)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("lineage of %s (-golden +got):\n%s", name, diff)
	}
}

// TestLineage_ABookingNamesItsRequests: a show, a reservation, an order
// paid inline, a repeat of the order by another request with the same
// client id, a cancel with its refund, and the erasure of the order's key
// recorded by the reconciler. Every event carries the
// correlation id of the request that recorded its intent (never the
// repeat's), a cause (the request that decided it, or the event it follows
// from), and the request behind it with that request's client id. Another
// process's process manager following every event up appends nothing: the
// lineage does not depend on who finished a step. Pinned by
// testdata/lineage/booking.golden.
func TestLineage_ABookingNamesItsRequests(t *testing.T) {
	t.Parallel()
	w := newLineageWorld()
	h := w.handler("exec-a", Hooks{})
	resID := holdASeat(t, h, "client-res")
	order := Request{Actor: "alice", Operation: OpPlaceOrder, Key: "order", Wait: 10 * time.Second}
	cmd := PlaceOrderCommand{ReservationID: resID, PaymentToken: "tok_visa"}
	out, err := h.PlaceOrder(request("srv-order", "client-order"), order, cmd)
	if err != nil || out.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder = %+v, %v; want a confirmed order", out.Order, err)
	}
	// Another process's repeat (it keeps nothing of the intent), with the
	// client's same id.
	if again, err := w.handler("exec-b", Hooks{}).PlaceOrder(request("srv-order-again", "client-order"), order, cmd); err != nil || !again.Outcome.Replayed {
		t.Fatalf("repeat of PlaceOrder = %+v, %v; want a replay", again, err)
	}
	if _, err := h.CancelOrder(request("srv-cancel", ""), Request{Actor: "alice", Operation: OpCancelOrder, Key: "cancel"}, out.Order.ID); err != nil {
		t.Fatalf("CancelOrder = %v", err)
	}
	before := lineageLines(t, w.store)
	all, err := w.store.ReadAll(context.Background(), eventstore.Position{}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	pm := w.handler("exec-pm", Hooks{})
	var wg sync.WaitGroup
	for _, r := range all {
		if err := pm.followUp(context.Background(), r, laterOf{}, &wg); err != nil {
			t.Fatalf("followUp(%s) = %v", r.Type, err)
		}
	}
	wg.Wait()
	after := lineageLines(t, w.store)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the process manager changed the log (-before +after):\n%s", diff)
	}
	// The order's key is deleted, and the reconciler records the erasure.
	h.FlushShreds(context.Background())
	if n := pm.recordErasures(context.Background()); n != 1 {
		t.Fatalf("recordErasures = %d, want the order's 1", n)
	}
	checkLineage(t, "booking.golden", lineageLines(t, w.store))
}

// TestLineage_RecoveryKeepsTheRequest: an order request stops right after
// recording its intent alone (its process dies); after the intent's lease another
// process's recovery claims, places and pays the order. Every event it
// appends keeps the correlation id of the request that recorded the intent
// and names that request, and names the intent's event as the cause of
// the claim — no constant stands in for the request. Pinned by
// testdata/lineage/recovered.golden.
func TestLineage_RecoveryKeepsTheRequest(t *testing.T) {
	t.Parallel()
	w := newLineageWorld()
	h := w.handler("exec-a", Hooks{})
	resID := holdASeat(t, h, "")
	type died struct{}
	dies := w.handler("exec-dies", Hooks{Step: func(step string) {
		if step == "intent.recorded" {
			panic(died{})
		}
	}})
	// A process that has seen the intent stream (intentHints) reads it
	// first and records the intent alone, before its claim: the state a
	// request that dies then leaves. (One that has not seen it records the
	// intent in the unit that claims the order.)
	dies.streams.seenIntents.note(IntentStream("alice", OpPlaceOrder, "order"))
	func() {
		defer func() {
			if r := recover(); r != (died{}) {
				t.Fatalf("PlaceOrder did not stop at intent.recorded (recovered %v)", r)
			}
		}()
		_, _ = dies.PlaceOrder(request("srv-order", "client-order"), Request{Actor: "alice", Operation: OpPlaceOrder, Key: "order"},
			PlaceOrderCommand{ReservationID: resID, PaymentToken: "tok_visa"})
	}()
	w.clock.Advance(DefaultConfig().IntentLease + time.Second)
	if err := w.handler("exec-recovery", Hooks{}).recoverIntent(context.Background(), IntentStream("alice", OpPlaceOrder, "order")); err != nil {
		t.Fatalf("recoverIntent = %v", err)
	}
	// Recovery pays on in the background (the recovered request waits for
	// nothing): wait for the confirmation.
	var lines []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		lines = lineageLines(t, w.store)
		if strings.Contains(strings.Join(lines, "\n"), "OrderConfirmed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("recovery did not confirm the order within 30 s:\n%s", strings.Join(lines, "\n"))
		}
	}
	checkLineage(t, "recovered.golden", lines)
}
