// Package audit checks the booking service's promise from outside, once the
// service has settled: one order per reservation, the right net charge per
// order, seats conserved per show, every stored event readable, nothing left
// pending. It reads the event log through eventstore.Store (so it works on
// every backend), the provider simulator's charges over HTTP and the shows'
// availability through the API. The end-to-end tests end every scenario
// with it, and `booking loadgen` prints its table after a run.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Rule names one invariant; it is the row label of the report's table.
type Rule string

// The invariants Check verifies, in the order of the report's rows.
const (
	// OrdersPerReservation: at most one order (OrderClaimed or OrderPlaced,
	// by order id) per reservation.
	OrdersPerReservation Rule = "orders per reservation <= 1"
	// NetCharge: per order, the simulator's succeeded charges minus their
	// refunds equal the order's amount if it is confirmed and 0 otherwise
	// (failed or cancelled); a charge naming an order that is not in the log
	// must net 0 (one that names no order is another payment of the
	// account); no PaymentIntent of an order that ended still waits for the
	// customer's action (it is cancelled).
	NetCharge Rule = "net charge per order"
	// Seats: per show, capacity = available (API) + held + ordered, held
	// and ordered counted from the reservation streams.
	Seats Rule = "seats conserved per show"
	// Decodes: every stored event has a known type whose data and
	// metadata decode.
	Decodes Rule = "every event decodes"
	// Settled: no order pending, cancelling or needing review, no refund
	// unanswered, every claim with its consequence, every intent finished
	// (rejected, or its resource's first event stored).
	Settled Rule = "nothing pending or unknown"
	// ReadModels: every read-model table (rm_*) and every projection
	// checkpoint equals, row by row, what `booking projections rebuild`
	// computes from the log (replayed into a scratch database).
	ReadModels Rule = "read models equal the log"
	// NATS: every publishable event of the log is in stream BOOKING
	// exactly once (by event id), no message names an event the log lacks,
	// and Booking-Revision is gap-free per entity.
	NATS Rule = "NATS: every event once, no gaps"
	// HTTP500: no client request was answered 500 (a 500 is a bug; 502,
	// 503 and 504 during injected faults are counted, not violations).
	HTTP500 Rule = "no 500 answers"
)

// Rules lists every rule in report order.
var Rules = []Rule{OrdersPerReservation, NetCharge, Seats, Decodes, Settled, ReadModels, NATS, HTTP500}

// units names what each rule counts in Row.Checked.
var units = map[Rule]string{
	OrdersPerReservation: "reservations",
	NetCharge:            "orders",
	Seats:                "shows",
	Decodes:              "events",
	Settled:              "orders, claims and intents",
	ReadModels:           "rows",
	NATS:                 "events",
	HTTP500:              "requests",
}

// Sources are where Check reads. Log is the event log, which every rule
// but HTTP500 needs (nil: those rules are violated, unless
// Options.Skip names them). SimURL is the provider
// simulator's base URL (GET {SimURL}/_sim/charges); empty skips NetCharge.
// APIURL is the service's base URL (GET {APIURL}/v1/shows/{id} with
// Authorization: Bearer Token); empty skips Seats. Client defaults to a
// client with a 30 s timeout. DatabaseURL is the service's PostgreSQL
// (the live read models; the role must be allowed to CREATE DATABASE for
// the scratch replay); empty skips ReadModels. NATSURL is the server
// holding stream BOOKING; empty skips NATS. HTTP is what the clients saw
// (the load generator's status counts); nil skips HTTP500.
type Sources struct {
	Log         eventstore.Store
	SimURL      string
	APIURL      string
	Token       string
	Client      *http.Client
	DatabaseURL string
	NATSURL     string
	HTTP        *HTTPStats
}

// Options tunes Check. Skip names rules not to check, each with the reason
// the report shows (a scenario that purges streams on purpose, say); a
// skipped rule never fails. Open names orders, by id, that may stay
// pending, cancelling or in review, with the reason (a provider that fails
// every call, a refund it refuses): Settled does not count them, and
// NetCharge checks them only once final. Everything else about them is
// still checked.
// IntentRetention is BOOKING_INTENT_RETENTION of the service, which the
// intents read model applies (default 24h, the service's default).
type Options struct {
	Skip            map[Rule]string
	Open            map[string]string
	IntentRetention time.Duration
}

// Row is one rule's result: how many subjects it checked, and of which
// kind (Unit: reservations, orders, shows, events, rows, requests), and
// what broke, one sentence per violation. Skipped holds the reason a rule
// was not checked. A row neither skipped nor violated that checked nothing
// proves nothing: Report.Unchecked lists it.
type Row struct {
	Rule       Rule     `json:"rule"`
	Checked    int      `json:"checked"`
	Unit       string   `json:"unit"`
	Violations []string `json:"violations"`
	Skipped    string   `json:"skipped,omitempty"`
}

// Report is the outcome of Check: one row per rule in Rules order, and the
// counts of what was read.
// Cancelled, Failed count orders by final status; Refunds counts refunds
// at the simulator (charges with a refunded amount). Messages counts the
// NATS messages read; Published the log's publishable events. Requests,
// Gateway (502–504 by status) and GatewayInFaults (those while a fault was
// injected) come from Sources.HTTP. The JSON form (WriteJSON) uses the
// snake_case names of the tags.
type Report struct {
	Rows             []Row       `json:"rows"`
	Events           int         `json:"events"`
	Shows            int         `json:"shows"`
	Reservations     int         `json:"reservations"`
	Orders           int         `json:"orders"`
	Confirmed        int         `json:"confirmed"`
	Cancelled        int         `json:"cancelled"`
	Failed           int         `json:"failed"`
	Charges          int         `json:"charges"`
	SucceededCharges int         `json:"succeeded_charges"`
	Refunds          int         `json:"refunds"`
	Refunded         int64       `json:"refunded"` // minor units refunded at the simulator, all orders
	Published        int         `json:"published"`
	Messages         int         `json:"nats_messages"`
	Requests         int         `json:"requests"`
	Gateway          map[int]int `json:"gateway_errors,omitempty"`
	GatewayInFaults  int         `json:"gateway_errors_during_faults"`
	// Seats is the seat account of every show checked, by show id.
	Seats map[string]SeatAccount `json:"seats"`
}

// SeatAccount is a show's seats: Capacity from ShowScheduled, Available
// from the API, Held and Ordered from its reservation streams (a
// reservation expired or released holds none).
type SeatAccount struct {
	Capacity  int `json:"capacity"`
	Available int `json:"available"`
	Held      int `json:"held"`
	Ordered   int `json:"ordered"`
}

// OK reports whether no rule has a violation.
func (r Report) OK() bool { return r.ViolationCount() == 0 }

// Unchecked returns the rules whose rows were not skipped, have no
// violation and checked nothing (Checked 0): their OK proves nothing, as
// when a run confirmed no order and the net-charge row had none to check.
func (r Report) Unchecked() []Rule {
	var out []Rule
	for _, row := range r.Rows {
		if row.Skipped == "" && len(row.Violations) == 0 && row.Checked == 0 {
			out = append(out, row.Rule)
		}
	}
	return out
}

// ViolationCount returns the number of violations over every row.
func (r Report) ViolationCount() int {
	n := 0
	for _, row := range r.Rows {
		n += len(row.Violations)
	}
	return n
}

// Violations returns every violation as "rule: sentence", in row order.
func (r Report) Violations() []string {
	var out []string
	for _, row := range r.Rows {
		for _, v := range row.Violations {
			out = append(out, string(row.Rule)+": "+v)
		}
	}
	return out
}

// Row returns the row of rule (the zero Row if absent).
func (r Report) Row(rule Rule) Row {
	for _, row := range r.Rows {
		if row.Rule == rule {
			return row
		}
	}
	return Row{}
}

// WriteTable writes the report as a table, one line per rule with how many
// of what it checked and its verdict ("OK", "NOTHING CHECKED" for a row
// that had nothing to check, the violation count, or "skipped: reason"),
// then each violation (at most limit per rule; limit <= 0 means all).
func (r Report) WriteTable(w io.Writer, limit int) {
	fmt.Fprintf(w, "audit: %d events, %d shows, %d reservations, %d orders (%d confirmed, %d cancelled, %d failed), %d charges (%d succeeded), %d refunds (%d refunded)\n",
		r.Events, r.Shows, r.Reservations, r.Orders, r.Confirmed, r.Cancelled, r.Failed, r.Charges, r.SucceededCharges, r.Refunds, r.Refunded)
	if r.Messages > 0 || r.Published > 0 {
		fmt.Fprintf(w, "audit: %d publishable events, %d NATS messages\n", r.Published, r.Messages)
	}
	if r.Requests > 0 {
		fmt.Fprintf(w, "audit: %d client requests; 502–504: %s (%d while a fault was injected)\n", r.Requests, gatewayText(r.Gateway), r.GatewayInFaults)
	}
	for _, row := range r.Rows {
		verdict := "OK"
		switch {
		case row.Skipped != "":
			verdict = "skipped: " + row.Skipped
		case len(row.Violations) > 0:
			verdict = fmt.Sprintf("%d VIOLATION(S)", len(row.Violations))
		case row.Checked == 0:
			verdict = "NOTHING CHECKED"
		}
		fmt.Fprintf(w, "  %-30s %6d %-36s %s\n", row.Rule, row.Checked, row.Unit+" checked", verdict)
	}
	for _, row := range r.Rows {
		for i, v := range row.Violations {
			if limit > 0 && i == limit {
				fmt.Fprintf(w, "VIOLATION: %s: … and %d more\n", row.Rule, len(row.Violations)-limit)
				break
			}
			fmt.Fprintf(w, "VIOLATION: %s: %s\n", row.Rule, v)
		}
	}
}

// Charge is an entry of the simulator's GET /_sim/charges, one per
// PaymentIntent: Amount and RefundedAmount in minor units; Status the
// PaymentIntent's ("succeeded" once the money moved,
// "requires_payment_method" after a decline, "requires_action",
// "canceled", …); Metadata["order_id"] names the order it pays.
type Charge struct {
	ID             string            `json:"id"`
	IdempotencyKey string            `json:"idempotency_key"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	RefundedAmount int64             `json:"refunded_amount"`
	Metadata       map[string]string `json:"metadata"`
}

// Charges reads GET {simURL}/_sim/charges with client. It returns an error
// for a transport error, a status other than 200 or a body that does not
// decode.
func Charges(ctx context.Context, client *http.Client, simURL string) ([]Charge, error) {
	var out struct {
		Charges []Charge `json:"charges"`
	}
	if err := getJSON(ctx, client, simURL+"/_sim/charges", "", &out); err != nil {
		return nil, err
	}
	return out.Charges, nil
}

// Available reads a show's available seats from GET {apiURL}/v1/shows/{id}.
func Available(ctx context.Context, client *http.Client, apiURL, token, showID string) (int, error) {
	var out struct {
		Available *int `json:"available"`
	}
	if err := getJSON(ctx, client, apiURL+"/v1/shows/"+showID, token, &out); err != nil {
		return 0, err
	}
	if out.Available == nil {
		return 0, fmt.Errorf("GET /v1/shows/%s: no available member", showID)
	}
	return *out.Available, nil
}

func getJSON(ctx context.Context, client *http.Client, url, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, res.StatusCode)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// ReadLog reads the whole log in log order, 1,000 events a page.
func ReadLog(ctx context.Context, log eventstore.Store) ([]eventstore.RecordedEvent, error) {
	var out []eventstore.RecordedEvent
	var after eventstore.Position
	for {
		page, err := log.ReadAll(ctx, after, 1000)
		if err != nil {
			return out, err
		}
		if len(page) == 0 {
			return out, nil
		}
		out = append(out, page...)
		after = page[len(page)-1].Position
	}
}

// state is the log folded per stream with the domain's own Apply.
type state struct {
	shows        map[string]*domain.ShowScheduled
	showOrder    []string
	reservations map[string]*domain.Reservation
	orders       map[string]*domain.Order
	orderOrder   []string
	claims       map[string][]string // reservation id -> order ids claimed or placed
	streams      map[string][]string // stream -> event types, in log order
	intents      []intentRec
}

type intentRec struct {
	stream string
	e      domain.IntentRecorded
}

// Check reads the sources once and checks every rule not skipped. A source
// that cannot be read is a violation of the rules that need it, never a
// silent pass. It blocks until done or ctx ends; safe for concurrent use.
func Check(ctx context.Context, src Sources, opts Options) Report {
	client := src.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	k := newChecking(opts)
	// HTTP500 needs only the run itself (what the clients saw): it is
	// checked whatever the other sources.
	if src.HTTP == nil && k.rows[HTTP500].Skipped == "" {
		k.rows[HTTP500].Skipped = "no client traffic recorded"
	}
	if src.HTTP != nil {
		src.HTTP.report(&k.rep, k.rows[HTTP500], k.violate)
	}
	if src.Log == nil {
		for _, r := range Rules {
			if r != HTTP500 && k.rows[r].Skipped == "" {
				k.violate(r, "no event log to read")
			}
		}
		return k.finish()
	}
	events, err := ReadLog(ctx, src.Log)
	if err != nil {
		for _, r := range Rules {
			if r != HTTP500 {
				k.violate(r, "read the log: %v", err)
			}
		}
		return k.finish()
	}
	k.rep.Events = len(events)
	st := fold(events, k.rows[Decodes], k.violate)
	k.count(st)
	k.checkOrdersPerReservation(st)
	if k.needs(NetCharge, src.SimURL, "no simulator URL") {
		checkCharges(ctx, client, src.SimURL, st, &k.rep, k.rows[NetCharge], k.violate)
	}
	if k.needs(Seats, src.APIURL, "no API URL") {
		k.rep.Seats = checkSeats(ctx, client, src, st, k.rows[Seats], k.violate)
	}
	checkSettled(st, opts.Open, k.rows[Settled], k.violate)
	if k.needs(ReadModels, src.DatabaseURL, "no database URL") {
		retention := opts.IntentRetention
		if retention <= 0 {
			retention = DefaultIntentRetention
		}
		checkReadModels(ctx, src.DatabaseURL, src.Log, retention, k.rows[ReadModels], k.violate)
	}
	if k.needs(NATS, src.NATSURL, "no NATS URL") {
		checkNATS(ctx, src.NATSURL, events, &k.rep, k.rows[NATS], k.violate)
	}
	return k.finish()
}

// checking is one Check: a row per rule (skipped as opts says) and the
// report's counts.
type checking struct {
	rows map[Rule]*Row
	rep  Report
}

func newChecking(opts Options) *checking {
	k := &checking{rows: map[Rule]*Row{}}
	for _, r := range Rules {
		k.rows[r] = &Row{Rule: r, Unit: units[r], Skipped: opts.Skip[r]}
	}
	return k
}

// violate adds a violation of rule r.
func (k *checking) violate(r Rule, format string, args ...any) {
	k.rows[r].Violations = append(k.rows[r].Violations, fmt.Sprintf(format, args...))
}

// needs reports whether rule r is to be checked: not skipped, and its
// source (a URL) given; without the source the row is skipped for reason.
func (k *checking) needs(r Rule, source, reason string) bool {
	if source == "" && k.rows[r].Skipped == "" {
		k.rows[r].Skipped = reason
	}
	return k.rows[r].Skipped == ""
}

// count counts the log's shows, reservations and orders, and the orders
// confirmed, cancelled and failed.
func (k *checking) count(st *state) {
	k.rep.Shows, k.rep.Reservations, k.rep.Orders = len(st.shows), len(st.reservations), len(st.orders)
	for _, o := range st.orders {
		switch o.Status {
		case domain.OrderStatusConfirmed:
			k.rep.Confirmed++
		case domain.OrderStatusCancelled:
			k.rep.Cancelled++
		case domain.OrderStatusFailed:
			k.rep.Failed++
		}
	}
}

// checkOrdersPerReservation: no reservation has more than one order.
func (k *checking) checkOrdersPerReservation(st *state) {
	resIDs := make([]string, 0, len(st.claims))
	for id := range st.claims {
		resIDs = append(resIDs, id)
	}
	sort.Strings(resIDs)
	k.rows[OrdersPerReservation].Checked = len(resIDs)
	for _, id := range resIDs {
		if ids := st.claims[id]; len(ids) > 1 {
			k.violate(OrdersPerReservation, "reservation %s has %d orders: %s", id, len(ids), strings.Join(ids, ", "))
		}
	}
}

// finish returns the report with every row, in the order of Rules; a
// skipped row carries no violations.
func (k *checking) finish() Report {
	for _, r := range Rules {
		row := k.rows[r]
		if row.Skipped != "" {
			row.Violations = nil
		}
		k.rep.Rows = append(k.rep.Rows, *row)
	}
	return k.rep
}

// fold decodes every event and folds it into st; undecodable events are
// Decodes violations.
func fold(events []eventstore.RecordedEvent, row *Row, violate func(Rule, string, ...any)) *state {
	reg := eventstore.NewRegistry(typed(domain.EventTypes())...)
	st := &state{shows: map[string]*domain.ShowScheduled{}, reservations: map[string]*domain.Reservation{},
		orders: map[string]*domain.Order{}, claims: map[string][]string{}, streams: map[string][]string{}}
	claim := func(resID, orderID string) {
		if !slices.Contains(st.claims[resID], orderID) {
			st.claims[resID] = append(st.claims[resID], orderID)
		}
	}
	row.Checked = len(events)
	for _, r := range events {
		st.streams[r.Stream] = append(st.streams[r.Stream], r.Type)
		if _, err := eventstore.DecodeMetadata(r.Metadata); err != nil {
			violate(Decodes, "%s@%d (%s): metadata: %v", r.Stream, r.Revision, r.Type, err)
		}
		ev, err := reg.Decode(r.Type, r.Data)
		if err != nil {
			violate(Decodes, "%s@%d: %v", r.Stream, r.Revision, err)
			continue
		}
		switch e := ev.(type) {
		case domain.ShowScheduled:
			if _, ok := st.shows[e.ShowID]; !ok {
				st.showOrder = append(st.showOrder, e.ShowID)
			}
			st.shows[e.ShowID] = &e
		case domain.OrderClaimed:
			claim(e.ReservationID, e.OrderID)
		case domain.IntentRecorded:
			st.intents = append(st.intents, intentRec{stream: r.Stream, e: e})
		case domain.ReservationHeld, domain.ReservationOrdered, domain.ReservationExpired, domain.ReservationReleased:
			if c, id, _ := domain.CategoryOf(r.Stream); c == domain.CategoryReservation {
				res := st.reservations[id]
				if res == nil {
					res = &domain.Reservation{}
					st.reservations[id] = res
				}
				res.Apply(ev.(domain.Event))
			}
		}
		if c, id, _ := domain.CategoryOf(r.Stream); c == domain.CategoryOrder {
			o := st.orders[id]
			if o == nil {
				o = &domain.Order{}
				st.orders[id] = o
				st.orderOrder = append(st.orderOrder, id)
			}
			if e, ok := ev.(domain.OrderPlaced); ok {
				claim(e.ReservationID, e.OrderID)
			}
			o.Apply(ev.(domain.Event))
		}
	}
	return st
}

func typed(evs []domain.Event) []eventstore.Typed {
	out := make([]eventstore.Typed, len(evs))
	for i, e := range evs {
		out[i] = e
	}
	return out
}

func checkCharges(ctx context.Context, client *http.Client, simURL string, st *state, rep *Report, row *Row, violate func(Rule, string, ...any)) {
	charges, err := Charges(ctx, client, simURL)
	if err != nil {
		violate(NetCharge, "read the simulator's charges: %v", err)
		return
	}
	rep.Charges = len(charges)
	net := map[string]int64{}
	var waiting []string
	for _, c := range charges {
		if c.Status == "requires_action" || c.Status == "processing" {
			waiting = append(waiting, c.ID+" of order "+c.Metadata["order_id"])
		}
		if c.Status != "succeeded" || c.Metadata["order_id"] == "" {
			continue // not paid, or another payment of the account (no order)
		}
		rep.SucceededCharges++
		rep.Refunded += c.RefundedAmount
		if c.RefundedAmount > 0 {
			rep.Refunds++
		}
		net[c.Metadata["order_id"]] += c.Amount - c.RefundedAmount
	}
	for _, id := range st.orderOrder {
		o := st.orders[id]
		var want int64
		switch o.Status {
		case domain.OrderStatusConfirmed:
			want = o.Amount.Amount
		case domain.OrderStatusFailed, domain.OrderStatusCancelled:
		default:
			continue // not final: the Settled row names it
		}
		row.Checked++
		if net[id] != want {
			violate(NetCharge, "order %s (%s): net charge %d, want %d", id, o.Status, net[id], want)
		}
	}
	var stray []string
	for id, n := range net {
		if _, ok := st.orders[id]; !ok && n != 0 {
			stray = append(stray, fmt.Sprintf("charges for %q, which is no order of the log, net %d, want 0", id, n))
		}
	}
	sort.Strings(stray)
	for _, s := range stray {
		violate(NetCharge, "%s", s)
	}
	checkWaiting(st, waiting, row, violate)
}

// checkWaiting reports the PaymentIntents (waiting: "pi_… of order O")
// still waiting for the customer's action or processing at the provider
// whose order ended: an order that ended cancels its payment (or refunds a
// late success), so none may be left waiting.
func checkWaiting(st *state, waiting []string, row *Row, violate func(Rule, string, ...any)) {
	for _, w := range waiting {
		_, id, _ := strings.Cut(w, " of order ")
		if o, ok := st.orders[id]; ok && o.Final() {
			row.Checked++
			violate(NetCharge, "PaymentIntent %s (%s) still waits at the provider: not cancelled", w, o.Status)
		}
	}
}

func checkSeats(ctx context.Context, client *http.Client, src Sources, st *state, row *Row, violate func(Rule, string, ...any)) map[string]SeatAccount {
	out := map[string]SeatAccount{}
	held, ordered := map[string]int{}, map[string]int{}
	for _, r := range st.reservations {
		switch r.Status {
		case domain.ReservationStatusHeld:
			held[r.ShowID] += r.Quantity
		case domain.ReservationStatusOrdered:
			ordered[r.ShowID] += r.Quantity
		}
	}
	for _, id := range st.showOrder {
		avail, err := Available(ctx, client, src.APIURL, src.Token, id)
		if err != nil {
			violate(Seats, "show %s: %v", id, err)
			continue
		}
		row.Checked++
		a := SeatAccount{Capacity: st.shows[id].Capacity, Available: avail, Held: held[id], Ordered: ordered[id]}
		out[id] = a
		if a.Capacity != a.Available+a.Held+a.Ordered {
			violate(Seats, "show %s: capacity %d != available %d + held %d + ordered %d", id, a.Capacity, a.Available, a.Held, a.Ordered)
		}
	}
	return out
}

func checkSettled(st *state, open map[string]string, row *Row, violate func(Rule, string, ...any)) {
	has := func(stream, typ string) bool { return slices.Contains(st.streams[stream], typ) }
	for _, id := range st.orderOrder {
		o := st.orders[id]
		row.Checked++
		switch {
		case !o.Exists():
			violate(Settled, "order %s: events without OrderPlaced (%s)", id, strings.Join(st.streams[domain.OrderStream(id)], ","))
		case open[id] != "":
		case !o.Final():
			violate(Settled, "order %s is %s", id, o.Status)
		case o.Status == domain.OrderStatusNeedsReview:
			violate(Settled, "order %s needs review: %s", id, o.ReviewReason)
		}
		for _, r := range o.PendingRefunds() {
			violate(Settled, "order %s: refund of charge %s requested and unanswered", id, r.ChargeID)
		}
	}
	for stream := range st.streams {
		resID, ok := strings.CutPrefix(stream, domain.CategoryClaim)
		if !ok {
			continue
		}
		row.Checked++
		res := st.reservations[resID]
		for _, orderID := range st.claims[resID] {
			if !has(domain.OrderStream(orderID), domain.TypeOrderPlaced) {
				violate(Settled, "order claim %s of reservation %s without its OrderPlaced", orderID, resID)
			}
		}
		if has(stream, domain.TypeExpiryClaimed) && (res == nil || res.Status != domain.ReservationStatusExpired) {
			violate(Settled, "expiry claim of reservation %s without its ReservationExpired", resID)
		}
	}
	for _, in := range st.intents {
		row.Checked++
		if has(in.stream, domain.TypeIntentRejected) {
			continue
		}
		var res, typ string
		switch in.e.Operation {
		case commands.OpPlaceOrder:
			res, typ = domain.OrderStream(in.e.TargetID), domain.TypeOrderPlaced
		case commands.OpReserveSeats:
			res, typ = domain.ReservationStream(in.e.TargetID), domain.TypeReservationHeld
		case commands.OpScheduleShow:
			res, typ = domain.ShowStream(in.e.TargetID), domain.TypeShowScheduled
		default:
			continue
		}
		if !has(res, typ) {
			violate(Settled, "intent %s (%s → %s) unfinished", in.stream, in.e.Operation, in.e.TargetID)
		}
	}
	sort.Strings(row.Violations)
}

// ErrViolations is matched (errors.Is) by the error of Err.
var ErrViolations = errors.New("audit: invariant violations")

// WriteJSON writes r as one JSON object (the Report's tags) to w.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Err returns nil if r is OK, or an error matching ErrViolations that counts them.
func (r Report) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("%w: %d", ErrViolations, r.ViolationCount())
}
