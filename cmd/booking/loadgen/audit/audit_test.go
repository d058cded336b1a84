package audit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// logFake is a small fake of the event log: ReadAll pages over a fixed
// slice; the other eventstore.Store methods are not used by the audit.
type logFake struct {
	eventstore.Store
	events []eventstore.RecordedEvent
	err    error
}

func (l *logFake) ReadAll(_ context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if l.err != nil {
		return nil, l.err
	}
	var out []eventstore.RecordedEvent
	for _, e := range l.events {
		if after.Less(e.Position) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

// add appends e to stream as the next event of the log.
func (l *logFake) add(t *testing.T, stream string, e domain.Event) {
	t.Helper()
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	l.addRaw(stream, e.EventType(), data)
}

func (l *logFake) addRaw(stream, typ string, data []byte) {
	rev := uint64(0)
	for _, e := range l.events {
		if e.Stream == stream {
			rev++
		}
	}
	n := uint64(len(l.events) + 1)
	l.events = append(l.events, eventstore.RecordedEvent{ID: "ev-" + typ, Stream: stream, Type: typ, Revision: rev,
		Position: eventstore.Position{Commit: n, Prepare: n}, Data: data, Metadata: []byte(`{"schema_version":2}`)})
}

// world is a settled service as the audit sees it: a log, the simulator's
// charges and the API's availability per show.
type world struct {
	log       *logFake
	mu        sync.Mutex
	charges   []audit.Charge
	available map[string]int
}

const (
	show   = "s1"
	price  = 4500
	capac  = 10
	tokAPI = "tok-audit"
)

func eur(n int64) domain.Money { return domain.Money{Amount: n, Currency: "EUR"} }

// newWorld returns a clean world: show s1 (10 seats at 4500); r1 (2 seats)
// ordered by o1, confirmed and charged once; r2 (1 seat) held; r3 (1 seat)
// ordered by o2, declined and released; o1's intent finished. 7 seats are
// available.
func newWorld(t *testing.T) *world {
	w := &world{log: &logFake{}, available: map[string]int{show: 7}}
	l := w.log
	l.add(t, domain.ShowStream(show), domain.ShowScheduled{ShowID: show, Name: "Concert", Capacity: capac, Price: eur(price)})
	hold := func(res string, qty int) {
		l.add(t, domain.ShowStream(show), domain.SeatsHeld{ShowID: show, ReservationID: res, Quantity: qty, Amount: eur(price * int64(qty))})
		l.add(t, domain.ReservationStream(res), domain.ReservationHeld{ReservationID: res, ShowID: show, Quantity: qty, Amount: eur(price * int64(qty))})
	}
	order := func(res, id string, qty int) {
		l.add(t, domain.ClaimStream(res), domain.OrderClaimed{ReservationID: res, OrderID: id, ShowID: show, Quantity: qty, Amount: eur(price * int64(qty))})
		l.add(t, domain.OrderStream(id), domain.OrderPlaced{OrderID: id, ReservationID: res, ShowID: show, Quantity: qty,
			Amount: eur(price * int64(qty)), PaymentDeadline: time.Now().Add(time.Hour)})
		l.add(t, domain.ReservationStream(res), domain.ReservationOrdered{ReservationID: res, OrderID: id})
	}
	l.add(t, "intent-o1", domain.IntentRecorded{Operation: commands.OpPlaceOrder, Fingerprint: "fp", TargetID: "o1"})
	hold("r1", 2)
	order("r1", "o1", 2)
	l.add(t, domain.OrderStream("o1"), domain.PaymentSucceeded{OrderID: "o1", Attempt: 1, ChargeID: "ch1", Amount: eur(2 * price)})
	l.add(t, domain.OrderStream("o1"), domain.OrderConfirmed{OrderID: "o1", Tickets: []domain.Ticket{{ID: "t1"}, {ID: "t2"}}})
	w.charges = append(w.charges, audit.Charge{ID: "ch1", Amount: 2 * price, Currency: "EUR", Status: "succeeded", Metadata: map[string]string{"order_id": "o1"}})
	hold("r2", 1)
	hold("r3", 1)
	order("r3", "o2", 1)
	l.add(t, domain.OrderStream("o2"), domain.PaymentFailed{OrderID: "o2", Attempt: 1, ChargeID: "ch2", Code: "card_declined"})
	l.add(t, domain.OrderStream("o2"), domain.OrderFailed{OrderID: "o2", Reason: domain.FailPaymentDeclined})
	l.add(t, domain.ShowStream(show), domain.SeatsReleased{ShowID: show, ReservationID: "r3", Quantity: 1, Reason: domain.ReleasePaymentFailed})
	l.add(t, domain.ReservationStream("r3"), domain.ReservationReleased{ReservationID: "r3", OrderID: "o2", Reason: domain.ReleasePaymentFailed})
	w.charges = append(w.charges, audit.Charge{ID: "ch2", Amount: price, Currency: "EUR", Status: "failed", Metadata: map[string]string{"order_id": "o2"}})
	return w
}

// serve starts the simulator's charge list and the API's show answer.
func (w *world) serve(t *testing.T) audit.Sources {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_sim/charges", func(rw http.ResponseWriter, _ *http.Request) {
		w.mu.Lock()
		defer w.mu.Unlock()
		_ = json.NewEncoder(rw).Encode(map[string]any{"charges": w.charges})
	})
	mux.HandleFunc("GET /v1/shows/{id}", func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+tokAPI {
			http.Error(rw, "unauthorized", http.StatusUnauthorized)
			return
		}
		n, ok := w.available[r.PathValue("id")]
		if !ok {
			http.NotFound(rw, r)
			return
		}
		_ = json.NewEncoder(rw).Encode(map[string]any{"id": r.PathValue("id"), "available": n})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return audit.Sources{Log: w.log, SimURL: srv.URL, APIURL: srv.URL, Token: tokAPI, Client: srv.Client(), HTTP: &audit.HTTPStats{}}
}

func TestCheckPassesASettledWorld(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rep := audit.Check(context.Background(), w.serve(t), audit.Options{})
	if !rep.OK() {
		t.Fatalf("Check of a clean world: %v", rep.Violations())
	}
	want := map[audit.Rule]int{audit.OrdersPerReservation: 2, audit.NetCharge: 2, audit.Seats: 1, audit.Decodes: len(w.log.events), audit.Settled: 5}
	for rule, n := range want {
		if got := rep.Row(rule).Checked; got != n {
			t.Errorf("row %q checked %d, want %d", rule, got, n)
		}
	}
	if rep.Events != len(w.log.events) || rep.Orders != 2 || rep.Confirmed != 1 || rep.Charges != 2 || rep.SucceededCharges != 1 {
		t.Errorf("counts = %+v", rep)
	}
	var b strings.Builder
	rep.WriteTable(&b, 0)
	// Read models and NATS need real servers (live_test.go); here they are
	// skipped, no client request was recorded (the no-500 row had nothing
	// to check, which the table says), and every other row is OK.
	if got := rep.Unchecked(); len(got) != 1 || got[0] != audit.HTTP500 {
		t.Errorf("Unchecked() = %q, want only %q", got, audit.HTTP500)
	}
	if strings.Contains(b.String(), "VIOLATION") || strings.Count(b.String(), " OK") != len(audit.Rules)-3 ||
		!strings.Contains(b.String(), "0 requests checked                     NOTHING CHECKED") ||
		!strings.Contains(b.String(), "skipped: no database URL") || !strings.Contains(b.String(), "skipped: no NATS URL") {
		t.Errorf("table of a clean world:\n%s", b.String())
	}
}

// TestCheckNamesEachPlantedViolation plants one violation per case into a
// clean world and wants the named rule to fail with a message naming it.
func TestCheckNamesEachPlantedViolation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		plant func(t *testing.T, w *world)
		rule  audit.Rule
		want  string
	}{
		{"a second order for one reservation", func(t *testing.T, w *world) {
			w.log.add(t, domain.OrderStream("o3"), domain.OrderPlaced{OrderID: "o3", ReservationID: "r1", ShowID: show, Quantity: 2, Amount: eur(2 * price)})
			w.log.add(t, domain.OrderStream("o3"), domain.OrderFailed{OrderID: "o3", Reason: domain.FailNoAttempt})
		}, audit.OrdersPerReservation, "reservation r1 has 2 orders: o1, o3"},
		{"a second order claim", func(t *testing.T, w *world) {
			w.log.add(t, domain.ClaimStream("r2"), domain.OrderClaimed{ReservationID: "r2", OrderID: "o4"})
			w.log.add(t, domain.ClaimStream("r2"), domain.OrderClaimed{ReservationID: "r2", OrderID: "o5"})
		}, audit.OrdersPerReservation, "reservation r2 has 2 orders: o4, o5"},
		{"a second successful charge", func(t *testing.T, w *world) {
			w.charges = append(w.charges, audit.Charge{ID: "ch9", Amount: 2 * price, Status: "succeeded", Metadata: map[string]string{"order_id": "o1"}})
		}, audit.NetCharge, "order o1 (confirmed): net charge 18000, want 9000"},
		{"a confirmed order refunded", func(t *testing.T, w *world) {
			w.charges[0].RefundedAmount = 2 * price
		}, audit.NetCharge, "order o1 (confirmed): net charge 0, want 9000"},
		{"a charge left on a failed order", func(t *testing.T, w *world) {
			w.charges[1].Status = "succeeded"
		}, audit.NetCharge, "order o2 (failed): net charge 4500, want 0"},
		{"a charge for no order", func(t *testing.T, w *world) {
			w.charges = append(w.charges, audit.Charge{ID: "ch8", Amount: 100, Status: "succeeded", Metadata: map[string]string{"order_id": "ghost"}})
		}, audit.NetCharge, `charges for "ghost", which is no order of the log, net 100`},
		{"a seat leaked", func(t *testing.T, w *world) { w.available[show] = 6 },
			audit.Seats, "show s1: capacity 10 != available 6 + held 1 + ordered 2"},
		{"a show the API does not know", func(t *testing.T, w *world) { delete(w.available, show) },
			audit.Seats, "show s1: GET"},
		{"an unknown event type", func(t *testing.T, w *world) { w.log.addRaw("misc-1", "Bogus", []byte(`{}`)) },
			audit.Decodes, `misc-1@0: eventstore: unknown event type "Bogus"`},
		{"an event that does not decode", func(t *testing.T, w *world) {
			w.log.addRaw(domain.OrderStream("o1"), "OrderConfirmed", []byte(`{"tickets":7}`))
		}, audit.Decodes, "order-o1@3: eventstore: decode OrderConfirmed"},
		{"an order left pending", func(t *testing.T, w *world) {
			w.log.add(t, domain.ClaimStream("r2"), domain.OrderClaimed{ReservationID: "r2", OrderID: "o6"})
			w.log.add(t, domain.OrderStream("o6"), domain.OrderPlaced{OrderID: "o6", ReservationID: "r2", Amount: eur(price)})
		}, audit.Settled, "order o6 is pending"},
		{"an order claim without its order", func(t *testing.T, w *world) {
			w.log.add(t, domain.ClaimStream("r2"), domain.OrderClaimed{ReservationID: "r2", OrderID: "o7"})
		}, audit.Settled, "order claim o7 of reservation r2 without its OrderPlaced"},
		{"an expiry claim without its expiry", func(t *testing.T, w *world) {
			w.log.add(t, domain.ClaimStream("r2"), domain.ExpiryClaimed{ReservationID: "r2", ShowID: show, Quantity: 1})
		}, audit.Settled, "expiry claim of reservation r2 without its ReservationExpired"},
		{"an intent left unfinished", func(t *testing.T, w *world) {
			w.log.add(t, "intent-x", domain.IntentRecorded{Operation: commands.OpReserveSeats, Fingerprint: "fp", TargetID: "r9"})
		}, audit.Settled, "intent intent-x (POST /v1/reservations → r9) unfinished"},
		{"an order needing review", func(t *testing.T, w *world) {
			w.log.add(t, domain.OrderStream("o2"), domain.OrderNeedsReview{OrderID: "o2", Reason: "refund refused"})
		}, audit.Settled, "order o2 needs review: refund refused"},
		{"a refund unanswered", func(t *testing.T, w *world) {
			w.log.add(t, domain.OrderStream("o1"), domain.RefundRequested{OrderID: "o1", ChargeID: "ch1", Amount: eur(2 * price), Key: "refund-ch1"})
		}, audit.Settled, "order o1: refund of charge ch1 requested and unanswered"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			c.plant(t, w)
			rep := audit.Check(context.Background(), w.serve(t), audit.Options{})
			row := rep.Row(c.rule)
			if len(row.Violations) == 0 {
				t.Fatalf("row %q has no violation; report: %v", c.rule, rep.Violations())
			}
			if !strings.Contains(strings.Join(row.Violations, "\n"), c.want) {
				t.Errorf("row %q = %q, want one containing %q", c.rule, row.Violations, c.want)
			}
			if rep.OK() || rep.Err() == nil {
				t.Errorf("report OK with a violation")
			}
			var b strings.Builder
			rep.WriteTable(&b, 0)
			if !strings.Contains(b.String(), "VIOLATION: "+string(c.rule)+": ") {
				t.Errorf("table does not name the violation:\n%s", b.String())
			}
			// Skipping the rule hides exactly its violations.
			rep = audit.Check(context.Background(), w.serve(t), audit.Options{Skip: map[audit.Rule]string{c.rule: "planted"}})
			if row := rep.Row(c.rule); row.Skipped != "planted" || len(row.Violations) != 0 {
				t.Errorf("skipped row = %+v", row)
			}
		})
	}
}

// TestCheckLeavesOpenOrdersNamedOpen: an order named in Options.Open may
// stay pending; any other pending order is still a violation.
func TestCheckLeavesOpenOrdersNamedOpen(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, id := range []string{"o6", "o7"} {
		w.log.add(t, domain.OrderStream(id), domain.OrderPlaced{OrderID: id, ReservationID: "r-" + id, Amount: eur(price)})
	}
	rep := audit.Check(context.Background(), w.serve(t), audit.Options{Open: map[string]string{"o6": "the provider fails every call"}})
	if got := rep.Row(audit.Settled).Violations; len(got) != 1 || got[0] != "order o7 is pending" {
		t.Errorf("Settled = %q, want only [order o7 is pending]", got)
	}
}

// TestCheckFailsWhenASourceCannotBeRead: an unreadable source is a
// violation of the rules that need it, never a pass.
func TestCheckFailsWhenASourceCannotBeRead(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	src := w.serve(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	bad := src
	bad.SimURL, bad.APIURL = down.URL, down.URL
	rep := audit.Check(context.Background(), bad, audit.Options{})
	for _, rule := range []audit.Rule{audit.NetCharge, audit.Seats} {
		if len(rep.Row(rule).Violations) != 1 {
			t.Errorf("row %q with its source down: %q, want 1 violation", rule, rep.Row(rule).Violations)
		}
	}
	w.log.err = context.DeadlineExceeded
	src.HTTP = &audit.HTTPStats{}
	src.HTTP.Record("GET", "/v1/shows", 200, false, "")
	rep = audit.Check(context.Background(), src, audit.Options{})
	// Every rule but HTTP500, which needs only the run itself.
	if got := rep.ViolationCount(); got != len(audit.Rules)-1 || len(rep.Row(audit.HTTP500).Violations) != 0 {
		t.Errorf("with the log unreadable: %d violations, want %d, none of %q (%v)", got, len(audit.Rules)-1, audit.HTTP500, rep.Violations())
	}
	rep = audit.Check(context.Background(), audit.Sources{}, audit.Options{})
	if got, row := rep.ViolationCount(), rep.Row(audit.HTTP500); got != len(audit.Rules)-1 || row.Skipped != "no client traffic recorded" {
		t.Errorf("without sources: %d violations, want %d; row %q skipped %q, want skipped", got, len(audit.Rules)-1, audit.HTTP500, row.Skipped)
	}
}

// TestCheckHTTP500NeedsOnlyTheRun: without an event log (the other rows
// skipped, as booking loadgen does without --database-url) the row "no 500
// answers" is checked from the run's answers alone: it passes when none
// was a 500 and names each 500 otherwise.
func TestCheckHTTP500NeedsOnlyTheRun(t *testing.T) {
	t.Parallel()
	skip := map[audit.Rule]string{}
	for _, r := range audit.Rules {
		if r != audit.HTTP500 {
			skip[r] = "no event log (--database-url)"
		}
	}
	stats := &audit.HTTPStats{}
	stats.Record("POST", "/v1/shows", 201, false, "")
	stats.Record("POST", "/v1/reservations", 503, true, "")
	stats.Record("POST", "/v1/orders", 201, false, "")
	rep := audit.Check(context.Background(), audit.Sources{HTTP: stats}, audit.Options{Skip: skip})
	if row := rep.Row(audit.HTTP500); !rep.OK() || row.Skipped != "" || row.Checked != 3 || rep.Requests != 3 || rep.Gateway[503] != 1 {
		t.Errorf("no log, no 500: OK %v, row %+v, requests %d, gateway %v; want OK, 3 checked, 3 requests, one 503", rep.OK(), row, rep.Requests, rep.Gateway)
	}
	stats.Record("POST", "/v1/orders", 500, false, "boom")
	rep = audit.Check(context.Background(), audit.Sources{HTTP: stats}, audit.Options{Skip: skip})
	if got := rep.Row(audit.HTTP500).Violations; rep.ViolationCount() != 1 || len(got) != 1 || got[0] != "POST /v1/orders answered 500: boom" {
		t.Errorf("no log, one 500: %d violations %q, want exactly the 500", rep.ViolationCount(), rep.Violations())
	}
}
