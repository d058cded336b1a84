package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/cmd/booking/internal/logging"
	"github.com/retrysafe/booking/commands"
)

// HeaderRequestID is the request id header: accepted from the client when
// valid (see validRequestID), made otherwise, and echoed in every answer.
const HeaderRequestID = "X-Request-Id"

// maxRequestID bounds an accepted X-Request-Id, in bytes.
const maxRequestID = 128

// requestInfo is what the middleware learns about a request while it is
// handled: its id, and the actor once authenticated. One request's
// middleware and handler run on one goroutine, so it needs no lock.
type requestInfo struct {
	id    string
	actor string
	// route is the route template of a request the router refused 405
	// (its path matched a route, its method did not), which chi's route
	// context does not record; "" otherwise.
	route string
}

const requestInfoKey ctxKey = iota + 100

// info returns the request's requestInfo, or nil outside the requestID
// middleware.
func info(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey).(*requestInfo)
	return ri
}

// RequestIDFrom returns the request id of a request handled by New's handler
// (the accepted X-Request-Id or the one made for it), or "" outside one.
func RequestIDFrom(ctx context.Context) string {
	if ri := info(ctx); ri != nil {
		return ri.id
	}
	return ""
}

// routeOf returns the route template that served the request whose context
// is ctx, such as "/v1/orders/{id}" (chi's RoutePattern), once the router has
// matched it — also when it refused the method (405), as the path matched;
// "unmatched" for a request whose path no route has (404). It is meant for
// labels of metrics, whose values must stay few.
func routeOf(ctx context.Context) string {
	if ri := info(ctx); ri != nil && ri.route != "" {
		return ri.route
	}
	if rc := chi.RouteContext(ctx); rc != nil {
		if p := rc.RoutePattern(); p != "" {
			return p
		}
	}
	return "unmatched"
}

// validRequestID reports whether id may be used as a request id: 1 to
// maxRequestID visible ASCII characters (U+0021–U+007E), so that it is safe
// in a header, a log line and a JSON string as it is.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestID gives each request its id: the client's X-Request-Id when it is
// one valid value, otherwise a new UUIDv7 (RFC 9562). The id is set on the
// answer's X-Request-Id before anything else is written, added to every log
// line logged with the request's context (request_id, also by the commands
// layer, which logs with the request's context) and handed to the commands
// layer (commands.WithCorrelationID) as the correlation id of the events the
// request appends and of the follow-ups they cause.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		if vs := r.Header.Values(HeaderRequestID); len(vs) == 1 && validRequestID(vs[0]) {
			id = vs[0]
		} else {
			id = uuid.Must(uuid.NewV7()).String()
		}
		w.Header().Set(HeaderRequestID, id)
		ctx := context.WithValue(r.Context(), requestInfoKey, &requestInfo{id: id})
		ctx = logging.WithAttrs(ctx, slog.String("request_id", id))
		ctx = commands.WithCorrelationID(ctx, id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
