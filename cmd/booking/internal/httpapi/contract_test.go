package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/cmd/booking/internal/identity"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/apicontract"
	"github.com/retrysafe/booking/projections"
)

// The HTTP contract of the API, checked against small fakes of Service and
// Reads: for every route the status, the headers and the problem document
// (RFC 9457), and what reached the service. A refusal of the HTTP layer
// (bad input, a bad key, auth, media type, size) must not reach the service
// at all: it records nothing, so the key is not used up.

const (
	showID   = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	resID    = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a6c"
	orderID  = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a7d"
	tokAlice = "tok-alice"
	tokAdmin = "tok-admin"
)

var (
	startsAt = time.Date(2030, 6, 1, 20, 0, 0, 0, time.UTC)
	eur45    = domain.Money{Amount: 4500, Currency: "EUR"}
	aShow    = domain.Show{ID: showID, Name: "Concert", StartsAt: startsAt, Capacity: 100, Price: eur45, Scheduled: true}
	aRes     = domain.Reservation{ID: resID, ShowID: showID, Quantity: 2, Status: "held", ExpiresAt: startsAt.Add(-time.Hour),
		Amount: domain.Money{Amount: 9000, Currency: "EUR"}}
)

// refundOrder is an order paid by ch_1, cancelled, whose refund of ch_1 is
// requested and, as refused or succeeded say, refused by the provider (the
// order then in needs_review) or recorded.
func refundOrder(refused, succeeded bool) domain.Order {
	o := order(domain.OrderStatusCancelled, domain.OrderStatusConfirmed)
	if refused {
		o.Status = domain.OrderStatusNeedsReview
	}
	o.ChargeID = "ch_1"
	o.Attempts = []domain.Attempt{{N: 1, Outcome: domain.OutcomeSucceeded, ChargeID: "ch_1"}}
	o.Refunds = map[string]*domain.Refund{"ch_1": {ChargeID: "ch_1", Amount: o.Amount, Key: domain.RefundKey("ch_1"),
		Reason: "cancelled", Refused: refused, Succeeded: succeeded}}
	if succeeded {
		o.Refunds["ch_1"].Refunded = o.Amount
	}
	return o
}

// actionOrder is a pending order whose payment pi_1 requires the
// customer's action.
func actionOrder() domain.Order {
	o := order(domain.OrderStatusPending, "")
	o.Attempts = []domain.Attempt{{N: 1, Outcome: domain.OutcomeRequiresAction, ChargeID: "pi_1"}}
	return o
}

func order(status, firstOutcome string) domain.Order {
	o := domain.Order{ID: orderID, ReservationID: resID, ShowID: showID, Quantity: 2, Amount: aRes.Amount,
		Status: status, FirstOutcome: firstOutcome}
	if status == domain.OrderStatusConfirmed {
		o.Tickets = []domain.Ticket{{ID: "t1"}, {ID: "t2"}}
		o.ChargeID = "ch_1"
	}
	if status == domain.OrderStatusFailed {
		o.FailReason = firstOutcome
	}
	return o
}

// fakeService is a Service and Reads whose answers a case sets. It records
// every call and the last request envelope. Safe for concurrent use.
type fakeService struct {
	mu      sync.Mutex
	calls   []string
	req     commands.Request
	ids     commands.RequestIDs // of the last state-changing call's context
	id      string
	outcome commands.Outcome
	result  commands.OrderResult
	order   domain.Order
	err     error
	readErr error
	// explained is the answer of ExplainIntents.
	explained []commands.IntentExplanation
	// action is the answer of PaymentAction for a pending order.
	action *commands.PaymentAction
}

func (f *fakeService) record(call string, req commands.Request, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	f.req, f.id = req, id
}

func (f *fakeService) ScheduleShow(_ context.Context, req commands.Request, cmd commands.ScheduleShowCommand) (domain.Show, commands.Outcome, error) {
	f.record("ScheduleShow", req, "")
	s := aShow
	s.Name, s.StartsAt, s.Capacity, s.Price = cmd.Name, cmd.StartsAt, cmd.Capacity, cmd.Price
	return s, f.outcome, f.err
}

func (f *fakeService) GetShow(_ context.Context, id string) (domain.Show, error) {
	f.record("GetShow", commands.Request{}, id)
	return aShow, f.err
}

func (f *fakeService) ReserveSeats(ctx context.Context, req commands.Request, cmd commands.ReserveSeatsCommand) (domain.Reservation, commands.Outcome, error) {
	f.record("ReserveSeats", req, cmd.ShowID)
	f.mu.Lock()
	f.ids = commands.RequestIDsOf(ctx)
	f.mu.Unlock()
	return aRes, f.outcome, f.err
}

func (f *fakeService) GetReservation(_ context.Context, actor, id string) (domain.Reservation, error) {
	f.record("GetReservation", commands.Request{Actor: actor}, id)
	return aRes, f.err
}

func (f *fakeService) PlaceOrder(_ context.Context, req commands.Request, cmd commands.PlaceOrderCommand) (commands.OrderResult, error) {
	f.record("PlaceOrder", req, cmd.ReservationID)
	return f.result, f.err
}

func (f *fakeService) GetOrder(_ context.Context, actor, id string) (domain.Order, error) {
	f.record("GetOrder", commands.Request{Actor: actor}, id)
	return f.order, f.err
}

func (f *fakeService) CancelOrder(_ context.Context, req commands.Request, id string) (commands.OrderResult, error) {
	f.record("CancelOrder", req, id)
	return f.result, f.err
}

func (f *fakeService) ExplainIntents(_ context.Context, actor, key string) ([]commands.IntentExplanation, error) {
	f.record("ExplainIntents", commands.Request{Actor: actor, Key: key}, "")
	return f.explained, f.err
}

func (f *fakeService) PaymentAction(_ context.Context, o domain.Order) (*commands.PaymentAction, error) {
	if o.Status != domain.OrderStatusPending {
		return nil, nil
	}
	return f.action, nil
}

func (f *fakeService) CheckWebhookHeader(context.Context, string) error { return nil }

func (f *fakeService) ReceiveWebhook(_ context.Context, _ string, _ []byte) error {
	f.record("ReceiveWebhook", commands.Request{}, "")
	return f.err
}

func (f *fakeService) Shows(_ context.Context, after *projections.ShowKey, limit int) (projections.ShowPage, error) {
	f.record("Shows", commands.Request{}, "")
	next := &projections.ShowKey{StartsAt: startsAt, ID: showID}
	return projections.ShowPage{Items: []projections.Show{{ID: showID, Name: "Concert", StartsAt: startsAt, Capacity: 100,
		Price: eur45, Available: 97, Held: 2, Ordered: 1}}, Next: next, Position: eventstore.Position{Commit: 7, Prepare: 3}}, f.readErr
}

func (f *fakeService) Orders(_ context.Context, actor string, after *projections.OrderKey, limit int) (projections.OrderPage, error) {
	f.record("Orders", commands.Request{Actor: actor}, "")
	return projections.OrderPage{Items: []projections.Order{{ID: orderID, ReservationID: resID, ShowID: showID,
		Status: domain.OrderStatusConfirmed, Quantity: 2, Amount: aRes.Amount, PaymentStatus: "succeeded", TicketIDs: []string{"t1"}}},
		Position: eventstore.Position{Commit: 9, Prepare: 1}}, f.readErr
}

// contractCase is one request and the answer the contract requires.
type contractCase struct {
	name   string
	method string
	path   string
	token  string            // bearer token; "-" sends no Authorization
	key    string            // Idempotency-Key of a POST; "-" sends none
	header map[string]string // more request headers (Content-Type replaces the default)
	also   map[string]string // header lines added after the others (a second line of one set)
	body   string
	setup  func(*fakeService)
	cfg    func(*httpapi.Config)
	before int // identical requests sent first (for the retry budget)

	status int
	want   map[string]string // response headers; "" means absent
	code   string            // problem code; "" for an answer that is not a problem
	fields []string          // the problem's fields
	detail string            // the problem's detail; "" means any non-empty detail
	calls  []string          // the service calls the request made (nil: none)
	check  func(t *testing.T, f *fakeService, doc map[string]any)

	// retryAfter bounds Retry-After in seconds, both ends included, where
	// it derives from wall-clock time between requests (the retry budget)
	// and so is exact only if no time passes between them.
	retryAfter [2]int
}

func showBody(extra string) string {
	return `{"name":"Concert","starts_at":"2030-06-01T20:00:00Z","capacity":100,"price":{"amount":4500,"currency":"EUR"}` + extra + `}`
}

const (
	resBody   = `{"show_id":"` + showID + `","quantity":2}`
	orderBody = `{"reservation_id":"` + resID + `","payment":{"token":"tok_visa"}}`
)

// explainedOrder is an explanation of an order declined and of a cancel
// refused, as the commands layer returns them (statuses not yet set).
func explainedOrder() []commands.IntentExplanation {
	at := startsAt.Add(-48 * time.Hour)
	base := commands.IntentExplanation{Stream: "intent-" + strings.Repeat("a", 64), KeySHA256: strings.Repeat("b", 64),
		Fingerprint: strings.Repeat("c", 64), CanonicalVersion: 1, RecordedAt: at, ExpiresAt: at.Add(24 * time.Hour),
		Timeline: []commands.TimelineEntry{{Step: "intent_recorded", Event: "IntentRecorded", Stream: "intent-" + strings.Repeat("a", 64),
			Position: "5/1", At: at, EventID: orderID}}}
	o, c := base, base
	o.Operation, o.Target = commands.OpPlaceOrder, commands.IntentTarget{Kind: "order", ID: orderID, Path: "/v1/orders/" + orderID}
	o.Outcome = commands.IntentOutcome{State: commands.OutcomeFailed, Result: domain.FailPaymentDeclined, Code: "payment-declined", Err: domain.ErrPaymentDeclined}
	o.Payments = []commands.PaymentAttemptView{{Attempt: 1, ProviderKey: "order-" + orderID + "-1", Outcome: "failed", StartedAt: at,
		Reconciliations: []commands.Reconciliation{}, Positions: []string{"6/1"}}}
	c.Operation, c.Target = commands.OpCancelOrder, commands.IntentTarget{Kind: "order", ID: orderID, Path: "/v1/orders/" + orderID}
	c.Outcome = commands.IntentOutcome{State: commands.OutcomeRejected, Result: "order-not-cancellable", Code: "order-not-cancellable",
		Err: &commands.Rejection{Err: domain.ErrNotCancellable}}
	return []commands.IntentExplanation{o, c}
}

func withErr(err error) func(*fakeService) { return func(f *fakeService) { f.err = err } }

func replayedOutcome(f *fakeService) { f.outcome = commands.Outcome{Replayed: true} }

func orderResult(o domain.Order, final, replayed bool) func(*fakeService) {
	return func(f *fakeService) {
		f.result = commands.OrderResult{Order: o, Final: final, Outcome: commands.Outcome{Replayed: replayed}}
	}
}

// member checks a top-level member of the answer's JSON document.
func member(name string, want any) func(t *testing.T, f *fakeService, doc map[string]any) {
	return func(t *testing.T, _ *fakeService, doc map[string]any) {
		t.Helper()
		if diff := cmp.Diff(want, doc[name]); diff != "" {
			t.Errorf("member %s (-want +got):\n%s", name, diff)
		}
	}
}

// requested checks the request envelope that reached the service.
func requested(want commands.Request) func(t *testing.T, f *fakeService, doc map[string]any) {
	return func(t *testing.T, f *fakeService, _ map[string]any) {
		t.Helper()
		got := f.req
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("request envelope (-want +got):\n%s", diff)
		}
	}
}

// badCurrency is the detail of a price in a currency cards cannot be charged in.
const badCurrency = "price.currency must be an active ISO 4217 code, in upper case, of a currency that card payments are taken in, such as EUR"

func contractCases() []contractCase {
	keyReused := domain.ErrKeyReused.With("this idempotency key was used with a different request (quantity)")
	keyReused.Fields = []string{"quantity"}
	declined := order(domain.OrderStatusFailed, domain.FailPaymentDeclined)
	declined.Attempts = []domain.Attempt{{N: 1, Outcome: domain.OutcomeFailed, FailureCode: "card_declined", FailureReason: "Your card was declined."}}
	badToken := order(domain.OrderStatusFailed, domain.FailPaymentDeclined)
	badToken.Attempts = []domain.Attempt{{N: 1, Outcome: domain.OutcomeFailed, FailureCode: domain.CodeResourceMissing, FailureReason: domain.ReasonProviderRefused}}
	deadline := order(domain.OrderStatusFailed, domain.FailPaymentDeadline)
	return []contractCase{
		// Service routes and the router.
		{name: "GET /healthz is 200 ok", method: "GET", path: "/healthz", token: "-", status: 200,
			want: map[string]string{"Content-Type": "application/json"}, check: member("status", "ok")},
		{name: "GET /readyz is 200 when ready", method: "GET", path: "/readyz", token: "-", status: 200, check: member("status", "ready")},
		{name: "GET /readyz is 503 with Retry-After when the database is down", method: "GET", path: "/readyz", token: "-",
			cfg: func(c *httpapi.Config) {
				c.Ready = func(context.Context) error { return errors.New("connection refused") }
			},
			status: 503, code: "unavailable", want: map[string]string{"Retry-After": "1"}, check: member("detail", "the database is unreachable")},
		{name: "GET /readyz is 503 naming the event store when KurrentDB is down", method: "GET", path: "/readyz", token: "-",
			cfg: func(c *httpapi.Config) {
				c.Ready = func(context.Context) error {
					return &httpapi.DependencyError{Name: "event store (KurrentDB)", Err: errors.New("connection refused")}
				}
			},
			status: 503, code: "unavailable", want: map[string]string{"Retry-After": "1"}, check: member("detail", "the event store (KurrentDB) is unreachable")},
		{name: "GET /openapi.yaml is the description", method: "GET", path: "/openapi.yaml", token: "-", status: 200,
			want: map[string]string{"Content-Type": "application/yaml"}},
		{name: "GET /metrics is 404 not-found: the metrics are the admin listener's", method: "GET", path: "/metrics", token: "-", status: 404, code: "not-found"},
		{name: "an unknown path is 404 not-found", method: "GET", path: "/v2/shows", token: "-", status: 404, code: "not-found"},
		{name: "DELETE /v1/shows is 405 with Allow", method: "DELETE", path: "/v1/shows", status: 405, code: "method-not-allowed",
			want: map[string]string{"Allow": "GET, HEAD, POST"}},
		{name: "PUT /v1/orders/{id} is 405 with Allow: GET, HEAD", method: "PUT", path: "/v1/orders/" + orderID, status: 405,
			code: "method-not-allowed", want: map[string]string{"Allow": "GET, HEAD"}},
		{name: "GET /v1/orders/{id}/cancel is 405 with Allow: POST", method: "GET", path: "/v1/orders/" + orderID + "/cancel",
			status: 405, code: "method-not-allowed", want: map[string]string{"Allow": "POST"}},
		{name: "GET /v1/provider/webhooks is 405 with Allow: POST", method: "GET", path: "/v1/provider/webhooks", token: "-",
			status: 405, code: "method-not-allowed", want: map[string]string{"Allow": "POST"}},

		// Authentication and authorization.
		{name: "no Authorization is 401 with a challenge", method: "GET", path: "/v1/shows/" + showID, token: "-", status: 401,
			code: "unauthorized", want: map[string]string{"WWW-Authenticate": `Bearer realm="booking"`}},
		{name: "an unknown token is 401 invalid_token", method: "GET", path: "/v1/orders", token: "tok-mallory", status: 401,
			code: "unauthorized", want: map[string]string{"WWW-Authenticate": `Bearer realm="booking", error="invalid_token"`}},
		{name: "a Basic credential is 401", method: "POST", path: "/v1/reservations", token: "-",
			header: map[string]string{"Authorization": "Basic YWxpY2U6eA=="}, body: resBody, status: 401, code: "unauthorized"},
		{name: "a POST without a token is 401 before the key is looked at", method: "POST", path: "/v1/orders", token: "-", key: "-",
			body: orderBody, status: 401, code: "unauthorized"},
		{name: "a non-admin creating a show is 403 forbidden", method: "POST", path: "/v1/shows", body: showBody(""),
			status: 403, code: "forbidden"},
		{name: "an authenticator's refusal is 401 with its reason", method: "GET", path: "/v1/orders", token: "eyJ.x.y",
			cfg: func(c *httpapi.Config) {
				c.Authenticator = fakeAuthenticator{err: &identity.Refusal{Reason: "it has expired (exp)"}}
			},
			status: 401, code: "unauthorized", want: map[string]string{"WWW-Authenticate": `Bearer realm="booking", error="invalid_token"`},
			check: member("detail", "the bearer token is not valid: it has expired (exp)")},
		{name: "an authenticator's actor is the intent's actor, admin from the authenticator", method: "POST", path: "/v1/shows",
			token: "eyJ.x.y", key: "show-1", body: showBody(""), status: 201, calls: []string{"ScheduleShow"},
			cfg: func(c *httpapi.Config) {
				c.Authenticator = fakeAuthenticator{actor: httpapi.Actor{ID: "https://idp.example/#alice", Admin: true}}
			},
			check: requested(commands.Request{Actor: "https://idp.example/#alice", Operation: commands.OpScheduleShow, Key: "show-1"})},

		// POST /v1/shows.
		{name: "POST /v1/shows is 201 with Location", method: "POST", path: "/v1/shows", token: tokAdmin, key: "show-1",
			body: showBody(""), status: 201, calls: []string{"ScheduleShow"},
			want:  map[string]string{"Location": "/v1/shows/" + showID, "Content-Type": "application/json", "Idempotent-Replayed": ""},
			check: requested(commands.Request{Actor: "admin", Operation: commands.OpScheduleShow, Key: "show-1"})},
		{name: "a repeated POST /v1/shows is 201 with Idempotent-Replayed", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: showBody(""), setup: replayedOutcome, status: 201, calls: []string{"ScheduleShow"},
			want: map[string]string{"Idempotent-Replayed": "true", "Location": "/v1/shows/" + showID}},
		{name: "a show's name is passed on as sent, in NFD", method: "POST", path: "/v1/shows", token: tokAdmin,
			body:   `{"name":"Cafe\u0301","starts_at":"2030-06-01T22:00:00+02:00","capacity":1e2,"price":{"amount":4500,"currency":"EUR"}}`,
			status: 201, calls: []string{"ScheduleShow"}, check: func(t *testing.T, f *fakeService, doc map[string]any) {
				if doc["name"] != "Cafe\u0301" || doc["starts_at"] != "2030-06-01T20:00:00Z" || doc["capacity"] != 100.0 {
					t.Errorf("show = %v, want the name as sent, the start in UTC and capacity 100", doc)
				}
			}},
		{name: "a starts_at with lower-case t and z (RFC 3339 §5.6) is the same instant", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), "2030-06-01T20:00:00Z", "2030-06-01t20:00:00z", 1), status: 201, calls: []string{"ScheduleShow"},
			check: member("starts_at", "2030-06-01T20:00:00Z")},
		{name: "a starts_at with lower-case t and an offset is the same instant", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), "2030-06-01T20:00:00Z", "2030-06-01t22:00:00.000+02:00", 1), status: 201, calls: []string{"ScheduleShow"},
			check: member("starts_at", "2030-06-01T20:00:00Z")},
		{name: "a starts_at without an offset is 400 naming it", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), "2030-06-01T20:00:00Z", "2030-06-01t20:00:00", 1), status: 400, code: "invalid-request",
			fields: []string{"starts_at"}, detail: "starts_at must be an RFC 3339 timestamp such as 2027-06-01T20:00:00Z"},
		{name: "a missing Idempotency-Key is 400 and nothing is recorded", method: "POST", path: "/v1/shows", token: tokAdmin,
			key: "-", body: showBody(""), status: 400, code: "idempotency-key-invalid", fields: []string{"Idempotency-Key"}},
		{name: "an empty Idempotency-Key is 400", method: "POST", path: "/v1/shows", token: tokAdmin, key: `""`,
			body: showBody(""), status: 400, code: "idempotency-key-invalid"},
		{name: "a blank Idempotency-Key is 400", method: "POST", path: "/v1/reservations", key: `"   "`,
			body: resBody, status: 400, code: "idempotency-key-invalid"},
		{name: "a 256-character Idempotency-Key is 400", method: "POST", path: "/v1/reservations", key: strings.Repeat("k", 256),
			body: resBody, status: 400, code: "idempotency-key-invalid"},
		{name: "a quoted key with a bad escape is 400", method: "POST", path: "/v1/reservations", key: `"a\b"`,
			body: resBody, status: 400, code: "idempotency-key-invalid"},
		{name: "a bare key with a comma (merged header lines) is 400", method: "POST", path: "/v1/reservations", key: `a1, a2`,
			body: resBody, status: 400, code: "idempotency-key-invalid"},
		{name: "a quoted key with a comma is accepted whole", method: "POST", path: "/v1/reservations", key: `"a1, a2"`,
			body: resBody, status: 201, calls: []string{"ReserveSeats"},
			check: requested(commands.Request{Actor: "alice", Operation: commands.OpReserveSeats, Key: "a1, a2"})},
		{name: "a 255-character key is accepted whole", method: "POST", path: "/v1/reservations", key: strings.Repeat("k", 255),
			body: resBody, status: 201, calls: []string{"ReserveSeats"},
			check: requested(commands.Request{Actor: "alice", Operation: commands.OpReserveSeats, Key: strings.Repeat("k", 255)})},
		{name: "an sf-string key is unescaped", method: "POST", path: "/v1/reservations", key: `"r\"1\\"`,
			body: resBody, status: 201, calls: []string{"ReserveSeats"},
			check: requested(commands.Request{Actor: "alice", Operation: commands.OpReserveSeats, Key: `r"1\`})},
		{name: "a text/plain body is 415", method: "POST", path: "/v1/shows", token: tokAdmin,
			header: map[string]string{"Content-Type": "text/plain"}, body: showBody(""), status: 415, code: "unsupported-media-type"},
		{name: "a content-coded body is 415", method: "POST", path: "/v1/reservations",
			header: map[string]string{"Content-Encoding": "gzip"}, body: resBody, status: 415, code: "unsupported-media-type"},
		{name: "a problem+json body is accepted as JSON", method: "POST", path: "/v1/reservations",
			header: map[string]string{"Content-Type": "application/merge-patch+json"}, body: resBody, status: 201, calls: []string{"ReserveSeats"}},
		{name: "a body over 64 KiB is 413", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: showBody(`,"pad":"` + strings.Repeat("x", 64<<10) + `"`), status: 413, code: "body-too-large"},
		{name: "a body that is not JSON is 400 invalid-json", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: `{"name":`, status: 400, code: "invalid-json"},
		{name: "a repeated member is 400 invalid-json naming it", method: "POST", path: "/v1/reservations",
			body: `{"show_id":"` + showID + `","quantity":1,"quantity":2}`, status: 400, code: "invalid-json", fields: []string{"quantity"}},
		{name: "an escaped lone surrogate is 400 invalid-utf8", method: "POST", path: "/v1/shows", token: tokAdmin,
			body:   `{"name":"\ud800","starts_at":"2030-06-01T20:00:00Z","capacity":1,"price":{"amount":1,"currency":"EUR"}}`,
			status: 400, code: "invalid-utf8"},
		{name: "raw invalid UTF-8 is 400 invalid-utf8", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: "{\"name\":\"\xff\"}", status: 400, code: "invalid-utf8"},
		{name: "an unknown field is 400 unknown-field naming it", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: showBody(`,"venue":"x"`), status: 400, code: "unknown-field", fields: []string{"venue"}},
		{name: "capacity 0 is 400 naming capacity", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"capacity":100`, `"capacity":0`, 1), status: 400, code: "invalid-request",
			fields: []string{"capacity"}},
		{name: "a capacity beyond any integer is 400 with capacity's range", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"capacity":100`, `"capacity":1e30`, 1), status: 400, code: "invalid-request",
			fields: []string{"capacity"}, detail: "capacity must be between 1 and 1000000"},
		{name: "a price of 2^53 is 400 with price.amount's range", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"amount":4500`, `"amount":9007199254740992`, 1), status: 400, code: "invalid-request",
			fields: []string{"price.amount"}, detail: "price.amount must be an integer of minor units from 1 to 450359962737049"},
		{name: "a price of 0 is 400 with price.amount's range", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"amount":4500`, `"amount":0`, 1), status: 400, code: "invalid-request",
			fields: []string{"price.amount"}, detail: "price.amount must be an integer of minor units from 1 to 450359962737049"},
		{name: "a lower-case currency is 400 asking for upper case", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"EUR"`, `"eur"`, 1), status: 400, code: "invalid-request", fields: []string{"price.currency"},
			detail: badCurrency},
		{name: "a misspelt required field is named both missing and unknown", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"name"`, `"nme"`, 1), status: 400, code: "invalid-request",
			fields: []string{"name", "nme"}, detail: "name is required; unknown field(s): nme"},
		{name: "an empty body is 400 invalid-json saying so", method: "POST", path: "/v1/reservations",
			body: "", status: 400, code: "invalid-json", detail: "the body is empty; want a JSON object"},
		{name: "an empty show body names every missing field", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: `{}`, status: 400, code: "invalid-request", fields: []string{"name", "starts_at", "capacity", "price"},
			detail: "name, starts_at, capacity, price are required"},
		{name: "an unknown currency is 400 naming price.currency", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"EUR"`, `"ZZZ"`, 1), status: 400, code: "invalid-request", fields: []string{"price.currency"}},
		{name: "XXX (\"no currency\") is 400 naming price.currency", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"EUR"`, `"XXX"`, 1), status: 400, code: "invalid-request", fields: []string{"price.currency"},
			detail: badCurrency},
		{name: "XAU (gold) is 400 naming price.currency", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"EUR"`, `"XAU"`, 1), status: 400, code: "invalid-request", fields: []string{"price.currency"},
			detail: badCurrency},
		{name: "XTS (the test code) is 400 naming price.currency", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"EUR"`, `"XTS"`, 1), status: 400, code: "invalid-request", fields: []string{"price.currency"},
			detail: badCurrency},
		{name: "HRK (a withdrawn code) is 400 naming price.currency", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"EUR"`, `"HRK"`, 1), status: 400, code: "invalid-request", fields: []string{"price.currency"},
			detail: badCurrency},
		{name: "a show priced in VES (an active code) is 201", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"EUR"`, `"VES"`, 1), status: 201, calls: []string{"ScheduleShow"},
			check: member("price", map[string]any{"amount": 4500.0, "currency": "VES"})},
		{name: "a KWD price not ending in 0 is 400 naming price.amount", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `{"amount":4500,"currency":"EUR"}`, `{"amount":4505,"currency":"KWD"}`, 1), status: 400,
			code: "invalid-request", fields: []string{"price.amount"},
			detail: "price.amount must be a multiple of 10 in KWD: card payments in a three-decimal currency end in 0"},
		{name: "a missing price.amount is 400 naming it", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: strings.Replace(showBody(""), `"amount":4500,`, ``, 1), status: 400, code: "invalid-request", fields: []string{"price.amount"}},
		{name: "a reused key is 422 naming the differing fields", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: showBody(""), setup: withErr(keyReused), status: 422, code: "idempotency-key-reused", fields: []string{"quantity"},
			calls: []string{"ScheduleShow"}, want: map[string]string{"Retry-After": ""}},
		{name: "a key in use is 409 with Retry-After rounded up", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: showBody(""), setup: withErr(&commands.InUseError{RetryAfter: 2500 * time.Millisecond}), status: 409,
			code: "idempotency-key-in-use", calls: []string{"ScheduleShow"}, want: map[string]string{"Retry-After": "3"}},
		{name: "a key in use for under a second says Retry-After: 1", method: "POST", path: "/v1/reservations",
			body: resBody, setup: withErr(&commands.InUseError{RetryAfter: time.Millisecond}), status: 409,
			code: "idempotency-key-in-use", calls: []string{"ReserveSeats"}, want: map[string]string{"Retry-After": "1"}},
		{name: "an internal error is 500 with a generic detail", method: "POST", path: "/v1/shows", token: tokAdmin,
			body: showBody(""), setup: withErr(errors.New("pq: secret detail")), status: 500, code: "internal",
			calls: []string{"ScheduleShow"}, check: member("detail", "an internal error occurred; it has been logged")},

		// GET /v1/shows/{id}.
		{name: "GET /v1/shows/{id} is 200 with available", method: "GET", path: "/v1/shows/" + showID, status: 200,
			calls: []string{"GetShow"}, want: map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"},
			check: member("available", 100.0)},
		{name: "an id in capitals reads the lowercase id", method: "GET", path: "/v1/shows/" + strings.ToUpper(showID), status: 200,
			calls: []string{"GetShow"}, check: func(t *testing.T, f *fakeService, _ map[string]any) {
				if f.id != showID {
					t.Errorf("GetShow(%q), want %q", f.id, showID)
				}
			}},
		{name: "an id that is not a UUID is 404 without a lookup", method: "GET", path: "/v1/shows/concert", status: 404,
			code: "show-not-found"},
		{name: "an unknown show is 404", method: "GET", path: "/v1/shows/" + showID, setup: withErr(domain.ErrShowNotFound),
			status: 404, code: "show-not-found", calls: []string{"GetShow"}},
		{name: "a problem names the client's X-Request-Id as client_request_id beside the server's request_id", method: "GET",
			path: "/v1/shows/" + showID, header: map[string]string{httpapi.HeaderRequestID: "trace-7"}, setup: withErr(domain.ErrShowNotFound),
			status: 404, code: "show-not-found", calls: []string{"GetShow"}, want: map[string]string{httpapi.HeaderRequestID: "trace-7"}},

		// POST /v1/reservations and GET /v1/reservations/{id}.
		{name: "POST /v1/reservations is 201 with Location", method: "POST", path: "/v1/reservations", key: "res-1", body: resBody,
			status: 201, calls: []string{"ReserveSeats"}, want: map[string]string{"Location": "/v1/reservations/" + resID},
			check: requested(commands.Request{Actor: "alice", Operation: commands.OpReserveSeats, Key: "res-1"})},
		{name: "a repeated reservation is 201 with Idempotent-Replayed", method: "POST", path: "/v1/reservations", body: resBody,
			setup: replayedOutcome, status: 201, calls: []string{"ReserveSeats"}, want: map[string]string{"Idempotent-Replayed": "true"}},
		{name: "21 seats is 400 naming quantity", method: "POST", path: "/v1/reservations",
			body: `{"show_id":"` + showID + `","quantity":21}`, status: 400, code: "invalid-request", fields: []string{"quantity"}},
		{name: "0 seats is 400 with quantity's range", method: "POST", path: "/v1/reservations",
			body: `{"show_id":"` + showID + `","quantity":0}`, status: 400, code: "invalid-request", fields: []string{"quantity"},
			detail: "quantity must be between 1 and 20"},
		{name: "seats beyond any integer are 400 with quantity's range", method: "POST", path: "/v1/reservations",
			body: `{"show_id":"` + showID + `","quantity":99999999999999999999999}`, status: 400, code: "invalid-request", fields: []string{"quantity"},
			detail: "quantity must be between 1 and 20"},
		{name: "seats below -(2^53-1) are 400 with quantity's range", method: "POST", path: "/v1/reservations",
			body: `{"show_id":"` + showID + `","quantity":-9007199254740992}`, status: 400, code: "invalid-request", fields: []string{"quantity"},
			detail: "quantity must be between 1 and 20"},
		{name: "an empty reservation body names every missing field", method: "POST", path: "/v1/reservations",
			body: `{}`, status: 400, code: "invalid-request", fields: []string{"show_id", "quantity"}, detail: "show_id, quantity are required"},
		{name: "an empty order body names every missing field", method: "POST", path: "/v1/orders",
			body: `{}`, status: 400, code: "invalid-request", fields: []string{"reservation_id", "payment"}, detail: "reservation_id, payment are required"},
		{name: "one missing field is named alone", method: "POST", path: "/v1/reservations",
			body: `{"quantity":2}`, status: 400, code: "invalid-request", fields: []string{"show_id"}, detail: "show_id is required"},
		{name: "2.5 seats is 400 naming quantity", method: "POST", path: "/v1/reservations",
			body: `{"show_id":"` + showID + `","quantity":2.5}`, status: 400, code: "invalid-request", fields: []string{"quantity"}},
		{name: "2e0 seats is 2 seats", method: "POST", path: "/v1/reservations",
			body: `{"show_id":"` + showID + `","quantity":2e0}`, status: 201, calls: []string{"ReserveSeats"}},
		{name: "a show_id that is not a UUID is 400 naming it", method: "POST", path: "/v1/reservations",
			body: `{"show_id":"concert","quantity":2}`, status: 400, code: "invalid-request", fields: []string{"show_id"}},
		{name: "sold out is 409 sold-out", method: "POST", path: "/v1/reservations", body: resBody,
			setup: withErr(&commands.Rejection{Err: domain.ErrSoldOut}), status: 409, code: "sold-out",
			calls: []string{"ReserveSeats"}, want: map[string]string{"Idempotent-Replayed": "", "Retry-After": ""}},
		{name: "a replayed version 1 refusal is answered with its stored status and Idempotent-Replayed", method: "POST", path: "/v1/reservations",
			body: resBody, setup: withErr(&commands.Rejection{LegacyStatus: 409, Err: domain.ErrShowStarted, Replayed: true}), status: 409,
			code: "show-started", calls: []string{"ReserveSeats"}, want: map[string]string{"Idempotent-Replayed": "true"}},
		{name: "contention is 503 with Retry-After", method: "POST", path: "/v1/reservations", body: resBody,
			setup: withErr(domain.ErrContention), status: 503, code: "contention", calls: []string{"ReserveSeats"},
			want: map[string]string{"Retry-After": "1"}},
		{name: "a request that outran its own budget is 503 with Retry-After, not 500", method: "POST", path: "/v1/orders", body: orderBody,
			setup: withErr(fmt.Errorf("waiting for the payment: %w", context.DeadlineExceeded)), status: 503, code: "unavailable",
			calls: []string{"PlaceOrder"}, want: map[string]string{"Retry-After": "1", "Idempotent-Replayed": ""},
			check: member("detail", "the request ran out of time; what it recorded stands: repeat it (with the same Idempotency-Key, where it has one) to get its outcome")},
		{name: "a request whose detached steps were abandoned at shutdown is 503, not 500", method: "POST", path: "/v1/reservations", body: resBody,
			setup: withErr(fmt.Errorf("hold batch: %w", context.Canceled)), status: 503, code: "unavailable",
			calls: []string{"ReserveSeats"}, want: map[string]string{"Retry-After": "1", "Idempotent-Replayed": ""}},
		{name: "GET /v1/reservations/{id} is 200 for its owner", method: "GET", path: "/v1/reservations/" + resID, status: 200,
			calls: []string{"GetReservation"}, check: member("quantity", 2.0)},
		{name: "another actor's reservation is 404", method: "GET", path: "/v1/reservations/" + resID,
			setup: withErr(domain.ErrReservationNotFound), status: 404, code: "reservation-not-found", calls: []string{"GetReservation"}},

		// POST /v1/orders.
		{name: "a confirmed order is 201 with Location and tickets", method: "POST", path: "/v1/orders", key: "order-1", body: orderBody,
			setup: orderResult(order(domain.OrderStatusConfirmed, domain.OrderStatusConfirmed), true, false), status: 201,
			calls: []string{"PlaceOrder"}, want: map[string]string{"Location": "/v1/orders/" + orderID, "Retry-After": "", "Preference-Applied": ""},
			check: func(t *testing.T, f *fakeService, doc map[string]any) {
				if tickets, _ := doc["tickets"].([]any); len(tickets) != 2 || f.req.Wait != 3*time.Second {
					t.Errorf("order %v with wait %v, want two tickets and the default wait of 3 s", doc, f.req.Wait)
				}
			}},
		{name: "a repeated confirmed order is 201 with Idempotent-Replayed", method: "POST", path: "/v1/orders", body: orderBody,
			setup: orderResult(order(domain.OrderStatusConfirmed, domain.OrderStatusConfirmed), true, true), status: 201,
			calls: []string{"PlaceOrder"}, want: map[string]string{"Idempotent-Replayed": "true"}},
		{name: "a pending order is 202 with Location and Retry-After", method: "POST", path: "/v1/orders", body: orderBody,
			setup: orderResult(order(domain.OrderStatusPending, ""), false, false), status: 202, calls: []string{"PlaceOrder"},
			want: map[string]string{"Location": "/v1/orders/" + orderID, "Retry-After": "1"}, check: member("status", "pending")},
		{name: "an order whose payment requires the customer's action is 202 with the client secret and next action", method: "POST",
			path: "/v1/orders", body: orderBody, status: 202, calls: []string{"PlaceOrder"},
			setup: func(f *fakeService) {
				orderResult(actionOrder(), false, false)(f)
				f.action = &commands.PaymentAction{ClientSecret: "pi_1_secret_abc", NextAction: json.RawMessage(`{"type":"use_stripe_sdk"}`)}
			},
			want: map[string]string{"Location": "/v1/orders/" + orderID, "Retry-After": "1"},
			check: member("payment", map[string]any{"status": "requires_action", "attempts": float64(1),
				"client_secret": "pi_1_secret_abc", "next_action": map[string]any{"type": "use_stripe_sdk"}})},
		{name: "Prefer: wait=5 waits 5 s and says so", method: "POST", path: "/v1/orders", body: orderBody,
			header: map[string]string{"Prefer": "wait=5"},
			setup:  orderResult(order(domain.OrderStatusPending, ""), false, false), status: 202, calls: []string{"PlaceOrder"},
			want: map[string]string{"Preference-Applied": "wait=5"},
			check: func(t *testing.T, f *fakeService, _ map[string]any) {
				if f.req.Wait != 5*time.Second {
					t.Errorf("wait = %v, want 5s", f.req.Wait)
				}
			}},
		{name: "Prefer: wait=60 is clamped to 10 s", method: "POST", path: "/v1/orders", body: orderBody,
			header: map[string]string{"Prefer": "respond-async, wait=60"},
			setup:  orderResult(order(domain.OrderStatusConfirmed, domain.OrderStatusConfirmed), true, false), status: 201,
			calls: []string{"PlaceOrder"}, want: map[string]string{"Preference-Applied": "wait=10"}},
		{name: "Prefer: wait=x is ignored", method: "POST", path: "/v1/orders", body: orderBody,
			header: map[string]string{"Prefer": "wait=x"},
			setup:  orderResult(order(domain.OrderStatusConfirmed, domain.OrderStatusConfirmed), true, false), status: 201,
			calls: []string{"PlaceOrder"}, want: map[string]string{"Preference-Applied": ""}},
		{name: "a declined payment is 402 payment-declined with the order and Location", method: "POST", path: "/v1/orders",
			body: orderBody, setup: orderResult(declined, true, false), status: 402, code: "payment-declined", calls: []string{"PlaceOrder"},
			want: map[string]string{"Location": "/v1/orders/" + orderID, "Idempotent-Replayed": ""},
			check: func(t *testing.T, _ *fakeService, doc map[string]any) {
				o, _ := doc["order"].(map[string]any)
				if doc["order_id"] != orderID || o["id"] != orderID || o["status"] != "failed" || doc["instance"] != "/v1/orders" {
					t.Errorf("problem = %v, want order_id, the failed order and the instance", doc)
				}
			}},
		{name: "a declined payment says the payment was declined", method: "POST", path: "/v1/orders", body: orderBody,
			setup: orderResult(declined, true, false), status: 402, code: "payment-declined", calls: []string{"PlaceOrder"},
			want:   map[string]string{"Location": "/v1/orders/" + orderID},
			detail: "the payment was declined; the order failed and its seats were released"},
		{name: "a token the provider does not know is 402 payment-declined saying the token was refused as invalid", method: "POST", path: "/v1/orders",
			body: orderBody, setup: orderResult(badToken, true, false), status: 402, code: "payment-declined", calls: []string{"PlaceOrder"},
			want:   map[string]string{"Location": "/v1/orders/" + orderID},
			detail: "the payment provider refused the payment token as invalid (resource_missing: it knows no such token); nothing was charged; the order failed and its seats were released",
			check:  member("order_id", orderID)},
		{name: "a replayed decline is 402 with Idempotent-Replayed", method: "POST", path: "/v1/orders", body: orderBody,
			setup: orderResult(declined, true, true), status: 402, code: "payment-declined", calls: []string{"PlaceOrder"},
			want: map[string]string{"Idempotent-Replayed": "true", "Location": "/v1/orders/" + orderID}},
		{name: "a payment past its deadline is 402 payment-failed with the order", method: "POST", path: "/v1/orders", body: orderBody,
			setup: orderResult(deadline, true, false), status: 402, code: "payment-failed", calls: []string{"PlaceOrder"},
			want: map[string]string{"Location": "/v1/orders/" + orderID}, check: member("order_id", orderID)},
		{name: "an already ordered reservation is 409 naming the order", method: "POST", path: "/v1/orders", body: orderBody,
			setup:  withErr(&commands.Rejection{Err: domain.ErrReservationAlreadyOrdered, ResourceID: orderID}),
			status: 409, code: "reservation-already-ordered", calls: []string{"PlaceOrder"}, check: member("order_id", orderID)},
		{name: "an expired reservation is 410", method: "POST", path: "/v1/orders", body: orderBody,
			setup: withErr(&commands.Rejection{Err: domain.ErrReservationExpired}), status: 410,
			code: "reservation-expired", calls: []string{"PlaceOrder"}},
		{name: "an unknown reservation is 404", method: "POST", path: "/v1/orders", body: orderBody,
			setup: withErr(&commands.Rejection{Err: domain.ErrReservationNotFound}), status: 404,
			code: "reservation-not-found", calls: []string{"PlaceOrder"}},
		{name: "a reused order key is 422", method: "POST", path: "/v1/orders", body: orderBody, setup: withErr(keyReused),
			status: 422, code: "idempotency-key-reused", calls: []string{"PlaceOrder"}},
		{name: "an order key in use is 409 with Retry-After", method: "POST", path: "/v1/orders", body: orderBody,
			setup: withErr(&commands.InUseError{RetryAfter: 4 * time.Second}), status: 409, code: "idempotency-key-in-use",
			calls: []string{"PlaceOrder"}, want: map[string]string{"Retry-After": "4"}},
		{name: "a missing payment.token is 400 naming it", method: "POST", path: "/v1/orders",
			body: `{"reservation_id":"` + resID + `","payment":{}}`, status: 400, code: "invalid-request", fields: []string{"payment.token"}},
		{name: "an empty payment.token is 400 naming it", method: "POST", path: "/v1/orders",
			body: `{"reservation_id":"` + resID + `","payment":{"token":""}}`, status: 400, code: "invalid-request", fields: []string{"payment.token"}},
		{name: "a blank payment.token is 400 naming it", method: "POST", path: "/v1/orders",
			body: `{"reservation_id":"` + resID + `","payment":{"token":"  "}}`, status: 400, code: "invalid-request", fields: []string{"payment.token"}},
		{name: "a payment.token with a control character is 400 naming it", method: "POST", path: "/v1/orders",
			body: `{"reservation_id":"` + resID + `","payment":{"token":"tok\u0000visa"}}`, status: 400, code: "invalid-request", fields: []string{"payment.token"}},
		{name: "an unknown member of payment is 400 naming it", method: "POST", path: "/v1/orders",
			body: `{"reservation_id":"` + resID + `","payment":{"token":"t","cvc":"1"}}`, status: 400, code: "unknown-field",
			fields: []string{"payment.cvc"}},
		{name: "an order body over 64 KiB is 413", method: "POST", path: "/v1/orders",
			body: `{"reservation_id":"` + resID + `","payment":{"token":"` + strings.Repeat("t", 70_000) + `"}}`, status: 413, code: "body-too-large"},
		{name: "an order without a key is 400", method: "POST", path: "/v1/orders", key: "-", body: orderBody, status: 400,
			code: "idempotency-key-invalid"},

		// GET /v1/orders/{id}.
		{name: "a pending order is 200 with a Retry-After poll hint", method: "GET", path: "/v1/orders/" + orderID,
			setup: func(f *fakeService) { f.order = order(domain.OrderStatusPending, "") }, status: 200, calls: []string{"GetOrder"},
			want: map[string]string{"Retry-After": "1"}},
		{name: "an order whose payment requires the customer's action shows its owner the client secret", method: "GET", path: "/v1/orders/" + orderID,
			setup: func(f *fakeService) {
				f.order = actionOrder()
				f.action = &commands.PaymentAction{ClientSecret: "pi_1_secret_abc", NextAction: json.RawMessage(`{"type":"use_stripe_sdk"}`)}
			},
			status: 200, calls: []string{"GetOrder"}, want: map[string]string{"Retry-After": "1"},
			check: member("payment", map[string]any{"status": "requires_action", "attempts": float64(1),
				"client_secret": "pi_1_secret_abc", "next_action": map[string]any{"type": "use_stripe_sdk"}})},
		{name: "a cancelling order is 200 with a Retry-After poll hint", method: "GET", path: "/v1/orders/" + orderID,
			setup: func(f *fakeService) { f.order = order(domain.OrderStatusCancelling, "") }, status: 200, calls: []string{"GetOrder"},
			want: map[string]string{"Retry-After": "1"}},
		{name: "a confirmed order is 200 without Retry-After", method: "GET", path: "/v1/orders/" + orderID,
			setup: func(f *fakeService) { f.order = order(domain.OrderStatusConfirmed, domain.OrderStatusConfirmed) }, status: 200,
			calls: []string{"GetOrder"}, want: map[string]string{"Retry-After": ""}, check: member("status", "confirmed")},
		{name: "an order whose refund is still being sent shows payment refund_pending", method: "GET", path: "/v1/orders/" + orderID,
			setup: func(f *fakeService) { f.order = refundOrder(false, false) }, status: 200, calls: []string{"GetOrder"},
			check: member("payment", map[string]any{"status": "refund_pending", "attempts": float64(1), "charge_id": "ch_1"})},
		{name: "an order whose refund is recorded shows payment refunded", method: "GET", path: "/v1/orders/" + orderID,
			setup: func(f *fakeService) { f.order = refundOrder(false, true) }, status: 200, calls: []string{"GetOrder"},
			check: member("payment", map[string]any{"status": "refunded", "attempts": float64(1), "charge_id": "ch_1", "refunded": true})},
		{name: "an order whose refund the provider refused shows its charge succeeded, not a refund pending", method: "GET",
			path: "/v1/orders/" + orderID, setup: func(f *fakeService) { f.order = refundOrder(true, false) }, status: 200,
			calls: []string{"GetOrder"}, check: func(t *testing.T, f *fakeService, doc map[string]any) {
				member("status", "needs_review")(t, f, doc)
				member("payment", map[string]any{"status": "succeeded", "attempts": float64(1), "charge_id": "ch_1"})(t, f, doc)
			}},
		{name: "another actor's order is 404", method: "GET", path: "/v1/orders/" + orderID, setup: withErr(domain.ErrOrderNotFound),
			status: 404, code: "order-not-found", calls: []string{"GetOrder"}},

		// POST /v1/orders/{id}/cancel.
		{name: "an accepted cancel is 200 with Location", method: "POST", path: "/v1/orders/" + orderID + "/cancel", key: "c-1",
			setup: orderResult(order(domain.OrderStatusCancelled, domain.OrderStatusConfirmed), true, false), status: 200,
			calls: []string{"CancelOrder"}, want: map[string]string{"Location": "/v1/orders/" + orderID, "Retry-After": ""},
			check: requested(commands.Request{Actor: "alice", Operation: commands.OpCancelOrder, Key: "c-1"})},
		{name: "a cancel while the payment is in flight is 202 with Retry-After", method: "POST", path: "/v1/orders/" + orderID + "/cancel",
			setup: orderResult(order(domain.OrderStatusCancelling, ""), false, false), status: 202, calls: []string{"CancelOrder"},
			want: map[string]string{"Location": "/v1/orders/" + orderID, "Retry-After": "1"}},
		{name: "a repeated cancel is answered with Idempotent-Replayed", method: "POST", path: "/v1/orders/" + orderID + "/cancel",
			setup: orderResult(order(domain.OrderStatusCancelled, domain.OrderStatusConfirmed), true, true), status: 200,
			calls: []string{"CancelOrder"}, want: map[string]string{"Idempotent-Replayed": "true"}},
		{name: "a cancel with an empty object body is accepted", method: "POST", path: "/v1/orders/" + orderID + "/cancel", body: `{}`,
			setup: orderResult(order(domain.OrderStatusCancelled, domain.OrderStatusConfirmed), true, false), status: 200,
			calls: []string{"CancelOrder"}},
		{name: "a cancel with a member is 400 unknown-field", method: "POST", path: "/v1/orders/" + orderID + "/cancel",
			body: `{"reason":"x"}`, status: 400, code: "unknown-field", fields: []string{"reason"}},
		{name: "a cancel of an id that is not a UUID is 404", method: "POST", path: "/v1/orders/42/cancel", status: 404,
			code: "order-not-found"},
		{name: "a cancel without a key is 400", method: "POST", path: "/v1/orders/" + orderID + "/cancel", key: "-", status: 400,
			code: "idempotency-key-invalid"},
		{name: "a refused cancel is 409 order-not-cancellable", method: "POST", path: "/v1/orders/" + orderID + "/cancel",
			setup: withErr(&commands.Rejection{Err: domain.ErrNotCancellable}), status: 409,
			code: "order-not-cancellable", calls: []string{"CancelOrder"}},

		// GET /v1/intents.
		{name: "GET /v1/intents explains the caller's intents with statuses", method: "GET", path: "/v1/intents?key=%22order-1%22",
			setup: func(f *fakeService) { f.explained = explainedOrder() }, status: 200, calls: []string{"ExplainIntents"},
			check: func(t *testing.T, f *fakeService, doc map[string]any) {
				if f.req.Actor != "alice" || f.req.Key != "order-1" {
					t.Errorf("ExplainIntents(actor %q, key %q), want alice and the unescaped key order-1", f.req.Actor, f.req.Key)
				}
				items, _ := doc["items"].([]any)
				if len(items) != 2 {
					t.Fatalf("items = %v, want 2", doc["items"])
				}
				for i, want := range []float64{402, 409} {
					if got := items[i].(map[string]any)["outcome"].(map[string]any)["status"]; got != want {
						t.Errorf("items[%d].outcome.status = %v, want %v", i, got, want)
					}
				}
			}},
		{name: "GET /v1/intents without intents is 200 with empty items", method: "GET", path: "/v1/intents?key=k",
			status: 200, calls: []string{"ExplainIntents"}, check: member("items", []any{})},
		{name: "GET /v1/intents without key is 400 naming key", method: "GET", path: "/v1/intents", status: 400,
			code: "idempotency-key-invalid", fields: []string{"key"}},
		{name: "GET /v1/intents with a 256-character key is 400", method: "GET", path: "/v1/intents?key=" + strings.Repeat("k", 256),
			status: 400, code: "idempotency-key-invalid", fields: []string{"key"}},
		{name: "GET /v1/intents needs a token", method: "GET", path: "/v1/intents?key=k", token: "-", status: 401, code: "unauthorized"},

		// Lists.
		{name: "GET /v1/shows is 200 with Booking-Position and a next cursor", method: "GET", path: "/v1/shows?limit=1", status: 200,
			calls: []string{"Shows"}, want: map[string]string{"Booking-Position": "7/3", "Content-Type": "application/json"},
			check: func(t *testing.T, _ *fakeService, doc map[string]any) {
				items, _ := doc["items"].([]any)
				if len(items) != 1 || doc["next_cursor"] == nil {
					t.Errorf("page = %v, want one item and a next cursor", doc)
				}
			}},
		{name: "GET /v1/orders is the caller's, with Booking-Position", method: "GET", path: "/v1/orders", status: 200,
			calls: []string{"Orders"}, want: map[string]string{"Booking-Position": "9/1"}, check: member("next_cursor", nil)},
		{name: "limit=0 is 400 naming limit", method: "GET", path: "/v1/shows?limit=0", status: 400, code: "invalid-request",
			fields: []string{"limit"}, check: member("detail", "limit must be a positive integer (values above 200 are clamped to 200)")},
		{name: "limit=-1 is 400 naming limit", method: "GET", path: "/v1/orders?limit=-1", status: 400, code: "invalid-request",
			fields: []string{"limit"}},
		{name: "an empty limit is 400 naming limit", method: "GET", path: "/v1/orders?limit=", status: 400, code: "invalid-request",
			fields: []string{"limit"}},
		{name: "a repeated limit is 400 naming limit", method: "GET", path: "/v1/orders?limit=1&limit=2", status: 400, code: "invalid-request",
			fields: []string{"limit"}},
		{name: "a repeated cursor is 400 naming cursor", method: "GET", path: "/v1/shows?cursor=a&cursor=b", status: 400, code: "invalid-request",
			fields: []string{"cursor"}},
		{name: "two Authorization headers are 401", method: "GET", path: "/v1/orders", also: map[string]string{"Authorization": "Bearer " + tokAdmin},
			status: 401, code: "unauthorized"},
		{name: "a cursor not handed out is 400 naming cursor", method: "GET", path: "/v1/shows?cursor=abc", status: 400,
			code: "invalid-request", fields: []string{"cursor"}},
		{name: "a read model that fails is 503 with Retry-After", method: "GET", path: "/v1/shows",
			setup: func(f *fakeService) { f.readErr = errors.New("connection reset") }, status: 503, code: "unavailable",
			calls: []string{"Shows"}, want: map[string]string{"Retry-After": "1"}},

		// The retry budget.
		{name: "a POST over the actor's budget is 429 with Retry-After", method: "POST", path: "/v1/reservations", body: resBody,
			cfg: func(c *httpapi.Config) { c.RetryBudgetRate, c.RetryBudgetBurst = 0.01, 1 }, before: 1, status: 429,
			code: "rate-limited", calls: []string{"ReserveSeats"}, retryAfter: [2]int{1, 100}},
		{name: "GETs do not spend the budget", method: "GET", path: "/v1/shows/" + showID,
			cfg: func(c *httpapi.Config) { c.RetryBudgetRate, c.RetryBudgetBurst = 0.5, 1 }, before: 3, status: 200,
			calls: []string{"GetShow", "GetShow", "GetShow", "GetShow"}},

		// Webhooks.
		{name: "a webhook needs no bearer token and is 204", method: "POST", path: "/v1/provider/webhooks", token: "-", key: "-",
			header: map[string]string{"Stripe-Signature": "t=1,v1=00"}, body: `{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`,
			status: 204, calls: []string{"ReceiveWebhook"}},
		{name: "a webhook with a bad signature is 400", method: "POST", path: "/v1/provider/webhooks", token: "-", key: "-",
			body: `{"id":"evt_1"}`, setup: withErr(commands.ErrWebhookSignature), status: 400, code: "invalid-signature",
			calls: []string{"ReceiveWebhook"}},
		{name: "a webhook body over 1 MiB is 413", method: "POST", path: "/v1/provider/webhooks", token: "-", key: "-",
			body: strings.Repeat(" ", 1<<20+1), status: 413, code: "body-too-large"},
	}
}

// fakeAuthenticator answers every token with actor, or err when set.
type fakeAuthenticator struct {
	actor httpapi.Actor
	err   error
}

func (f fakeAuthenticator) Authenticate(context.Context, string) (httpapi.Actor, error) {
	return f.actor, f.err
}

func TestHTTPContract(t *testing.T) {
	t.Parallel()
	for _, tc := range contractCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeService{}
			if tc.setup != nil {
				tc.setup(f)
			}
			cfg := httpapi.Config{
				Tokens:           map[string]httpapi.Actor{tokAlice: {ID: "alice"}, tokAdmin: {ID: "admin", Admin: true}},
				RetryBudgetRate:  1000,
				RetryBudgetBurst: 1000,
				Ready:            func(context.Context) error { return nil },
			}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			h := httpapi.New(cfg, f, f, slog.New(slog.DiscardHandler))
			var rec *httptest.ResponseRecorder
			for range tc.before + 1 {
				rec = httptest.NewRecorder()
				h.ServeHTTP(rec, newContractRequest(tc))
			}
			res := rec.Result()
			raw, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, res.StatusCode, raw, tc.status)
			}
			for name, want := range tc.want {
				if got := res.Header.Get(name); got != want {
					t.Errorf("header %s = %q, want %q", name, got, want)
				}
			}
			if lo, hi := tc.retryAfter[0], tc.retryAfter[1]; hi > 0 {
				if got, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || got < lo || got > hi {
					t.Errorf("Retry-After = %q, want seconds from %d to %d", res.Header.Get("Retry-After"), lo, hi)
				}
			}
			var doc map[string]any
			if len(raw) > 0 && strings.Contains(res.Header.Get("Content-Type"), "json") {
				if err := json.Unmarshal(raw, &doc); err != nil {
					t.Fatalf("answer %q is not a JSON object: %v", raw, err)
				}
			}
			if id := res.Header.Get(httpapi.HeaderRequestID); id == "" {
				t.Errorf("the answer has no %s", httpapi.HeaderRequestID)
			}
			checkProblem(t, tc, res.Header, doc)
			// Every answer is checked against openapi.yaml (a case with a
			// +json body type other than application/json, which the document
			// describes in prose only, has its request checked as JSON).
			creq := newContractRequest(tc)
			if strings.HasSuffix(creq.Header.Get("Content-Type"), "+json") {
				creq.Header.Set("Content-Type", "application/json")
			}
			if problems := contractChecker(t).Check(creq, []byte(tc.body), res, raw); !apicontract.Skipped(tc.path) && len(problems) > 0 {
				t.Errorf("OpenAPI contract: %s %s answered %d:\n  %s", tc.method, tc.path, res.StatusCode, strings.Join(problems, "\n  "))
			}
			f.mu.Lock()
			calls := f.calls
			f.mu.Unlock()
			if diff := cmp.Diff(tc.calls, calls); diff != "" {
				t.Errorf("service calls (-want +got):\n%s", diff)
			}
			if tc.check != nil {
				tc.check(t, f, doc)
			}
		})
	}
}

// newContractRequest builds tc's request: alice's token, a key on every
// POST and a JSON body type unless tc says otherwise.
func newContractRequest(tc contractCase) *http.Request {
	r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
	if tc.body == "" {
		r = httptest.NewRequest(tc.method, tc.path, nil)
	} else {
		r.Header.Set("Content-Type", "application/json")
	}
	switch tc.token {
	case "":
		r.Header.Set("Authorization", "Bearer "+tokAlice)
	case "-":
	default:
		r.Header.Set("Authorization", "Bearer "+tc.token)
	}
	if tc.method == http.MethodPost {
		switch tc.key {
		case "":
			r.Header.Set("Idempotency-Key", "key-1")
		case "-":
		default:
			r.Header.Set("Idempotency-Key", tc.key)
		}
	}
	for k, v := range tc.header {
		r.Header.Set(k, v)
	}
	for k, v := range tc.also {
		r.Header.Add(k, v)
	}
	return r
}

// checkProblem checks an error answer's RFC 9457 document: its media type,
// type, title, status, detail and code, and its fields; and that a success
// is plain JSON.
func checkProblem(t *testing.T, tc contractCase, h http.Header, doc map[string]any) {
	t.Helper()
	if tc.code == "" {
		if ct := h.Get("Content-Type"); strings.HasPrefix(ct, "application/problem+json") {
			t.Errorf("a %d answer is a problem: %v", tc.status, doc)
		}
		return
	}
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	want := map[string]any{"type": "https://booking.invalid/problems/" + tc.code, "title": http.StatusText(tc.status),
		"status": float64(tc.status), "code": tc.code}
	got := map[string]any{"type": doc["type"], "title": doc["title"], "status": doc["status"], "code": doc["code"]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problem (-want +got):\n%s", diff)
	}
	if d, _ := doc["detail"].(string); d == "" {
		t.Errorf("problem %v has no detail", doc)
	} else if tc.detail != "" && d != tc.detail {
		t.Errorf("problem detail = %q, want %q", d, tc.detail)
	}
	// request_id is the server's UUIDv7 whatever the client sent;
	// client_request_id the client's id, which X-Request-Id then echoes
	// (every id a case sends is a valid one), else absent, and X-Request-Id
	// is request_id.
	id, _ := doc["request_id"].(string)
	if u, err := uuid.Parse(id); err != nil || u.Version() != 7 {
		t.Errorf("problem request_id = %q, want the server's UUIDv7", id)
	}
	sent, echo := tc.header[httpapi.HeaderRequestID], id
	if sent != "" {
		echo = sent
	}
	if c, ok := doc["client_request_id"]; (sent == "" && ok) || (sent != "" && c != sent) {
		t.Errorf("problem client_request_id = %v, want %q (absent when empty)", c, sent)
	}
	if got := h.Get(httpapi.HeaderRequestID); got != echo {
		t.Errorf("%s = %q, want %q", httpapi.HeaderRequestID, got, echo)
	}
	if tc.fields != nil {
		var fields []string
		for _, f := range doc["fields"].([]any) {
			fields = append(fields, f.(string))
		}
		if diff := cmp.Diff(tc.fields, fields); diff != "" {
			t.Errorf("problem fields (-want +got):\n%s", diff)
		}
	}
}

var (
	checkerOnce sync.Once
	checker     *apicontract.Checker
	checkerErr  error
)

// contractChecker returns the checker of openapi.yaml (apicontract), built once.
func contractChecker(t testing.TB) *apicontract.Checker {
	t.Helper()
	checkerOnce.Do(func() {
		spec, err := os.ReadFile("openapi.yaml")
		if err == nil {
			checker, err = apicontract.New(spec)
		}
		checkerErr = err
	})
	if checkerErr != nil {
		t.Fatalf("openapi.yaml: %v", checkerErr)
	}
	return checker
}

// TestOpenAPIDocumentIsValid checks openapi.yaml against the OpenAPI 3.1
// meta-schema with libopenapi-validator (part of `make lint-openapi`, with
// TestOpenAPILint).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	if problems := contractChecker(t).ValidateDocument(); len(problems) > 0 {
		t.Errorf("openapi.yaml is not a valid OpenAPI 3.1 document:\n  %s", strings.Join(problems, "\n  "))
	}
}
