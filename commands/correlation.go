package commands

import "context"

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
