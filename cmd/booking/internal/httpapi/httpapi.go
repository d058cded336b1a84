// Package httpapi is the HTTP adapter of the booking service: the router,
// its middleware (authentication, the per-actor retry budget, the read
// deadline of bodies), the strict decoding of requests, the handlers of the
// v1 API and the one mapping of errors to RFC 9457 problem documents.
//
// It calls the commands layer and the read models only through the Service
// and Reads interfaces it declares, so its HTTP contract (statuses, headers,
// problem documents, the idempotency headers) is tested with net/http/httptest
// against small fakes. package main builds the real implementations and
// passes them to New.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/cmd/booking/internal/identity"
	"github.com/retrysafe/booking/cmd/booking/internal/logging"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/projections"
)

// Service is what the handlers need from the commands layer; it is
// implemented by *commands.Handler. Every method is safe for concurrent use.
// Errors are *domain.Error (see domain.KindOf), a *commands.Rejection, a
// *commands.InUseError, or anything else, which is answered 500.
type Service interface {
	// ScheduleShow carries out POST /v1/shows under the idempotency key of req.
	ScheduleShow(ctx context.Context, req commands.Request, cmd commands.ScheduleShowCommand) (domain.Show, commands.Outcome, error)
	// GetShow returns a show from the event store.
	GetShow(ctx context.Context, id string) (domain.Show, error)
	// ReserveSeats carries out POST /v1/reservations.
	ReserveSeats(ctx context.Context, req commands.Request, cmd commands.ReserveSeatsCommand) (domain.Reservation, commands.Outcome, error)
	// GetReservation returns actor's reservation id from the event store.
	GetReservation(ctx context.Context, actor, id string) (domain.Reservation, error)
	// PlaceOrder carries out POST /v1/orders, waiting up to req.Wait for the
	// payment's outcome.
	PlaceOrder(ctx context.Context, req commands.Request, cmd commands.PlaceOrderCommand) (commands.OrderResult, error)
	// GetOrder returns actor's order id from the event store.
	GetOrder(ctx context.Context, actor, id string) (domain.Order, error)
	// CancelOrder carries out POST /v1/orders/{id}/cancel.
	CancelOrder(ctx context.Context, req commands.Request, orderID string) (commands.OrderResult, error)
	// ExplainIntents returns actor's intents under key, one per operation,
	// each with its durable timeline (GET /v1/intents); empty when there
	// are none.
	ExplainIntents(ctx context.Context, actor, key string) ([]commands.IntentExplanation, error)
	// PaymentAction returns what the customer's client needs to finish
	// o's payment while it requires the customer's action (nil otherwise);
	// shown only to o's actor.
	PaymentAction(ctx context.Context, o domain.Order) (*commands.PaymentAction, error)
	// CheckWebhookHeader checks a notification's Stripe-Signature header
	// alone (its form and timestamp), before the body is read.
	CheckWebhookHeader(ctx context.Context, signature string) error
	// ReceiveWebhook verifies (the Stripe-Signature header over the raw
	// body) and records a payment provider notification.
	ReceiveWebhook(ctx context.Context, signature string, body []byte) error
}

// Reads is what the list endpoints need from the read models; it is
// implemented by *projections.Reader. Each page comes from one database
// snapshot and carries the read model's position.
type Reads interface {
	// Shows returns up to limit shows by start time after the key after (nil: from the start).
	Shows(ctx context.Context, after *projections.ShowKey, limit int) (projections.ShowPage, error)
	// Orders returns up to limit of actor's orders, newest first, after the key after.
	Orders(ctx context.Context, actor string, after *projections.OrderKey, limit int) (projections.OrderPage, error)
}

// Actor is an authenticated caller: a stable id (never the token) and
// whether it is an admin (see package identity for the id's format).
type Actor = identity.Actor

// Config is the HTTP adapter's configuration. The zero value of every
// optional field leaves its feature out.
type Config struct {
	// Tokens maps a bearer token (RFC 6750) to its actor; used when
	// Authenticator is nil.
	Tokens map[string]Actor
	// Authenticator maps a bearer token to its actor (a JWT verifier);
	// nil: the static Tokens.
	Authenticator identity.Authenticator
	// RetryBudgetRate and RetryBudgetBurst size the per-actor token bucket
	// of POST requests: sustained requests per second, and burst size.
	RetryBudgetRate  float64
	RetryBudgetBurst int
	// Ready answers GET /readyz: nil when the service can serve (the
	// database answers). An error that is a *DependencyError names the
	// dependency in the 503's detail; any other is PostgreSQL's ("the
	// database is unreachable"). Nil Ready: always ready.
	Ready func(ctx context.Context) error
	// RateLimited is called once per request refused 429 by the retry budget.
	RateLimited func()
	// ObserveRequest is called once per answered request, with its route
	// template (see routeOf), method, status code and the time from its
	// arrival to its complete answer: the HTTP RED metrics. Nil: none.
	ObserveRequest func(route, method string, code int, elapsed time.Duration)
	// ObserveWebhook is called once per provider notification received,
	// with its result (WebhookResults). Nil: none.
	ObserveWebhook func(result string)
	// TracerProvider records a server span per request (otelhttp) and a
	// span per state-changing use case (see traced). Nil: no spans; a
	// caller's W3C traceparent is still carried into the events.
	TracerProvider trace.TracerProvider
	// WebhookTimeout bounds one provider notification, from the end of its
	// headers to its answer (0: DefaultWebhookTimeout); WebhookConcurrency
	// bounds the notifications worked on at once (0:
	// DefaultWebhookConcurrency). See newWebhookHandler.
	WebhookTimeout     time.Duration
	WebhookConcurrency int
	// Test is mounted at /_test (fault-injection control); nil in the
	// production build.
	Test http.Handler
}

// New returns the API's handler: every route of the v1 API, /healthz,
// /readyz and /openapi.yaml (the metrics are the admin listener's, never
// the API's: /metrics answers 404 here). reads may be nil, and then the list
// endpoints answer 503. log receives internal errors in full and one access
// line per request; every line logged with a request's context carries its
// request_id (the service's id) and client_request_id (the client's kept
// X-Request-Id), as problem details do. The handler is safe
// for concurrent use.
func New(cfg Config, svc Service, reads Reads, log *slog.Logger) http.Handler {
	log = slog.New(logging.Handler(log.Handler()))
	auth := cfg.Authenticator
	if auth == nil {
		auth = identity.Tokens(cfg.Tokens)
	}
	a := &api{svc: svc, auth: auth, log: log, ready: cfg.Ready, rateLimited: cfg.RateLimited,
		budget: newBudget(cfg.RetryBudgetRate, cfg.RetryBudgetBurst), testAPI: cfg.Test,
		observe: cfg.ObserveRequest, observeWebhook: cfg.ObserveWebhook, tracerProvider: cfg.TracerProvider}
	a.webhooks = newWebhookHandler(a, svc, webhookBudget{timeout: cfg.WebhookTimeout, concurrency: cfg.WebhookConcurrency})
	if reads != nil {
		a.lists = newLists(reads, a.writeError)
	}
	return a.routes()
}

// StatusOf returns the HTTP status of err, from the one table that maps an
// error kind to a status (see httperr.go).
func StatusOf(err error) int { return statusOf(err) }

// DependencyError is an error of Config.Ready that names the dependency
// that failed, other than PostgreSQL: GET /readyz answers 503 with detail
// "the <Name> is unreachable".
type DependencyError struct {
	// Name is the dependency, as the detail names it, e.g. "event store
	// (KurrentDB)".
	Name string
	// Err is the dependency's error (logged, never sent).
	Err error
}

func (e *DependencyError) Error() string { return e.Name + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *DependencyError) Unwrap() error { return e.Err }
