package commands

// Handler is the booking application: its Commands (the state changes a
// client asks for: hold seats, place and cancel an order, schedule a show,
// take the provider's notifications), its Queries (reads that change
// nothing) and its Workers (the jobs that finish, expire and reconcile what
// requests left). The three share one core: the ports (event store, clock,
// provider, key table), the configuration, and the speed mechanisms beneath
// the use cases. It is safe for concurrent use; New makes it.
type Handler struct {
	*core
	*Commands
	*Queries
	*Workers
}

// Commands are the use cases that change state, each idempotent under its
// request's intent (Request.Key; draft-ietf-httpapi-idempotency-key-header):
// a repeat answers what the first request decided.
type Commands struct{ *core }

// Queries read the event store (and the provider for a payment's next
// action) and append nothing.
type Queries struct{ *core }

// Workers are the background jobs of a process (follow-ups, recovery,
// expiry, reconciliation, clock-skew sampling) and its shutdown steps
// (FlushShreds, Abandon). Each job runs until its context ends.
type Workers struct{ *core }
