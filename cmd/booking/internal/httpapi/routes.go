package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/cmd/booking/internal/identity"
	"github.com/retrysafe/booking/domain"
)

// api is the HTTP API of docs/api.md, "HTTP API (v1) and the idempotency
// contract". It is safe for concurrent use.
type api struct {
	svc         Service
	auth        identity.Authenticator
	log         *slog.Logger
	ready       func(ctx context.Context) error
	rateLimited func()
	budget      *budget
	webhooks    http.Handler
	lists       listReader
	// observe receives each answered request (the HTTP metrics); nil: none.
	observe func(route, method string, code int, elapsed time.Duration)
	// observeWebhook receives each notification's result; nil: none.
	observeWebhook func(result string)
	// tracerProvider records the request and command spans; nil: none.
	tracerProvider trace.TracerProvider
	// testAPI serves /_test (fault-injection control); nil in the
	// production build.
	testAPI http.Handler
}

// listReader serves the list endpoints from the read models; nil until the
// projections are wired.
type listReader interface {
	ListShows(w http.ResponseWriter, r *http.Request)
	ListOrders(w http.ResponseWriter, r *http.Request, actorID string)
}

type ctxKey int

const actorKey ctxKey = iota

func actorFrom(ctx context.Context) Actor {
	a, _ := ctx.Value(actorKey).(Actor)
	return a
}

func (a *api) routes() http.Handler {
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	r := chi.NewRouter()
	rt := r
	// Outermost first: the trace (the caller's traceparent, the request's
	// span), the request id (so every later line and answer has it) and the
	// span's name, the access log and HTTP metrics (which see the
	// recoverer's 500), then the panic recovery.
	r.Use(a.traced)
	r.Use(requestID)
	r.Use(nameSpan)
	r.Use(middleware.RequestLogger(accessLog{log: a.log, observe: a.observe}))
	r.Use(a.recoverer)
	r.Use(lingerAfterBodyTimeout)
	// HEAD on a GET route runs the GET handler, with its authentication,
	// metrics and problem answers (RFC 9110 §9.3.2); net/http sends the
	// headers and drops the body.
	r.Use(middleware.GetHead)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	r.Get("/readyz", a.readyz)
	r.Get("/openapi.yaml", serveOpenAPI)
	if a.webhooks != nil {
		r.Post("/v1/provider/webhooks", a.webhooks.ServeHTTP)
	}
	if a.testAPI != nil {
		r.Mount("/_test", a.testAPI)
	}
	r.Group(func(r chi.Router) {
		r.Use(a.authenticate)
		r.Use(a.limit)
		r.Post("/v1/shows", a.postShow)
		r.Get("/v1/shows", a.listShows)
		r.Get("/v1/shows/{id}", a.getShow)
		r.Post("/v1/reservations", a.postReservation)
		r.Get("/v1/reservations/{id}", a.getReservation)
		r.Post("/v1/orders", a.postOrder)
		r.Get("/v1/orders", a.listOrders)
		r.Get("/v1/orders/{id}", a.getOrder)
		r.Post("/v1/orders/{id}/cancel", a.postCancel)
		r.Get("/v1/intents", a.getIntents)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		a.writeError(w, r, httpError(domain.NotFound, "not-found", "no such endpoint"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		// Allow lists the methods the path does support (RFC 9110 §15.5.6),
		// HEAD wherever GET is; the metrics and the access line get the
		// route template the path matched (chi records none for a 405).
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if pattern := rt.Find(chi.NewRouteContext(), m, r.URL.Path); pattern != "" {
				allow = append(allow, m)
				if m == http.MethodGet {
					allow = append(allow, http.MethodHead)
				}
				if ri := info(r.Context()); ri != nil && ri.route == "" {
					ri.route = pattern
				}
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		a.writeError(w, r, httpError(kindMethodNotAllowed, "method-not-allowed", r.Method+" is not allowed here"))
	})
	return r
}

// recoverer answers a handler's panic like any internal error: a 500
// problem+json with code internal and the request's ids, the panic and its
// stack logged by the access entry (accessEntry.Panic). When the handler
// had already sent its status, no answer can say so: recoverer panics
// http.ErrAbortHandler, and net/http breaks the connection (HTTP/1) or
// resets the stream (HTTP/2), so the client never reads the partial answer
// as a whole one. http.ErrAbortHandler itself is panicked again.
func (a *api) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			if e := middleware.GetLogEntry(r); e != nil {
				e.Panic(v, debug.Stack())
			}
			if ww, ok := w.(middleware.WrapResponseWriter); ok && ww.Status() != 0 {
				panic(http.ErrAbortHandler)
			}
			a.writeError(w, r, fmt.Errorf("handler panicked: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if a.ready == nil {
		writeJSON(w, 200, map[string]string{"status": "ready"})
		return
	}
	if err := a.ready(ctx); err != nil {
		detail := "the database is unreachable"
		if de := (*DependencyError)(nil); errors.As(err, &de) {
			detail = "the " + de.Name + " is unreachable"
		}
		a.writeError(w, r, httpError(domain.Unavailable, "unavailable", detail))
		return
	}
	writeJSON(w, 200, map[string]string{"status": "ready"})
}

// authenticate maps the bearer token to a stable actor; a missing token or
// one the authenticator refuses → 401 with the refusal's reason as detail.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs := r.Header.Values("Authorization")
		if len(hs) > 1 { // which one speaks for the caller is ambiguous
			w.Header().Set("WWW-Authenticate", `Bearer realm="booking", error="invalid_request"`)
			a.writeError(w, r, httpError(domain.Unauthorized, codeUnauthorized, "send exactly one Authorization header"))
			return
		}
		scheme, tok, ok := "", "", false
		if len(hs) == 1 {
			scheme, tok, ok = strings.Cut(hs[0], " ")
		}
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="booking"`)
			a.writeError(w, r, httpError(domain.Unauthorized, codeUnauthorized, "a bearer token is required (Authorization: Bearer <token>)"))
			return
		}
		act, err := a.auth.Authenticate(r.Context(), strings.TrimSpace(tok))
		if err != nil {
			detail := "the bearer token is not valid"
			var refused *identity.Refusal
			if errors.As(err, &refused) {
				detail = refused.Error()
			} else {
				a.log.WarnContext(r.Context(), "bearer token not verified", "err", err)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="booking", error="invalid_token"`)
			a.writeError(w, r, httpError(domain.Unauthorized, codeUnauthorized, detail))
			return
		}
		if ri := info(r.Context()); ri != nil {
			ri.actor = act.ID // for the access log
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey, act)))
	})
}

// limit answers 429 with Retry-After when the actor is over its budget.
func (a *api) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if d := a.budget.reserve(actorFrom(r.Context()).ID); d > 0 {
				if a.rateLimited != nil {
					a.rateLimited()
				}
				setRetryAfter(w, d)
				a.writeError(w, r, httpError(domain.RateLimited, codeRateLimited, "too many requests for this actor; retry after the time in Retry-After"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (a *api) listShows(w http.ResponseWriter, r *http.Request) {
	if a.lists == nil {
		a.writeError(w, r, httpError(domain.Unavailable, "unavailable", "the shows read model is not available"))
		return
	}
	a.lists.ListShows(w, r)
}

func (a *api) listOrders(w http.ResponseWriter, r *http.Request) {
	if a.lists == nil {
		a.writeError(w, r, httpError(domain.Unavailable, "unavailable", "the orders read model is not available"))
		return
	}
	a.lists.ListOrders(w, r, actorFrom(r.Context()).ID)
}
