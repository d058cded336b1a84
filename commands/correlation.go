package commands

import (
	"context"

	"github.com/retrysafe/booking/eventstore"
)

// correlationKey is the context key of the correlation id (an unexported
// type, so no other package can collide with it).
type correlationKey struct{}

// WithCorrelationID returns a copy of ctx carrying id as the correlation id
// of the events appended under it: the HTTP request id (X-Request-Id) of
// the request being served, or the correlation id of the event a background
// job is finishing. An empty id leaves ctx as it is.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationID returns the correlation id WithCorrelationID put into ctx,
// or "" when there is none.
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}

// withStreamCorrelation returns ctx unchanged when it carries a correlation
// id, and otherwise ctx carrying the correlation id of s's first event: a
// background job working on an order (the reconciler, a payment step)
// appends under the id of the request that opened the stream.
func withStreamCorrelation(ctx context.Context, s *stream) context.Context {
	if CorrelationID(ctx) != "" || s == nil || len(s.records) == 0 {
		return ctx
	}
	m, err := eventstore.DecodeMetadata(s.records[0].Metadata)
	if err != nil {
		return ctx
	}
	return WithCorrelationID(ctx, m.CorrelationID)
}
