package commands

import (
	"context"

	"github.com/retrysafe/booking/eventstore"
)

// The lineage of an event (its metadata's correlation_id, causation_id,
// request_id and client_request_id) is stamped in one place, appendEvents,
// from what the context carries:
//
//   - an HTTP request carries its ids (WithRequestIDs); a use case that
//     begins or continues an intent adds the intent's correlation id (the
//     server id of the request that recorded it) and the request as the
//     cause of what it decides (intentRun.context);
//   - the process manager carries the metadata of the event it follows up
//     (withCause): its correlation and request ids, and the event's id as
//     the cause;
//   - a job or a request that acts on a stream it loaded without knowing
//     its intent (the reconciler, a payment step, a webhook's fact, the
//     expiry job) takes the correlation from the stream's latest event, and
//     when no request is being served, that event as the cause and its
//     request ids (withStreamCorrelation).
//
// So an event has the same lineage whether the request appended it inline
// or a background job finished it, and no constant stands in for a request.

// RequestIDs are the ids of the HTTP request being served. Server is the id
// the service assigned it (a UUIDv7, RFC 9562: unique, never chosen by a
// client); Client is the client's X-Request-Id when it sent one valid value,
// "" otherwise.
type RequestIDs struct {
	Server string
	Client string
}

// lineage is what the events appended under a context name as their
// origin: the intent's correlation id, the default cause, and the request
// behind them.
type lineage struct {
	correlation string
	causation   string
	request     RequestIDs
}

// lineageKey is the context key of the lineage (an unexported type, so no
// other package can collide with it).
type lineageKey struct{}

func lineageOf(ctx context.Context) lineage {
	l, _ := ctx.Value(lineageKey{}).(lineage)
	return l
}

func withLineage(ctx context.Context, l lineage) context.Context {
	return context.WithValue(ctx, lineageKey{}, l)
}

// WithRequestIDs returns a copy of ctx serving the HTTP request ids: the
// events appended under it name the request (request_id,
// client_request_id) and take ids.Server as their cause unless they follow
// from an event. The HTTP adapter calls it once per request.
func WithRequestIDs(ctx context.Context, ids RequestIDs) context.Context {
	l := lineageOf(ctx)
	l.request = ids
	return withLineage(ctx, l)
}

// RequestIDsOf returns the request ids ctx carries: those of WithRequestIDs,
// or in a background job those of the event it follows from; the zero
// RequestIDs when there are none.
func RequestIDsOf(ctx context.Context) RequestIDs { return lineageOf(ctx).request }

// WithCorrelationID returns a copy of ctx carrying id as the correlation id
// of the events appended under it: the server id of the request that caused
// their intent. An empty id leaves ctx as it is.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	l := lineageOf(ctx)
	l.correlation = id
	return withLineage(ctx, l)
}

// CorrelationID returns the correlation id ctx carries, or "" when there is
// none.
func CorrelationID(ctx context.Context) string { return lineageOf(ctx).correlation }

// withCause returns a copy of ctx whose appends follow from the event id
// with metadata m: they keep its correlation and request ids, name it as
// their cause, and continue its trace (continueTrace).
func withCause(ctx context.Context, m eventstore.Metadata, id string) context.Context {
	ctx = continueTrace(ctx, m, false)
	return withLineage(ctx, lineage{correlation: m.CorrelationID, causation: id,
		request: RequestIDs{Server: m.RequestID, Client: m.ClientRequestID}})
}

// withStreamCorrelation returns ctx unchanged when it carries a correlation
// id, and otherwise ctx carrying the correlation id of s's latest event
// that has one: a job or request acting on a stream it loaded (the
// reconciler, a payment step, a webhook's fact, the expiry job) appends
// under the intent that last acted on it, and continues the trace kept with
// that event. When no request is being served, the stream's latest event
// is also the cause, and its request ids are carried on.
func withStreamCorrelation(ctx context.Context, s *stream) context.Context {
	if CorrelationID(ctx) != "" || s == nil || len(s.records) == 0 {
		return ctx
	}
	last := s.records[len(s.records)-1]
	m, _ := eventstore.DecodeMetadata(last.Metadata)
	for i := len(s.records) - 1; i >= 0 && m.CorrelationID == ""; i-- {
		mi, err := eventstore.DecodeMetadata(s.records[i].Metadata)
		if err == nil && mi.CorrelationID != "" {
			m = mi
			break
		}
	}
	if RequestIDsOf(ctx).Server != "" {
		// A request (a webhook) continues the stream's trace too, its own
		// span linked to it.
		return WithCorrelationID(continueTrace(ctx, m, true), m.CorrelationID)
	}
	return withCause(ctx, m, last.ID)
}

// stamp completes the lineage of metadata m from ctx: members m sets are
// kept; the correlation, cause, request and trace context come from ctx
// (see above and tracing.go). An
// event appended while serving a request without an intent's lineage
// (none known yet) names the request as its cause and correlation.
func stamp(ctx context.Context, m eventstore.Metadata) eventstore.Metadata {
	stampTrace(ctx, &m)
	l := lineageOf(ctx)
	if m.RequestID == "" && m.ClientRequestID == "" {
		m.RequestID, m.ClientRequestID = l.request.Server, l.request.Client
	}
	if m.CorrelationID == "" {
		m.CorrelationID = l.correlation
	}
	if m.CausationID == "" {
		m.CausationID = l.causation
	}
	if m.CausationID == "" {
		m.CausationID = m.RequestID
	}
	if m.CorrelationID == "" {
		m.CorrelationID = m.RequestID
	}
	return m
}
