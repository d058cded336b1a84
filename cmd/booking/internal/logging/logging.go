// Package logging builds the service's log/slog logger from
// BOOKING_LOG_FORMAT and BOOKING_LOG_LEVEL, and carries per-request
// attributes (the request ids) in a context.Context so that every line
// logged with that context carries them, whichever package logs it; the
// commands layer's lineage (the request behind a background job's work)
// counts as the request id where no request attributes are set.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/retrysafe/booking/commands"
)

// Formats are the accepted values of BOOKING_LOG_FORMAT: slog's text
// handler (key=value, the default) or its JSON handler (one object a line).
var Formats = []string{"text", "json"}

// Levels are the accepted values of BOOKING_LOG_LEVEL, in increasing order.
var Levels = []string{"debug", "info", "warn", "error"}

// ParseFormat checks a BOOKING_LOG_FORMAT value (case-insensitive): it
// returns "text" or "json", or an error listing the accepted values.
func ParseFormat(s string) (string, error) {
	f := strings.ToLower(strings.TrimSpace(s))
	for _, ok := range Formats {
		if f == ok {
			return f, nil
		}
	}
	return "", fmt.Errorf("want one of %s, got %q", strings.Join(Formats, ", "), s)
}

// ParseLevel parses a BOOKING_LOG_LEVEL value (case-insensitive): debug,
// info, warn or error. Other values (also slog's "info+2" offsets) are an
// error listing the accepted values.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("want one of %s, got %q", strings.Join(Levels, ", "), s)
}

// New returns a logger writing to w in format ("text" or "json", see
// ParseFormat) at level and above (see ParseLevel), whose handler adds the
// attributes of WithAttrs contexts. Errors are those of the parsers; they
// do not name the variable, the caller does.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	f, err := ParseFormat(format)
	if err != nil {
		return nil, err
	}
	l, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if f == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(Handler(h)), nil
}

type ctxKey struct{}

// WithAttrs returns a copy of ctx carrying attrs after those ctx already
// carries. A logger whose handler is wrapped by Handler adds them to every
// record logged with the returned context (InfoContext, LogAttrs, …).
func WithAttrs(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	all := make([]slog.Attr, 0, len(prev)+len(attrs))
	all = append(append(all, prev...), attrs...)
	return context.WithValue(ctx, ctxKey{}, all)
}

// Handler returns h wrapped so that records logged with a context carry the
// context's WithAttrs attributes. Wrapping a wrapped handler returns it
// unchanged, so the attributes are never added twice. The wrapper is safe
// for concurrent use when h is.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(*ctxHandler); ok {
		return h
	}
	return &ctxHandler{h}
}

// ctxHandler adds the attributes of WithAttrs contexts to each record.
type ctxHandler struct{ slog.Handler }

// Handle adds ctx's attributes to r and passes it on. A context without
// WithAttrs attributes that carries the commands layer's lineage (a
// background job finishing what a request caused) adds the server id of
// that request as request_id (commands.RequestIDsOf, else the correlation
// id, commands.CorrelationID), so that one grep for a request id finds
// those lines too.
func (h *ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	if attrs, _ := ctx.Value(ctxKey{}).([]slog.Attr); len(attrs) > 0 {
		r = r.Clone()
		r.AddAttrs(attrs...)
	} else if id := jobRequestID(ctx); id != "" {
		r = r.Clone()
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

// jobRequestID is the request id a background job's log lines carry: the
// server id of the request behind the work, else the correlation id.
func jobRequestID(ctx context.Context) string {
	if id := commands.RequestIDsOf(ctx).Server; id != "" {
		return id
	}
	return commands.CorrelationID(ctx)
}

// WithAttrs returns the wrapped handler with attrs, still wrapped.
func (h *ctxHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &ctxHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup returns the wrapped handler with the group, still wrapped.
func (h *ctxHandler) WithGroup(name string) slog.Handler {
	return &ctxHandler{h.Handler.WithGroup(name)}
}
