package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// Views: the JSON shapes of the API's resources (docs/api.md, "Resources").

type showView struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	StartsAt  time.Time    `json:"starts_at"`
	Capacity  int          `json:"capacity"`
	Available int          `json:"available"`
	Price     domain.Money `json:"price"`
}

func viewShow(s domain.Show) showView {
	return showView{ID: s.ID, Name: s.Name, StartsAt: s.StartsAt.UTC(), Capacity: s.Capacity, Available: s.Available(), Price: s.Price}
}

type reservationView struct {
	ID        string       `json:"id"`
	ShowID    string       `json:"show_id"`
	Quantity  int          `json:"quantity"`
	Status    string       `json:"status"`
	ExpiresAt time.Time    `json:"expires_at"`
	Amount    domain.Money `json:"amount"`
	OrderID   string       `json:"order_id,omitempty"`
}

func viewReservation(r domain.Reservation) reservationView {
	return reservationView{ID: r.ID, ShowID: r.ShowID, Quantity: r.Quantity, Status: r.Status,
		ExpiresAt: r.ExpiresAt.UTC(), Amount: r.Amount, OrderID: r.OrderID}
}

// paymentView is an order's payment. ChargeID is the provider's payment
// (a Stripe PaymentIntent id). ClientSecret and NextAction are set only
// while the payment requires the customer's action, and only in answers
// to the order's actor (withAction): the customer's client finishes the
// payment with them (Stripe.js handleNextAction).
type paymentView struct {
	Status       string          `json:"status"`
	Attempts     int             `json:"attempts"`
	ChargeID     string          `json:"charge_id,omitempty"`
	Refunded     bool            `json:"refunded,omitempty"`
	ClientSecret string          `json:"client_secret,omitempty"`
	NextAction   json.RawMessage `json:"next_action,omitempty"`
}

type orderView struct {
	ID            string          `json:"id"`
	ReservationID string          `json:"reservation_id"`
	ShowID        string          `json:"show_id"`
	Status        string          `json:"status"`
	Quantity      int             `json:"quantity"`
	Amount        domain.Money    `json:"amount"`
	Tickets       []domain.Ticket `json:"tickets"`
	Payment       paymentView     `json:"payment"`
	FailReason    string          `json:"failure_reason,omitempty"`
}

// viewOrder is o as the API answers it. payment.status is the paying
// charge's state once it is known: refunded once its refund is recorded,
// refund_pending while a requested refund is still being sent, and
// succeeded otherwise — also when the provider refused the refund (the
// charge stands and is no longer refunded by the service; the order is in
// needs_review). Before a charge it is the last attempt's outcome, else
// pending.
func viewOrder(o domain.Order) orderView {
	p := paymentView{Status: "pending", Attempts: len(o.Attempts), ChargeID: o.ChargeID}
	if last := o.LastAttempt(); last != nil && last.Outcome != domain.OutcomeNone {
		p.Status = last.Outcome
	}
	if o.ChargeID != "" {
		p.Status = domain.OutcomeSucceeded
		if r, ok := o.Refunds[o.ChargeID]; ok {
			p.Refunded = r.Succeeded
			switch {
			case r.Succeeded:
				p.Status = "refunded"
			case !r.Refused:
				p.Status = "refund_pending"
			}
		}
	}
	tickets := o.Tickets
	if o.Status != domain.OrderStatusConfirmed || tickets == nil {
		tickets = []domain.Ticket{} // tickets are valid only while confirmed
	}
	return orderView{ID: o.ID, ReservationID: o.ReservationID, ShowID: o.ShowID, Status: o.Status, Quantity: o.Quantity,
		Amount: o.Amount, Tickets: tickets, Payment: p, FailReason: o.FailReason}
}

// withAction returns o's view with what its customer's client needs to
// finish a payment that requires the customer's action, while it does
// (Service.PaymentAction). Only the order's actor is ever answered with
// it: the callers hold an order the actor's request found or placed.
func (a *api) withAction(ctx context.Context, o domain.Order) (orderView, error) {
	v := viewOrder(o)
	act, err := a.svc.PaymentAction(ctx, o)
	if err != nil || act == nil {
		return v, err
	}
	v.Payment.ClientSecret, v.Payment.NextAction = act.ClientSecret, act.NextAction
	return v, nil
}

// writeCreated answers 201 with the created (or replayed) resource at location.
func writeCreated(w http.ResponseWriter, out commands.Outcome, location string, body any) {
	markReplayed(w, out)
	w.Header().Set("Location", location)
	writeJSON(w, http.StatusCreated, body)
}

// pathID returns the {id} path parameter if it is a UUID.
func pathID(r *http.Request) (string, bool) {
	id := chi.URLParam(r, "id")
	u, err := uuid.Parse(id)
	if err != nil || u.String() != strings.ToLower(id) {
		return "", false
	}
	return u.String(), true
}

// bodyUUID reads a required UUID string field in canonical lowercase form.
func bodyUUID(b *body, field string) string {
	s := b.String(field)
	if b.err != nil {
		return ""
	}
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		b.fail(field, field+" must be a UUID such as 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
		return ""
	}
	return u.String()
}

// showCommand reads the body of POST /v1/shows. Strings are taken as sent
// (the name byte for byte), the start as an instant in UTC, numbers by value.
// Errors are Invalid and name the field.
func showCommand(b *body) (commands.ScheduleShowCommand, error) {
	cmd := commands.ScheduleShowCommand{Name: b.String("name"), StartsAt: b.Time("starts_at")}
	capacity := b.IntIn("capacity", 1, domain.MaxCapacity, fmt.Sprintf("capacity must be between 1 and %d", domain.MaxCapacity))
	cmd.Price = b.Money("price")
	if err := b.done(); err != nil {
		return commands.ScheduleShowCommand{}, err
	}
	cmd.Capacity = int(capacity)
	if err := domain.CheckPrice("price", cmd.Price); err != nil {
		return commands.ScheduleShowCommand{}, err
	}
	return cmd, nil
}

// reservationCommand reads the body of POST /v1/reservations. Errors are
// Invalid and name the field.
func reservationCommand(b *body) (commands.ReserveSeatsCommand, error) {
	showID := bodyUUID(b, "show_id")
	q := b.IntIn("quantity", 1, domain.MaxSeatsPerHold, "quantity must be between 1 and "+strconv.Itoa(domain.MaxSeatsPerHold))
	if err := b.done(); err != nil {
		return commands.ReserveSeatsCommand{}, err
	}
	return commands.ReserveSeatsCommand{ShowID: showID, Quantity: int(q)}, nil
}

// orderCommand reads the body of POST /v1/orders. The payment token is a
// secret passed on byte for byte. Errors are Invalid and name the field.
func orderCommand(b *body) (commands.PlaceOrderCommand, error) {
	resID := bodyUUID(b, "reservation_id")
	pay := b.Object("payment")
	token := pay.String("token")
	if b.err == nil { // otherwise b.done reports b's first error (and every missing field)
		if err := pay.done(); err != nil {
			return commands.PlaceOrderCommand{}, err
		}
	}
	if err := b.done(); err != nil {
		return commands.PlaceOrderCommand{}, err
	}
	if !validToken(token) {
		return commands.PlaceOrderCommand{}, httpError(domain.Invalid, "invalid-request",
			"payment.token must have 1 to 255 visible ASCII characters, such as pm_card_visa", "payment.token")
	}
	return commands.PlaceOrderCommand{ReservationID: resID, PaymentToken: token}, nil
}

// validToken reports whether a payment token has the shape of one: 1 to
// 255 visible ASCII characters (Stripe's ids, such as pm_card_visa or
// tok_visa, are letters, digits and underscores). Blank tokens and control
// characters are refused before anything is recorded.
func validToken(t string) bool {
	if t == "" || len(t) > 255 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}

// readCommand reads a state-changing POST whose body is a command: its
// idempotency envelope for operation op (request), then its body, decoded
// strictly and built into the typed command by parse. Errors are Invalid
// (400, or 413, 415, 408 for the body) and nothing has been recorded.
func readCommand[C any](r *http.Request, op string, parse func(*body) (C, error)) (commands.Request, C, error) {
	var zero C
	req, err := request(r, op)
	if err != nil {
		return commands.Request{}, zero, err
	}
	b, err := decodeBody(r)
	if err != nil {
		return commands.Request{}, zero, err
	}
	cmd, err := parse(b)
	if err != nil {
		return commands.Request{}, zero, err
	}
	return req, cmd, nil
}

func (a *api) postShow(w http.ResponseWriter, r *http.Request) {
	if !actorFrom(r.Context()).Admin {
		a.writeError(w, r, domain.ErrForbidden.With("only an admin may create shows"))
		return
	}
	postCreated(a, w, r, commands.OpScheduleShow, showCommand, a.svc.ScheduleShow, func(show domain.Show) (string, any) {
		return "/v1/shows/" + show.ID, viewShow(show)
	})
}

func (a *api) getShow(w http.ResponseWriter, r *http.Request) {
	if show, ok := getByID(a, w, r, domain.ErrShowNotFound, a.svc.GetShow); ok {
		writeJSON(w, http.StatusOK, viewShow(show))
	}
}

func (a *api) postReservation(w http.ResponseWriter, r *http.Request) {
	postCreated(a, w, r, commands.OpReserveSeats, reservationCommand, a.svc.ReserveSeats, func(res domain.Reservation) (string, any) {
		return "/v1/reservations/" + res.ID, viewReservation(res)
	})
}

func (a *api) getReservation(w http.ResponseWriter, r *http.Request) {
	if res, ok := getByID(a, w, r, domain.ErrReservationNotFound, func(ctx context.Context, id string) (domain.Reservation, error) {
		return a.svc.GetReservation(ctx, actorFrom(ctx).ID, id)
	}); ok {
		writeJSON(w, http.StatusOK, viewReservation(res))
	}
}

// postCreated answers a state-changing POST that creates a resource: it reads
// the command (readCommand with op and parse), runs it with the service's
// call under a detached context, and answers 201 Created with the Location
// and body that created returns for the resource, marked when replayed. Any
// error goes through the problem mapping.
func postCreated[C, R any](a *api, w http.ResponseWriter, r *http.Request, op string, parse func(*body) (C, error),
	call func(context.Context, commands.Request, C) (R, commands.Outcome, error), created func(R) (location string, body any)) {
	req, cmd, err := readCommand(r, op, parse)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var out commands.Outcome
	v, ok := execute(a, w, r, func(ctx context.Context) (R, error) {
		v, o, err := call(ctx, req, cmd)
		out = o
		return v, err
	})
	if ok {
		location, body := created(v)
		writeCreated(w, out, location, body)
	}
}

// execute runs call, a state-changing use case, under a detached context
// (see detached), in the command's span (commandSpan). Its error goes through the problem mapping, and then ok is
// false.
func execute[R any](a *api, w http.ResponseWriter, r *http.Request, call func(ctx context.Context) (R, error)) (R, bool) {
	ctx, cancel := detached(r)
	defer cancel()
	ctx, span := a.commandSpan(ctx, r)
	v, err := call(ctx)
	if err != nil {
		span.SetAttributes(attribute.Int("http.response.status_code", statusOf(err)))
	}
	span.End()
	if err != nil {
		a.writeError(w, r, err)
		return v, false
	}
	return v, true
}

// getByID reads the resource of GET /v1/<resources>/{id} with get: an {id}
// that is not a UUID is notFound, and an error of get goes through the
// problem mapping. ok is false once an error has been answered.
func getByID[R any](a *api, w http.ResponseWriter, r *http.Request, notFound error, get func(ctx context.Context, id string) (R, error)) (R, bool) {
	var zero R
	id, ok := pathID(r)
	if !ok {
		a.writeError(w, r, notFound)
		return zero, false
	}
	v, err := get(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return zero, false
	}
	return v, true
}

func (a *api) postOrder(w http.ResponseWriter, r *http.Request) {
	req, cmd, err := readCommand(r, commands.OpPlaceOrder, orderCommand)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	applyWait(w, r, &req)
	if res, ok := execute(a, w, r, func(ctx context.Context) (commands.OrderResult, error) { return a.svc.PlaceOrder(ctx, req, cmd) }); ok {
		a.writeOrderResult(w, r, res, http.StatusCreated)
	}
}

// writeOrderResult answers an order by the intent's first final outcome:
// success status when confirmed (or cancelled by its owner), 402 when the
// payment failed, 202 with Location and Retry-After while pending.
func (a *api) writeOrderResult(w http.ResponseWriter, r *http.Request, res commands.OrderResult, success int) {
	markReplayed(w, res.Outcome)
	o := res.Order
	w.Header().Set("Location", "/v1/orders/"+o.ID)
	if !res.Final {
		v, err := a.withAction(r.Context(), o)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		setRetryAfter(w, time.Second)
		writeJSON(w, http.StatusAccepted, v)
		return
	}
	switch o.FirstOutcome {
	case domain.FailPaymentDeclined:
		a.writeError(w, r, &orderFailedError{order: o, err: domain.ErrPaymentDeclined.With(declineDetail(o))})
	case domain.FailPaymentDeadline, domain.FailNoAttempt:
		a.writeError(w, r, &orderFailedError{order: o,
			err: domain.ErrPaymentFailed.With("the payment did not complete (" + o.FirstOutcome + "); the order failed")})
	default:
		writeJSON(w, success, viewOrder(o))
	}
}

// declineDetail is the detail of an order failed with payment_declined: a
// decline by the card's issuer, or the provider's refusal of the payment
// request as invalid (nothing executed), which for resource_missing means
// the provider does not know the payment token. Either is the 402
// payment-declined problem.
func declineDetail(o domain.Order) string {
	const tail = "; the order failed and its seats were released"
	if last := o.LastAttempt(); last != nil && last.Outcome == domain.OutcomeFailed && last.FailureReason == domain.ReasonProviderRefused {
		if last.FailureCode == domain.CodeResourceMissing {
			return "the payment provider refused the payment token as invalid (resource_missing: it knows no such token); nothing was charged" + tail
		}
		return "the payment provider refused the payment request as invalid (" + last.FailureCode + "); nothing was charged" + tail
	}
	return "the payment was declined" + tail
}

func (a *api) getOrder(w http.ResponseWriter, r *http.Request) {
	o, ok := getByID(a, w, r, domain.ErrOrderNotFound, func(ctx context.Context, id string) (domain.Order, error) {
		return a.svc.GetOrder(ctx, actorFrom(ctx).ID, id)
	})
	if !ok {
		return
	}
	v, err := a.withAction(r.Context(), o)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if o.Status == domain.OrderStatusPending || o.Status == domain.OrderStatusCancelling {
		setRetryAfter(w, time.Second) // a poll hint while the outcome is not final
	}
	writeJSON(w, http.StatusOK, v)
}

func (a *api) postCancel(w http.ResponseWriter, r *http.Request) {
	req, err := request(r, commands.OpCancelOrder)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	id, ok := pathID(r)
	if !ok {
		a.writeError(w, r, domain.ErrOrderNotFound)
		return
	}
	has, err := hasBody(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if has {
		b, err := decodeBody(r)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if err := b.done(); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	res, ok := execute(a, w, r, func(ctx context.Context) (commands.OrderResult, error) { return a.svc.CancelOrder(ctx, req, id) })
	if !ok {
		return
	}
	markReplayed(w, res.Outcome)
	w.Header().Set("Location", "/v1/orders/"+id)
	if !res.Final {
		setRetryAfter(w, time.Second)
		writeJSON(w, http.StatusAccepted, viewOrder(res.Order))
		return
	}
	writeJSON(w, http.StatusOK, viewOrder(res.Order))
}

// hasBody reports whether r, whose body is optional, carries one: a
// declared length above zero, or an undeclared one (chunked, or HTTP/2
// without content-length) of at least one byte, which stays readable whole.
// An error is the body's read error (bodyReadError).
func hasBody(r *http.Request) (bool, error) {
	switch {
	case r.ContentLength > 0:
		return true, nil
	case r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody:
		return false, nil
	}
	var first [1]byte
	if n, err := io.ReadFull(r.Body, first[:]); n == 0 {
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, bodyReadError(err)
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(first[:]), r.Body), r.Body}
	return true, nil
}

// detachedBudget bounds a state-changing request's work once detached from
// the client's connection.
const detachedBudget = 30 * time.Second

// detached returns a context for a state-changing request that a client
// hang-up does not cancel (context.WithoutCancel), bounded by
// detachedBudget: a request that got past its commit point finishes its
// follow-ups itself instead of leaving them to the background jobs.
func detached(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), detachedBudget)
}
