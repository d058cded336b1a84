package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/cmd/booking/internal/logging"
	"github.com/retrysafe/booking/commands"
)

// HeaderRequestID is the request id header: a client's value is kept when
// valid (validRequestID), and every answer carries exactly one.
const HeaderRequestID = "X-Request-Id"

// requestIDPattern is what a client's X-Request-Id must match to be kept:
// 1 to 128 letters, digits, '.', '_', ':' or '-' — safe as it is in a
// header, a log line, a JSON string and a NATS header, and unable to forge
// a log record or a field.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// requestInfo is what the middleware learns about a request while it is
// handled: its ids, and the actor once authenticated. One request's
// middleware and handler run on one goroutine, so it needs no lock.
type requestInfo struct {
	// server is the id the service assigned the request (a UUIDv7);
	// client the client's valid X-Request-Id, "" when it sent none or an
	// invalid one.
	server, client string
	actor          string
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

// validRequestID reports whether a client's id may be kept as the request
// id: it matches requestIDPattern.
func validRequestID(id string) bool { return requestIDPattern.MatchString(id) }

// requestID gives each request two ids: a server id, a new UUIDv7 (RFC
// 9562) the service assigns every request, unique and never chosen by a
// client; and the client's X-Request-Id when it sent exactly one valid
// value (validRequestID), else none — an invalid value is dropped, never
// logged, stored or passed on. The answer's one X-Request-Id is the
// client's id when kept, else the server's, set before anything else is
// written. Problem details, every log line logged with the request's
// context and the events the request appends (commands.WithRequestIDs)
// label the ids alike: request_id is always the server id (so two clients
// sending one id are told apart, and a problem's request_id finds its log
// lines), client_request_id the client's id when kept.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := &requestInfo{server: uuid.Must(uuid.NewV7()).String()}
		if vs := r.Header.Values(HeaderRequestID); len(vs) == 1 && validRequestID(vs[0]) {
			ri.client = vs[0]
		}
		echo := ri.server
		attrs := []slog.Attr{slog.String("request_id", ri.server)}
		if ri.client != "" {
			echo = ri.client
			attrs = append(attrs, slog.String("client_request_id", ri.client))
		}
		w.Header().Set(HeaderRequestID, echo)
		ctx := context.WithValue(r.Context(), requestInfoKey, ri)
		ctx = logging.WithAttrs(ctx, attrs...)
		ctx = commands.WithRequestIDs(ctx, commands.RequestIDs{Server: ri.server, Client: ri.client})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
