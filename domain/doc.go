// Package domain is the pure core of the booking service: its aggregates,
// the events they are made of, and the decisions that turn a command into
// new events. It imports only the standard library and does no I/O.
//
// # Aggregates
//
// Each aggregate is the state of one event stream, rebuilt by applying the
// stream's events in revision order (its Apply method); the zero value is an
// aggregate that does not exist yet:
//
//   - Show (stream show-{id}): schedule, capacity, price and the seats held
//     by each live reservation. Seats are taken on the show's stream (SeatsHeld
//     is a reservation's commit point), so one stream decides whether a show
//     is sold out.
//   - Reservation (reservation-{id}) and Claim (reservation-order-{id}): a
//     hold of seats with its expiry, and the uniqueness stream whose first
//     event (OrderClaimed or ExpiryClaimed, appended expecting no stream)
//     decides once whether an order or the expiry gets the reservation.
//   - Order (order-{id}): placement, payment attempts with their provider
//     outcomes, tickets, cancellation and refunds; NetCharged is what the
//     customer has paid net of refunds.
//   - Intent (intent-{hash}): the first request made with an idempotency
//     key, its fingerprint, the executor holding its lease, and any
//     definitive rejection. Resolve is the decision table of a repeat: a new
//     intent, a fingerprint mismatch, an answered rejection, or continuing
//     the same request.
//
// The stream names come from ShowStream, ReservationStream, ClaimStream and
// OrderStream; ARCHITECTURE.md (Streams) lists every stream with its
// events and writers.
//
// # Decisions
//
// A decision is a method or function that takes the current state, a
// command and the time, and returns the events to append or an *Error:
// Show.Schedule, Show.Hold, DecideClaim, DecideExpiry, Order.Start,
// Order.Record, Order.Cancel and the others. Decisions never read a clock,
// a database or the network: the caller passes now (the database's clock in
// production, a fixed time in tests), loads the state, and appends the
// events with an expected revision, so the same state, command and time
// always give the same events. The commands package does that loading and
// appending.
//
// # Events and schema versions
//
// Every event type has a stable name (EventType) that is stored with it and
// never changes meaning. A change of an event's shape is a new schema
// version (SchemaVersionOf), written into the event's metadata; every
// version ever written still decodes into today's Go type. Golden files in
// testdata/events pin the encoding of every version: an existing golden
// file never changes, and a new version gets a golden file of its own.
//
// # Errors
//
// Error is the package's one error type: a Kind (invalid, not found,
// conflict, rejected, ...) that the HTTP adapter maps to a status in one
// table, a stable kebab-case Code for clients, and a message that never
// holds a secret.
package domain
