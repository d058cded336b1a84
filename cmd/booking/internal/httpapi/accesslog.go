package httpapi

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"
)

// accessLog is the chi middleware.LogFormatter of the access log: one line
// per request, written when the answer is complete, at info level (debug for
// the probes of /healthz and /readyz, which would otherwise drown the
// rest). The request id comes with the request's context.
// The same end of a request feeds observe, the HTTP metrics (nil: none).
type accessLog struct {
	log     *slog.Logger
	observe func(route, method string, code int, elapsed time.Duration)
}

// NewLogEntry implements middleware.LogFormatter.
func (f accessLog) NewLogEntry(r *http.Request) middleware.LogEntry {
	return &accessEntry{accessLog: f, r: r}
}

// accessEntry is one request's access log line.
type accessEntry struct {
	accessLog
	r *http.Request
}

// probes are the routes logged at debug level.
var probes = map[string]bool{"/healthz": true, "/readyz": true}

// Write passes the request to observe, then logs the line "http request" with method, route (the route template,
// "unmatched" when none matched), status, duration_ms, bytes, actor (empty
// before authentication), replayed (Idempotent-Replayed was set) and, from the
// context, request_id.
func (e *accessEntry) Write(status, bytes int, header http.Header, elapsed time.Duration, _ any) {
	ctx := e.r.Context()
	route := routeOf(ctx)
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	if e.observe != nil {
		e.observe(route, e.r.Method, status, elapsed)
	}
	level := slog.LevelInfo
	if probes[route] {
		level = slog.LevelDebug
	}
	if !e.log.Enabled(ctx, level) {
		return
	}
	var actorID string
	if ri := info(ctx); ri != nil {
		actorID = ri.actor
	}
	e.log.LogAttrs(ctx, level, "http request",
		slog.String("method", e.r.Method), slog.String("route", route), slog.Int("status", status),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000), slog.Int("bytes", bytes),
		slog.String("actor", actorID), slog.Bool("replayed", header.Get(headerReplayed) == "true"))
}

// Panic is called by the API's recoverer for a handler that panicked; the
// stack is logged at error level (the client gets a 500 problem).
func (e *accessEntry) Panic(v any, stack []byte) {
	e.log.LogAttrs(e.r.Context(), slog.LevelError, "handler panicked",
		slog.Any("panic", v), slog.String("stack", string(stack)))
}
