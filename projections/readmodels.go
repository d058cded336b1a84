package projections

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/retrysafe/booking/domain"
)

// Each projection folds events into rows in Go, mirroring the deciders'
// Apply in package domain, with two rules: an event at or below a row's
// revision changes nothing, and an event other than a stream's opening one
// changes nothing if its row does not exist.

// batchFold is one projection's work on one batch: route notes the rows the
// events touch, apply folds each event into them once they are loaded, and
// finish queues statements that follow the written rows.
type batchFold interface {
	route(e *envelope) error
	loaders() []rowLoader
	apply(e *envelope) error
	finish(q *queue)
}

// ---- orders ----

var ordersTable = &tableSpec{name: "rm_orders", cols: []column{
	{"id", "uuid"}, {"actor", "text"}, {"reservation_id", "uuid"}, {"show_id", "uuid"}, {"intent", "text"},
	{"status", "text"}, {"fail_reason", "text"}, {"review_reason", "text"}, {"quantity", "integer"},
	{"amount", "bigint"}, {"currency", "text"}, {"payment_deadline", "timestamptz"}, {"attempts", "integer"},
	{"last_outcome", "text"}, {"unknown_since", "timestamptz"}, {"charge_id", "text"}, {"refunds", "jsonb"},
	{"ticket_count", "integer"}, {"ticket_ids", "jsonb"}, {"created_at", "timestamptz"}, {"updated_at", "timestamptz"},
	{"revision", "bigint"}, {"refund_backlog", "jsonb"}, {"refunds_pending", "integer"}, {"refund_pending_since", "timestamptz"},
	{"refunds_refused", "integer"}, {"secrets_shredded_at", "timestamptz"},
}}

// orderRow is a row of rm_orders. LastOutcome is the outcome of attempt
// Attempts (the current one); Refunds maps charge ids to "requested" or
// "succeeded" (a refund the provider refused stays "requested": it is still
// owed, and the order is in review); RefundBacklog holds the refunds not
// succeeded, from which the backlog columns are derived. SecretsShreddedAt
// is when the order's data key was deleted (PaymentSecretsShredded's
// shredded_at), nil until that is recorded.
type orderRow struct {
	ID, Actor, ReservationID, ShowID, Intent string
	Status, FailReason, ReviewReason         string
	Quantity, Amount                         int64
	Currency                                 string
	PaymentDeadline                          time.Time
	Attempts                                 int64
	LastOutcome                              string
	UnknownSince                             *time.Time
	ChargeID                                 string
	Refunds                                  map[string]string
	TicketIDs                                []string
	CreatedAt, UpdatedAt                     time.Time
	Revision                                 int64
	RefundBacklog                            map[string]refundDue
	SecretsShreddedAt                        *time.Time
}

// refundDue is an entry of rm_orders.refund_backlog: a refund requested at
// RequestedAt (event time) and not succeeded; Refused once the provider
// refused it.
type refundDue struct {
	RequestedAt time.Time `json:"requested_at"`
	Refused     bool      `json:"refused,omitempty"`
}

// refundBacklog derives the backlog columns: refunds pending (not refused),
// the oldest request among them, refunds refused.
func refundBacklog(b map[string]refundDue) (pending int64, since *time.Time, refused int64) {
	for _, d := range b {
		if d.Refused {
			refused++
			continue
		}
		pending++
		if since == nil || d.RequestedAt.Before(*since) {
			at := d.RequestedAt
			since = &at
		}
	}
	return pending, since, refused
}

// backlog returns the row's refund backlog, made if nil.
func (r *orderRow) backlog() map[string]refundDue {
	if r.RefundBacklog == nil {
		r.RefundBacklog = map[string]refundDue{}
	}
	return r.RefundBacklog
}

func scanOrder(row pgx.Row) (*orderRow, error) {
	var (
		r                 orderRow
		refunds, tickets  string
		ticketCount       int64
		deadline, cr, upd time.Time
		unknown           *time.Time
		backlog           string
		pending, refused  int64 // derived from backlog when written
		pendingSince      *time.Time
		shredded          *time.Time
	)
	if err := row.Scan(&r.ID, &r.Actor, &r.ReservationID, &r.ShowID, &r.Intent, &r.Status, &r.FailReason, &r.ReviewReason,
		&r.Quantity, &r.Amount, &r.Currency, &deadline, &r.Attempts, &r.LastOutcome, &unknown, &r.ChargeID, &refunds,
		&ticketCount, &tickets, &cr, &upd, &r.Revision, &backlog, &pending, &pendingSince, &refused, &shredded); err != nil {
		return nil, fmt.Errorf("scan rm_orders: %w", err)
	}
	if err := json.Unmarshal([]byte(refunds), &r.Refunds); err != nil {
		return nil, fmt.Errorf("rm_orders %s refunds: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(backlog), &r.RefundBacklog); err != nil {
		return nil, fmt.Errorf("rm_orders %s refund_backlog: %w", r.ID, err)
	}
	for k, d := range r.RefundBacklog {
		d.RequestedAt = d.RequestedAt.UTC()
		r.RefundBacklog[k] = d
	}
	if err := json.Unmarshal([]byte(tickets), &r.TicketIDs); err != nil {
		return nil, fmt.Errorf("rm_orders %s ticket_ids: %w", r.ID, err)
	}
	r.PaymentDeadline, r.CreatedAt, r.UpdatedAt = deadline.UTC(), cr.UTC(), upd.UTC()
	if unknown != nil {
		u := unknown.UTC()
		r.UnknownSince = &u
	}
	if shredded != nil {
		u := shredded.UTC()
		r.SecretsShreddedAt = &u
	}
	return &r, nil
}

func orderText(r *orderRow) []pgtype.Text {
	refunds, _ := json.Marshal(r.Refunds) // map keys sorted: deterministic
	if r.Refunds == nil {
		refunds = []byte("{}")
	}
	tickets, _ := json.Marshal(r.TicketIDs)
	if r.TicketIDs == nil {
		tickets = []byte("[]")
	}
	backlog, _ := json.Marshal(r.RefundBacklog) // map keys sorted: deterministic
	if r.RefundBacklog == nil {
		backlog = []byte("{}")
	}
	pending, since, refused := refundBacklog(r.RefundBacklog)
	return []pgtype.Text{txt(r.ID), txt(r.Actor), txt(r.ReservationID), txt(r.ShowID), txt(r.Intent), txt(r.Status),
		txt(r.FailReason), txt(r.ReviewReason), txtInt(r.Quantity), txtInt(r.Amount), txt(r.Currency), txtTime(r.PaymentDeadline),
		txtInt(r.Attempts), txt(r.LastOutcome), txtTimePtr(r.UnknownSince), txt(r.ChargeID), txt(string(refunds)),
		txtInt(int64(len(r.TicketIDs))), txt(string(tickets)), txtTime(r.CreatedAt), txtTime(r.UpdatedAt), txtInt(r.Revision),
		txt(string(backlog)), txtInt(pending), txtTimePtr(since), txtInt(refused), txtTimePtr(r.SecretsShreddedAt)}
}

// Orders returns the projection of order streams into rm_orders.
func Orders() *Projection {
	return &Projection{name: NameOrders, tables: []string{ordersTable.name}, begin: func() batchFold {
		return &ordersFold{orders: newRowSet(ordersTable, scanOrder, orderText, func(r *orderRow) string { return r.ID })}
	}}
}

type ordersFold struct{ orders *rowSet[orderRow] }

var orderEvents = map[string]bool{domain.TypeOrderPlaced: true, domain.TypePaymentAttemptStarted: true, domain.TypePaymentSucceeded: true,
	domain.TypePaymentFailed: true, domain.TypePaymentOutcomeUnknown: true, domain.TypePaymentActionRequired: true, domain.TypeOrderConfirmed: true, domain.TypeOrderFailed: true,
	domain.TypeOrderCancelRequested: true, domain.TypeOrderCancelled: true, domain.TypeRefundRequested: true, domain.TypeRefundSucceeded: true, domain.TypeRefundRefused: true,
	domain.TypeOrderNeedsReview: true, domain.TypePaymentSecretsShredded: true}

func (f *ordersFold) loaders() []rowLoader { return []rowLoader{f.orders} }
func (f *ordersFold) finish(*queue)        {}

func (f *ordersFold) route(e *envelope) error {
	if !orderEvents[e.typ] {
		return nil
	}
	if e.opens(domain.TypeOrderPlaced) {
		return f.orders.needOpened(e.rowKey(orderPrefix))
	}
	return f.orders.needKey(e.rowKey(orderPrefix))
}

func (f *ordersFold) apply(e *envelope) error {
	if !orderEvents[e.typ] {
		return nil
	}
	key, r, o, ok, err := rowFor[domain.OrderPlaced](e, f.orders, orderPrefix, domain.TypeOrderPlaced, func(r *orderRow) int64 { return r.Revision })
	if !ok {
		return err
	}
	if o != nil {
		return f.placed(e, key, o)
	}
	switch e.typ {
	case domain.TypePaymentAttemptStarted, domain.TypePaymentSucceeded, domain.TypePaymentFailed, domain.TypePaymentOutcomeUnknown,
		domain.TypePaymentActionRequired:
		p, err := e.payment()
		if err != nil {
			return err
		}
		applyPayment(r, e, p)
	case domain.TypeRefundRequested, domain.TypeRefundSucceeded, domain.TypeRefundRefused:
		p, err := e.payment()
		if err != nil {
			return err
		}
		applyRefund(r, e, p)
	case domain.TypeOrderConfirmed:
		c, err := decodeAs[domain.OrderConfirmed](e)
		if err != nil {
			return err
		}
		r.Status, r.TicketIDs = "confirmed", make([]string, len(c.Tickets))
		for i, t := range c.Tickets {
			r.TicketIDs[i] = t.ID
		}
	case domain.TypeOrderFailed, domain.TypeOrderNeedsReview:
		ev, err := e.event()
		if err != nil {
			return err
		}
		switch ev := ev.(type) {
		case domain.OrderFailed:
			r.Status, r.FailReason = "failed", ev.Reason
		case domain.OrderNeedsReview:
			r.Status, r.ReviewReason = "needs_review", ev.Reason
		}
	case domain.TypePaymentSecretsShredded:
		// Not a change of the order the API shows: updated_at stays.
		p, err := decodeAs[domain.PaymentSecretsShredded](e)
		if err != nil {
			return err
		}
		at := micro(p.ShreddedAt)
		r.SecretsShreddedAt, r.Revision = &at, e.revision
		f.orders.put(r)
		return nil
	case domain.TypeOrderCancelRequested:
		r.Status = "cancelling"
	case domain.TypeOrderCancelled:
		r.Status = "cancelled"
	}
	r.Revision, r.UpdatedAt = e.revision, e.at
	f.orders.put(r)
	return nil
}

// placed opens the row key of an order from its OrderPlaced o.
func (f *ordersFold) placed(e *envelope, key string, o *domain.OrderPlaced) error {
	resID, err := e.canonUUID(o.ReservationID, "reservation_id")
	if err != nil {
		return err
	}
	showID, err := e.canonUUID(o.ShowID, "show_id")
	if err != nil {
		return err
	}
	f.orders.put(&orderRow{ID: key, Actor: o.Actor, ReservationID: resID, ShowID: showID, Intent: o.Intent,
		Status: "pending", Quantity: int64(o.Quantity), Amount: o.Amount.Amount, Currency: o.Amount.Currency,
		PaymentDeadline: micro(o.PaymentDeadline), Refunds: map[string]string{}, TicketIDs: []string{},
		RefundBacklog: map[string]refundDue{}, CreatedAt: e.at, UpdatedAt: e.at, Revision: e.revision})
	return nil
}

// applyPayment folds a payment attempt's start or outcome p (event e) into
// r's current attempt and last outcome.
func applyPayment(r *orderRow, e *envelope, p paymentFact) {
	n := int64(p.Attempt)
	switch e.typ {
	case domain.TypePaymentAttemptStarted: // a new attempt has no outcome; a takeover changes nothing
		if n > r.Attempts {
			r.Attempts, r.LastOutcome, r.UnknownSince = n, "", nil
		}
	case domain.TypePaymentSucceeded: // the first success while pending or cancelling pays the order
		if n == r.Attempts {
			r.LastOutcome, r.UnknownSince = "succeeded", nil
		}
		if r.ChargeID == "" && (r.Status == "pending" || r.Status == "cancelling") {
			r.ChargeID = p.ChargeID
		}
	case domain.TypePaymentFailed:
		if n == r.Attempts && r.LastOutcome != "succeeded" {
			r.LastOutcome, r.UnknownSince = "failed", nil
		}
	case domain.TypePaymentOutcomeUnknown:
		if n == r.Attempts && r.LastOutcome == "" {
			at := e.at
			r.LastOutcome, r.UnknownSince = "unknown", &at
		}
	case domain.TypePaymentActionRequired: // waits for the customer: a known, pending outcome
		if n == r.Attempts && (r.LastOutcome == "" || r.LastOutcome == "unknown") {
			r.LastOutcome, r.UnknownSince = "requires_action", nil
		}
	}
}

// applyRefund folds a refund's request or outcome p (event e) into r's
// refunds and refund backlog.
func applyRefund(r *orderRow, e *envelope, p paymentFact) {
	switch e.typ {
	case domain.TypeRefundRequested:
		if _, ok := r.Refunds[p.ChargeID]; !ok {
			r.Refunds[p.ChargeID] = "requested"
			r.backlog()[p.ChargeID] = refundDue{RequestedAt: e.at.UTC()}
		}
	case domain.TypeRefundSucceeded:
		if _, ok := r.Refunds[p.ChargeID]; ok {
			r.Refunds[p.ChargeID] = "succeeded"
			delete(r.backlog(), p.ChargeID)
		}
	case domain.TypeRefundRefused: // the refund is no longer sent; the order goes to review
		if d, ok := r.backlog()[p.ChargeID]; ok {
			d.Refused = true
			r.RefundBacklog[p.ChargeID] = d
		}
	}
}

// ---- reservations ----

var reservationsTable = &tableSpec{name: "rm_reservations", cols: []column{
	{"id", "uuid"}, {"actor", "text"}, {"show_id", "uuid"}, {"quantity", "integer"}, {"amount", "bigint"},
	{"currency", "text"}, {"expires_at", "timestamptz"}, {"status", "text"}, {"order_id", "text"},
	{"release_reason", "text"}, {"created_at", "timestamptz"}, {"updated_at", "timestamptz"}, {"revision", "bigint"},
}}

type reservationRow struct {
	ID, Actor, ShowID              string
	Quantity, Amount               int64
	Currency                       string
	ExpiresAt                      time.Time
	Status, OrderID, ReleaseReason string
	CreatedAt, UpdatedAt           time.Time
	Revision                       int64
}

func scanReservation(row pgx.Row) (*reservationRow, error) {
	var r reservationRow
	return &r, scanRow(row, "rm_reservations", []*time.Time{&r.ExpiresAt, &r.CreatedAt, &r.UpdatedAt},
		&r.ID, &r.Actor, &r.ShowID, &r.Quantity, &r.Amount, &r.Currency, &r.ExpiresAt, &r.Status, &r.OrderID, &r.ReleaseReason, &r.CreatedAt, &r.UpdatedAt, &r.Revision)
}

func reservationText(r *reservationRow) []pgtype.Text {
	return []pgtype.Text{txt(r.ID), txt(r.Actor), txt(r.ShowID), txtInt(r.Quantity), txtInt(r.Amount), txt(r.Currency),
		txtTime(r.ExpiresAt), txt(r.Status), txt(r.OrderID), txt(r.ReleaseReason), txtTime(r.CreatedAt), txtTime(r.UpdatedAt),
		txtInt(r.Revision)}
}

// Reservations returns the projection of reservation streams into
// rm_reservations.
func Reservations() *Projection {
	return &Projection{name: NameReservations, tables: []string{reservationsTable.name}, begin: func() batchFold {
		return &reservationsFold{res: newRowSet(reservationsTable, scanReservation, reservationText, func(r *reservationRow) string { return r.ID })}
	}}
}

type reservationsFold struct{ res *rowSet[reservationRow] }

var reservationEvents = map[string]string{domain.TypeReservationHeld: "held", domain.TypeReservationOrdered: "ordered",
	domain.TypeReservationExpired: "expired", domain.TypeReservationReleased: "released"}

func (f *reservationsFold) loaders() []rowLoader { return []rowLoader{f.res} }
func (f *reservationsFold) finish(*queue)        {}

func (f *reservationsFold) route(e *envelope) error {
	if reservationEvents[e.typ] == "" {
		return nil
	}
	if e.opens(domain.TypeReservationHeld) {
		return f.res.needOpened(e.rowKey(reservationPrefix))
	}
	return f.res.needKey(e.rowKey(reservationPrefix))
}

// rowFor finds the row that e, an event of a stream opened by events of type
// opening, acts on among rows, keyed by the stream id after prefix (revision
// gives a row's revision). It returns ok false, and the error if any, when e
// changes nothing: an opening event whose row exists, or another event whose
// row is missing or already at or past e. Otherwise r is the row to change,
// or nil when e opens the stream and the caller creates the row; then open
// is e decoded as an O (the opening event's payload), and a payload that
// does not decode is the error.
func rowFor[O domain.Event, R any](e *envelope, rows *rowSet[R], prefix, opening string, revision func(*R) int64) (key string, r *R, open *O, ok bool, err error) {
	if key, err = e.rowKey(prefix); err != nil {
		return key, nil, nil, false, err
	}
	r = rows.get(key)
	if e.typ != opening {
		return key, r, nil, r != nil && e.revision > revision(r), nil
	}
	if r != nil {
		return key, nil, nil, false, nil
	}
	o, err := decodeAs[O](e)
	if err != nil {
		return key, nil, nil, false, err
	}
	return key, nil, &o, true, nil
}

// reservationFact is what the reservations and shows projections read from
// a reservation event: the row key and the status the event sets, and for
// ReservationHeld the decoded event with its show id in canonical form.
type reservationFact struct {
	key, status string
	held        *domain.ReservationHeld // nil unless the event is ReservationHeld
	showID      string                  // held.ShowID, canonical
}

// readReservation reads reservation event e for a fold whose rows (of type
// R, with revision giving a row's revision) are keyed by reservation id. It
// returns ok false, and the error if any, when e changes nothing: not a
// reservation event, a ReservationHeld whose row exists, or another event
// whose row is missing or already at or past e. Otherwise it returns the
// row to change (nil for ReservationHeld, whose row the caller creates).
func readReservation[R any](e *envelope, rows *rowSet[R], revision func(*R) int64) (fact reservationFact, r *R, ok bool, err error) {
	fact.status = reservationEvents[e.typ]
	if fact.status == "" {
		return fact, nil, false, nil
	}
	fact.key, r, fact.held, ok, err = rowFor[domain.ReservationHeld](e, rows, reservationPrefix, domain.TypeReservationHeld, revision)
	if !ok || r != nil {
		return fact, r, ok, err
	}
	fact.showID, err = e.canonUUID(fact.held.ShowID, "show_id")
	return fact, nil, err == nil, err
}

func (f *reservationsFold) apply(e *envelope) error {
	fact, r, ok, err := readReservation(e, f.res, func(r *reservationRow) int64 { return r.Revision })
	if !ok {
		return err
	}
	if h := fact.held; h != nil {
		f.res.put(&reservationRow{ID: fact.key, Actor: h.Actor, ShowID: fact.showID, Quantity: int64(h.Quantity), Amount: h.Amount.Amount,
			Currency: h.Amount.Currency, ExpiresAt: micro(h.ExpiresAt), Status: fact.status, CreatedAt: e.at, UpdatedAt: e.at, Revision: e.revision})
		return nil
	}
	orderID, reason, err := e.reservationChange()
	if err != nil {
		return err
	}
	r.Status, r.ReleaseReason = fact.status, reason
	if orderID != "" {
		r.OrderID = orderID
	}
	r.Revision, r.UpdatedAt = e.revision, e.at
	f.res.put(r)
	return nil
}

// ---- shows ----

var (
	showsTable = &tableSpec{name: "rm_shows", cols: []column{
		{"id", "uuid"}, {"name", "text"}, {"starts_at", "timestamptz"}, {"capacity", "integer"}, {"price_amount", "bigint"},
		{"price_currency", "text"}, {"taken", "integer"}, {"holds", "integer"}, {"created_at", "timestamptz"},
		{"updated_at", "timestamptz"}, {"revision", "bigint"},
	}}
	showReservationsTable = &tableSpec{name: "rm_show_reservations", cols: []column{
		{"reservation_id", "uuid"}, {"show_id", "uuid"}, {"quantity", "integer"}, {"status", "text"}, {"revision", "bigint"},
	}}
	// rm_show_sales rows are written as deltas added to the stored value.
	showSalesTable = &tableSpec{name: "rm_show_sales", cols: []column{{"show_id", "uuid"}, {"ordered", "integer"}},
		merge: "ordered = t.ordered + excluded.ordered"}
)

type showRow struct {
	ID, Name              string
	StartsAt              time.Time
	Capacity, PriceAmount int64
	PriceCurrency         string
	Taken, Holds          int64
	CreatedAt, UpdatedAt  time.Time
	Revision              int64
}

func scanShow(row pgx.Row) (*showRow, error) {
	var r showRow
	return &r, scanRow(row, "rm_shows", []*time.Time{&r.StartsAt, &r.CreatedAt, &r.UpdatedAt},
		&r.ID, &r.Name, &r.StartsAt, &r.Capacity, &r.PriceAmount, &r.PriceCurrency, &r.Taken, &r.Holds, &r.CreatedAt, &r.UpdatedAt, &r.Revision)
}

func showText(r *showRow) []pgtype.Text {
	return []pgtype.Text{txt(r.ID), txt(r.Name), txtTime(r.StartsAt), txtInt(r.Capacity), txtInt(r.PriceAmount), txt(r.PriceCurrency),
		txtInt(r.Taken), txtInt(r.Holds), txtTime(r.CreatedAt), txtTime(r.UpdatedAt), txtInt(r.Revision)}
}

type showReservationRow struct {
	ReservationID, ShowID string
	Quantity              int64
	Status                string
	Revision              int64
}

func scanShowReservation(row pgx.Row) (*showReservationRow, error) {
	var r showReservationRow
	return &r, scanRow(row, "rm_show_reservations", nil,
		&r.ReservationID, &r.ShowID, &r.Quantity, &r.Status, &r.Revision)
}

func showReservationText(r *showReservationRow) []pgtype.Text {
	return []pgtype.Text{txt(r.ReservationID), txt(r.ShowID), txtInt(r.Quantity), txt(r.Status), txtInt(r.Revision)}
}

// showSale is a delta of a show's ordered seats (never loaded).
type showSale struct {
	ShowID  string
	Ordered int64
}

func scanShowSale(row pgx.Row) (*showSale, error) {
	var r showSale
	return &r, scanRow(row, "rm_show_sales", nil, &r.ShowID, &r.Ordered)
}

func showSaleText(r *showSale) []pgtype.Text { return []pgtype.Text{txt(r.ShowID), txtInt(r.Ordered)} }

// Shows returns the show availability projection: show streams into
// rm_shows, and reservation streams into rm_show_reservations and its
// per-show aggregate rm_show_sales (the seats of ordered reservations).
func Shows() *Projection {
	return &Projection{name: NameShows, tables: []string{showsTable.name, showReservationsTable.name, showSalesTable.name},
		begin: func() batchFold {
			return &showsFold{
				shows: newRowSet(showsTable, scanShow, showText, func(r *showRow) string { return r.ID }),
				res: newRowSet(showReservationsTable, scanShowReservation, showReservationText,
					func(r *showReservationRow) string { return r.ReservationID }),
				sales: newRowSet(showSalesTable, scanShowSale, showSaleText, func(r *showSale) string { return r.ShowID }),
			}
		}}
}

type showsFold struct {
	shows *rowSet[showRow]
	res   *rowSet[showReservationRow]
	sales *rowSet[showSale]
}

func (f *showsFold) loaders() []rowLoader { return []rowLoader{f.shows, f.res, f.sales} }
func (f *showsFold) finish(*queue)        {}

func (f *showsFold) route(e *envelope) error {
	switch e.typ {
	case domain.TypeShowScheduled, domain.TypeSeatsHeld, domain.TypeSeatsReleased:
		if e.opens(domain.TypeShowScheduled) {
			return f.shows.needOpened(e.rowKey(showPrefix))
		}
		return f.shows.needKey(e.rowKey(showPrefix))
	}
	if reservationEvents[e.typ] != "" {
		if e.opens(domain.TypeReservationHeld) {
			return f.res.needOpened(e.rowKey(reservationPrefix))
		}
		return f.res.needKey(e.rowKey(reservationPrefix))
	}
	return nil
}

func (f *showsFold) apply(e *envelope) error {
	switch e.typ {
	case domain.TypeShowScheduled, domain.TypeSeatsHeld, domain.TypeSeatsReleased:
		key, r, sc, ok, err := rowFor[domain.ShowScheduled](e, f.shows, showPrefix, domain.TypeShowScheduled, func(r *showRow) int64 { return r.Revision })
		if !ok {
			return err
		}
		if sc != nil {
			f.shows.put(&showRow{ID: key, Name: sc.Name, StartsAt: micro(sc.StartsAt), Capacity: int64(sc.Capacity),
				PriceAmount: sc.Price.Amount, PriceCurrency: sc.Price.Currency, CreatedAt: e.at, UpdatedAt: e.at, Revision: e.revision})
			return nil
		}
		n, err := e.seats()
		if err != nil {
			return err
		}
		if e.typ == domain.TypeSeatsHeld {
			r.Taken, r.Holds = r.Taken+int64(n), r.Holds+1
		} else {
			r.Taken, r.Holds = r.Taken-int64(n), r.Holds-1
		}
		r.Revision, r.UpdatedAt = e.revision, e.at
		f.shows.put(r)
		return nil
	}
	fact, r, ok, err := readReservation(e, f.res, func(r *showReservationRow) int64 { return r.Revision })
	if !ok {
		return err
	}
	if h := fact.held; h != nil {
		f.res.put(&showReservationRow{ReservationID: fact.key, ShowID: fact.showID, Quantity: int64(h.Quantity), Status: fact.status, Revision: e.revision})
		return nil
	}
	status := fact.status
	if was, is := r.Status == "ordered", status == "ordered"; was != is {
		if is {
			f.sale(r.ShowID, r.Quantity)
		} else {
			f.sale(r.ShowID, -r.Quantity)
		}
	}
	r.Status, r.Revision = status, e.revision
	f.res.put(r)
	return nil
}

// sale adds delta to the batch's change of show's ordered seats.
func (f *showsFold) sale(show string, delta int64) {
	s := f.sales.get(show)
	if s == nil {
		s = &showSale{ShowID: show}
	}
	s.Ordered += delta
	f.sales.put(s)
}

// ---- intents ----

var (
	intentsTable = &tableSpec{name: "rm_intents", cols: []column{
		{"stream", "text"}, {"actor", "text"}, {"operation", "text"}, {"target_id", "text"}, {"executor", "text"},
		{"lease_until", "timestamptz"}, {"takeovers", "integer"}, {"rejection_status", "integer"}, {"rejection_code", "text"},
		{"recorded_at", "timestamptz"}, {"updated_at", "timestamptz"}, {"revision", "bigint"},
	}}
	intentTargetsTable = &tableSpec{name: "rm_intent_targets", cols: []column{
		{"id", "text"}, {"kind", "text"}, {"status", "text"}, {"updated_at", "timestamptz"}, {"revision", "bigint"},
	}}
)

type intentRow struct {
	Stream, Actor, Operation, TargetID, Executor string
	LeaseUntil                                   time.Time
	Takeovers, RejectionStatus                   int64
	RejectionCode                                string
	RecordedAt, UpdatedAt                        time.Time
	Revision                                     int64
}

func scanIntent(row pgx.Row) (*intentRow, error) {
	var r intentRow
	return &r, scanRow(row, "rm_intents", []*time.Time{&r.LeaseUntil, &r.RecordedAt, &r.UpdatedAt},
		&r.Stream, &r.Actor, &r.Operation, &r.TargetID, &r.Executor, &r.LeaseUntil, &r.Takeovers, &r.RejectionStatus, &r.RejectionCode, &r.RecordedAt, &r.UpdatedAt, &r.Revision)
}

func intentText(r *intentRow) []pgtype.Text {
	return []pgtype.Text{txt(r.Stream), txt(r.Actor), txt(r.Operation), txt(r.TargetID), txt(r.Executor), txtTime(r.LeaseUntil),
		txtInt(r.Takeovers), txtInt(r.RejectionStatus), txt(r.RejectionCode), txtTime(r.RecordedAt), txtTime(r.UpdatedAt), txtInt(r.Revision)}
}

type targetRow struct {
	ID, Kind, Status string
	UpdatedAt        time.Time
	Revision         int64
}

func scanTarget(row pgx.Row) (*targetRow, error) {
	var r targetRow
	return &r, scanRow(row, "rm_intent_targets", []*time.Time{&r.UpdatedAt},
		&r.ID, &r.Kind, &r.Status, &r.UpdatedAt, &r.Revision)
}

func targetText(r *targetRow) []pgtype.Text {
	return []pgtype.Text{txt(r.ID), txt(r.Kind), txt(r.Status), txtTime(r.UpdatedAt), txtInt(r.Revision)}
}

// Intents returns the intents view: intent streams into rm_intents, and the
// status of their targets (show, reservation and order streams) into
// rm_intent_targets. Rows of intents recorded more than retention before the
// log clock (the latest occurred_at applied) are deleted, as the event store
// purges their streams; retention <= 0 keeps every row.
func Intents(retention time.Duration) *Projection {
	return &Projection{name: NameIntents, tables: []string{intentsTable.name, intentTargetsTable.name}, begin: func() batchFold {
		return &intentsFold{retention: retention,
			intents: newRowSet(intentsTable, scanIntent, intentText, func(r *intentRow) string { return r.Stream }),
			targets: newRowSet(intentTargetsTable, scanTarget, targetText, func(r *targetRow) string { return r.ID })}
	}}
}

type intentsFold struct {
	retention time.Duration
	intents   *rowSet[intentRow]
	targets   *rowSet[targetRow]
	// oldest is, during a bulk fill, a lower bound of recorded_at of the
	// rows in memory (zero: unknown), so prune scans them only when one
	// may have expired.
	oldest time.Time
}

// targetEvents maps the events that open or change an intent's target to
// the target's kind, stream prefix and status.
var targetEvents = map[string]struct{ kind, prefix, status string }{
	domain.TypeShowScheduled:        {"show", showPrefix, "scheduled"},
	domain.TypeReservationHeld:      {"reservation", reservationPrefix, "held"},
	domain.TypeOrderPlaced:          {"order", orderPrefix, "pending"},
	domain.TypeOrderConfirmed:       {"order", orderPrefix, "confirmed"},
	domain.TypeOrderFailed:          {"order", orderPrefix, "failed"},
	domain.TypeOrderCancelRequested: {"order", orderPrefix, "cancelling"},
	domain.TypeOrderCancelled:       {"order", orderPrefix, "cancelled"},
	domain.TypeOrderNeedsReview:     {"order", orderPrefix, "needs_review"},
}

var openingEvents = map[string]bool{domain.TypeShowScheduled: true, domain.TypeReservationHeld: true, domain.TypeOrderPlaced: true}

func (f *intentsFold) loaders() []rowLoader { return []rowLoader{f.intents, f.targets} }

// finish deletes the rows past retention, but only when there can be any:
// when the cutoff has moved to a new pruneStep since this projector last
// deleted (bound.pruned), or when the batch itself wrote a row at or before
// the cutoff (an intent recorded a retention before the log clock). Between
// two such deletes no row at or before the cutoff can be in the table, so
// the statement is sent about once per pruneStep of log time instead of
// once per batch (ARCHITECTURE.md, "Performance").
func (f *intentsFold) finish(q *queue) {
	if f.retention <= 0 || q.logTime.IsZero() {
		return
	}
	cutoff := pruneCutoff(q.logTime, f.retention)
	if !cutoff.After(q.b.pruned) && !f.wroteExpired(cutoff) {
		return
	}
	q.add(sqlIntentsPrune, cutoff)
	q.pruned = cutoff
}

// pruneStep is the granularity of the intents view's retention cutoff.
const pruneStep = time.Minute

// pruneCutoff is the recorded_at at or before which the intents view
// forgets an intent, at log clock logTime: logTime - retention, truncated to
// pruneStep (the same for live projectors and rebuilds, so both keep the
// same rows; a row is kept at most pruneStep past its retention).
func pruneCutoff(logTime time.Time, retention time.Duration) time.Time {
	return logTime.Add(-retention).Truncate(pruneStep)
}

// wroteExpired reports whether the batch changed an intent row recorded at
// or before cutoff.
func (f *intentsFold) wroteExpired(cutoff time.Time) bool {
	for _, k := range f.intents.dirty {
		if r := f.intents.rows[k]; r != nil && !r.RecordedAt.After(cutoff) {
			return true
		}
	}
	return false
}

// prune implements pruner for a rebuild's bulk fill: the same rule as
// sqlIntentsPrune, on the rows in memory.
func (f *intentsFold) prune(logTime time.Time, keys []string) (string, any) {
	if f.retention <= 0 {
		return "", nil
	}
	cutoff := pruneCutoff(logTime, f.retention)
	expired := func(k string) {
		if r := f.intents.get(k); r != nil && !r.RecordedAt.After(cutoff) {
			f.intents.remove(k)
		}
	}
	if keys == nil && (f.oldest.IsZero() || !f.oldest.After(cutoff)) {
		// Scan only when the oldest row in memory may have expired.
		f.oldest = time.Time{}
		for k, r := range f.intents.rows {
			expired(k)
			if _, kept := f.intents.rows[k]; kept && (f.oldest.IsZero() || r.RecordedAt.Before(f.oldest)) {
				f.oldest = r.RecordedAt
			}
		}
	}
	for _, k := range keys {
		expired(k)
	}
	if keys != nil {
		f.oldest = time.Time{} // rows read back: scan next time
	}
	return sqlIntentsPrune, cutoff
}

// Intents older than the retention, by the log clock, are gone from the
// event store (or about to be): the view forgets them too.
const sqlIntentsPrune = `DELETE FROM {rm_intents} WHERE recorded_at <= $1`

func (f *intentsFold) intentKey(e *envelope) (string, error) {
	if !strings.HasPrefix(e.stream, intentPrefix) || len(e.stream) == len(intentPrefix) {
		return "", e.badStream(intentPrefix)
	}
	return e.stream, nil
}

func (f *intentsFold) route(e *envelope) error {
	switch e.typ {
	case domain.TypeIntentRecorded, domain.TypeIntentResumed, domain.TypeIntentRejected:
		if e.opens(domain.TypeIntentRecorded) {
			return f.intents.needOpened(f.intentKey(e))
		}
		return f.intents.needKey(f.intentKey(e))
	}
	if t, ok := targetEvents[e.typ]; ok {
		if openingEvents[e.typ] && e.revision == 0 {
			return f.targets.needOpened(e.rowKey(t.prefix))
		}
		return f.targets.needKey(e.rowKey(t.prefix))
	}
	return nil
}

func (f *intentsFold) apply(e *envelope) error {
	if t, ok := targetEvents[e.typ]; ok {
		key, err := e.rowKey(t.prefix)
		if err != nil {
			return err
		}
		r := f.targets.get(key)
		if openingEvents[e.typ] {
			if r == nil {
				f.targets.put(&targetRow{ID: key, Kind: t.kind, Status: t.status, UpdatedAt: e.at, Revision: e.revision})
			}
			return nil
		}
		if r == nil || e.revision <= r.Revision {
			return nil
		}
		r.Status, r.UpdatedAt, r.Revision = t.status, e.at, e.revision
		f.targets.put(r)
		return nil
	}
	switch e.typ {
	case domain.TypeIntentRecorded, domain.TypeIntentResumed, domain.TypeIntentRejected:
	default:
		return nil
	}
	key, err := f.intentKey(e)
	if err != nil {
		return err
	}
	r := f.intents.get(key)
	if r != nil && e.revision <= r.Revision {
		return nil
	}
	switch e.typ {
	case domain.TypeIntentRecorded: // opens the stream, or records it again after a purge (a higher revision)
		rec, err := decodeAs[domain.IntentRecorded](e)
		if err != nil {
			return err
		}
		target := rec.TargetID
		if rec.Operation == opCancelOrder {
			target, _ = rec.Command["order_id"].(string) // the order it acts on
		}
		f.intents.put(&intentRow{Stream: key, Actor: rec.Actor, Operation: rec.Operation, TargetID: target, Executor: rec.Executor,
			LeaseUntil: micro(rec.LeaseUntil), RecordedAt: e.at, UpdatedAt: e.at, Revision: e.revision})
		if !f.oldest.IsZero() && e.at.Before(f.oldest) {
			f.oldest = e.at
		}
		return nil
	case domain.TypeIntentResumed:
		if r == nil {
			return nil
		}
		res, err := decodeAs[domain.IntentResumed](e)
		if err != nil {
			return err
		}
		r.Executor, r.LeaseUntil, r.Takeovers = res.Executor, micro(res.LeaseUntil), r.Takeovers+1
	case domain.TypeIntentRejected: // the first rejection wins
		if r == nil {
			return nil
		}
		rej, err := decodeAs[domain.IntentRejected](e)
		if err != nil {
			return err
		}
		if r.RejectionStatus == 0 {
			r.RejectionStatus, r.RejectionCode = int64(max(rej.Status, 1)), rej.Code
		}
	}
	r.Revision, r.UpdatedAt = e.revision, e.at
	f.intents.put(r)
	return nil
}
