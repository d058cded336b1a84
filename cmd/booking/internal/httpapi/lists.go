package httpapi

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/projections"
)

// Pagination of the list endpoints.
const (
	defaultListLimit = 50
	maxListLimit     = 200
)

// positionHeader carries the read model's checkpoint (eventstore.Position,
// "commit/prepare"): the list reflects the event log up to that position.
const positionHeader = "Booking-Position"

// lists serves GET /v1/shows and GET /v1/orders from the read models
// (package projections). Each answer comes from one database snapshot and
// carries the read model's position in Booking-Position. It implements
// listReader and is safe for concurrent use.
type lists struct {
	r          Reads
	writeError func(w http.ResponseWriter, r *http.Request, err error)
}

func newLists(r Reads, writeError func(w http.ResponseWriter, r *http.Request, err error)) *lists {
	return &lists{r: r, writeError: writeError}
}

// listPage is the JSON shape of a list answer. NextCursor is null on the
// last page; pass it as ?cursor= to get the next one.
type listPage[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// showListItem is a show of GET /v1/shows: the single-show view plus the
// split of taken seats (capacity = available + held + ordered).
type showListItem struct {
	showView
	Held    int `json:"held"`
	Ordered int `json:"ordered"`
}

// orderListItem is an order of GET /v1/orders: the single-order view plus
// when it was created and last changed (event time).
type orderListItem struct {
	orderView
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ListShows answers GET /v1/shows?limit=&cursor=: every show, by start time.
func (l *lists) ListShows(w http.ResponseWriter, r *http.Request) {
	limit, after, err := listRequest(r, "s", func(t time.Time, id string) projections.ShowKey { return projections.ShowKey{StartsAt: t, ID: id} })
	if err != nil {
		l.writeError(w, r, err)
		return
	}
	page, err := l.r.Shows(r.Context(), after, limit)
	if err != nil {
		l.writeError(w, r, readModelError(err))
		return
	}
	items := make([]showListItem, len(page.Items))
	for i, s := range page.Items {
		items[i] = showListItem{showView: showView{ID: s.ID, Name: s.Name, StartsAt: s.StartsAt, Capacity: s.Capacity,
			Available: s.Available, Price: s.Price}, Held: s.Held, Ordered: s.Ordered}
	}
	var next *string
	if page.Next != nil {
		next = ptr(encodeCursor("s", page.Next.StartsAt, page.Next.ID))
	}
	writeListPage(w, items, next, page.Position)
}

// ListOrders answers GET /v1/orders?limit=&cursor=: the caller's orders,
// newest first.
func (l *lists) ListOrders(w http.ResponseWriter, r *http.Request, actorID string) {
	limit, after, err := listRequest(r, "o", func(t time.Time, id string) projections.OrderKey { return projections.OrderKey{CreatedAt: t, ID: id} })
	if err != nil {
		l.writeError(w, r, err)
		return
	}
	page, err := l.r.Orders(r.Context(), actorID, after, limit)
	if err != nil {
		l.writeError(w, r, readModelError(err))
		return
	}
	items := make([]orderListItem, len(page.Items))
	for i, o := range page.Items {
		items[i] = orderListItem{orderView: listOrderView(o), CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt}
	}
	var next *string
	if page.Next != nil {
		next = ptr(encodeCursor("o", page.Next.CreatedAt, page.Next.ID))
	}
	writeListPage(w, items, next, page.Position)
}

// listRequest reads a list request's limit (listLimit) and cursor of list
// kind; key makes the list's keyset position from the cursor's time and id.
// after is nil without a cursor. Errors are Invalid and name the parameter.
func listRequest[K any](r *http.Request, kind string, key func(t time.Time, id string) K) (limit int, after *K, err error) {
	limit, err = listLimit(r)
	if err != nil {
		return 0, nil, err
	}
	c, err := singleParam(r, "cursor")
	if err != nil {
		return 0, nil, err
	}
	if c != "" {
		t, id, err := decodeCursor(kind, c)
		if err != nil {
			return 0, nil, err
		}
		k := key(t, id)
		after = &k
	}
	return limit, after, nil
}

// writeListPage answers 200 with a page of items and its next cursor (null on
// the last page), and the read model's position (its checkpoint) in the
// position header.
func writeListPage[T any](w http.ResponseWriter, items []T, next *string, position fmt.Stringer) {
	w.Header().Set(positionHeader, position.String())
	writeJSON(w, http.StatusOK, listPage[T]{Items: items, NextCursor: next})
}

func ptr[T any](v T) *T { return &v }

// listOrderView is viewOrder for a read-model row: the same JSON shape and
// rules (tickets only while confirmed).
func listOrderView(o projections.Order) orderView {
	tickets := []domain.Ticket{}
	if o.Status == domain.OrderStatusConfirmed {
		for _, id := range o.TicketIDs {
			tickets = append(tickets, domain.Ticket{ID: id})
		}
	}
	p := paymentView{Status: o.PaymentStatus, Attempts: o.Attempts, ChargeID: o.ChargeID, Refunded: o.PaymentStatus == "refunded"}
	return orderView{ID: o.ID, ReservationID: o.ReservationID, ShowID: o.ShowID, Status: o.Status, Quantity: o.Quantity,
		Amount: o.Amount, Tickets: tickets, Payment: p, FailReason: o.FailReason}
}

// listLimit parses ?limit=: default 50 when absent, at most 200 (larger
// values are clamped); anything but one positive integer (an empty or a
// repeated parameter too) is a 400.
func listLimit(r *http.Request) (int, error) {
	vals, err := queryValues(r, "limit")
	if err != nil {
		return 0, err
	}
	if len(vals) == 0 {
		return defaultListLimit, nil
	}
	if len(vals) != 1 {
		return 0, httpError(domain.Invalid, "invalid-request", "send at most one limit parameter", "limit")
	}
	return parseLimit(vals[0])
}

// singleParam returns query parameter name, "" when absent; a repeated one
// is a 400 naming it.
func singleParam(r *http.Request, name string) (string, error) {
	vals, err := queryValues(r, name)
	if err != nil {
		return "", err
	}
	if len(vals) > 1 {
		return "", httpError(domain.Invalid, "invalid-request", "send at most one "+name+" parameter", name)
	}
	if len(vals) == 0 {
		return "", nil
	}
	return vals[0], nil
}

// queryValues returns the values of r's query parameter name, as
// r.URL.Query()[name] does, except that a pair of that name which does not
// decode (a bad %-escape, or a ';', which net/url refuses as a separator)
// is a 400 naming it instead of dropped: ?limit=%zz is refused, never
// answered with the default limit. Pairs of other names are not looked at.
func queryValues(r *http.Request, name string) ([]string, error) {
	var out []string
	for _, pair := range strings.Split(r.URL.RawQuery, "&") {
		k, v, _ := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err != nil || key != name {
			continue
		}
		val, err := url.QueryUnescape(v)
		if err != nil || strings.Contains(v, ";") {
			return nil, httpError(domain.Invalid, "invalid-request", "the "+name+" parameter is not a valid query value (a bad %-escape, or a ';')", name)
		}
		out = append(out, val)
	}
	return out, nil
}

// parseLimit is listLimit on the parameter's value: decimal digits only,
// at least 1, clamped to maxListLimit however large.
func parseLimit(s string) (int, error) {
	bad := httpError(domain.Invalid, "invalid-request", fmt.Sprintf("limit must be a positive integer (values above %d are clamped to %d)", maxListLimit, maxListLimit), "limit")
	if s == "" || !allDigits(s) {
		return 0, bad
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return maxListLimit, nil // only digits, so the value is beyond 2^64: clamped
	}
	if n < 1 {
		return 0, bad
	}
	return int(min(n, maxListLimit)), nil
}

// Cursors are opaque to clients but not secret or signed: base64url (no
// padding) of "kind|RFC 3339 time in UTC|id", where kind tells which list
// the cursor belongs to and id is a lowercase UUID. A cursor is accepted
// only in the exact form encodeCursor writes, so each position has one
// cursor; a hand-made one of that form is accepted and only moves the
// position inside the caller's own list (GET /v1/orders still filters by
// the caller), so it reveals nothing a page would not.

func encodeCursor(kind string, t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "|" + t.UTC().Format(time.RFC3339Nano) + "|" + id))
}

// decodeCursor returns the time and id of a cursor of list kind, or an
// Invalid error naming cursor for anything encodeCursor would not write.
func decodeCursor(kind, c string) (time.Time, string, error) {
	bad := httpError(domain.Invalid, "invalid-request", "cursor is not a cursor of this list; pass next_cursor as returned", "cursor")
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return time.Time{}, "", bad
	}
	parts := strings.Split(string(b), "|")
	if len(parts) != 3 || parts[0] != kind {
		return time.Time{}, "", bad
	}
	t, err := time.Parse(time.RFC3339Nano, parts[1])
	if err != nil {
		return time.Time{}, "", bad
	}
	u, err := uuid.Parse(parts[2])
	if err != nil || u.String() != parts[2] {
		return time.Time{}, "", bad
	}
	if encodeCursor(kind, t, parts[2]) != c {
		return time.Time{}, "", bad // another spelling of a time (offset, trailing zeros)
	}
	return t.UTC(), parts[2], nil
}

// readModelError turns a failed read-model query into a 503 (the cause is
// logged by writeError).
func readModelError(err error) error {
	return fmt.Errorf("%w: %w", domain.ErrUnavailable.With("the read model is unavailable; retry later"), err)
}
