// Package notify publishes the service's public events to NATS JetStream and
// holds the reference subscriber. Notifications are
// at-least-once on the wire; with the relay's and the subscriber's
// de-duplication a subscriber applies each event once per effect, in
// revision order per entity, across relay crashes, fail-overs and
// redeliveries, inside the windows below.
//
// # Subjects, headers, payload
//
// Every event of the show-{id}, reservation-{id} and order-{id} streams (not
// reservation-order-{id}, not intent-{hash}) is published to
// booking.v1.{category}.{id}.{event}, with category show, reservation or
// order and event the snake_case type (OrderConfirmed → order_confirmed).
// Headers: Nats-Msg-Id = event id, Booking-Stream, Booking-Revision,
// Booking-Position (eventstore.Position.String, "commit/prepare"),
// Booking-Event-Type. Payload: {id, type, stream, revision, position,
// occurred_at, data}, data without its "private" member. As every event of
// an entity's stream is published, Booking-Revision is gap-free per entity.
//
// # Relay
//
// Relay follows the log (eventstore SubscribeAll) from its checkpoint and
// publishes in log order with asynchronous publishes, at most MaxInFlight
// unacknowledged. An acknowledger takes the ack futures in log order and
// moves the checkpoint to the last event whose ack arrived together with the
// acks of everything before it; a duplicate ack counts as success.
//
// One relay is active across replicas under a fenced lease: the row of
// table notify_relays holds the owner, lease_until (PostgreSQL now() + TTL)
// and a fencing token that every acquisition increments; the checkpoint
// lives in the same row, and both renewal and checkpoint updates carry the
// token in their WHERE clause, so a stale relay can never move the
// checkpoint (it learns it is fenced and stops). A standby tries the lease
// every RetryInterval and takes it once lease_until has passed by the
// database clock. A relay stops publishing by itself once 0.9 × TTL has
// elapsed (monotonic clock, measured from before the statement that last
// acquired or renewed) without a successful renewal, so a paused relay does
// not keep publishing after its lease may have passed.
//
// At start a relay reads the stream's last message; if its Booking-Stream,
// Booking-Revision, Nats-Msg-Id and Booking-Position name an event of this
// log and that position is ahead of the checkpoint, it resumes after it.
// This is sound because every publish carries an expectation:
// Nats-Expected-Last-Msg-Id = the previous published event (the first of a
// run: the stream's last message, or Nats-Expected-Last-Sequence for an
// empty stream; only when the last message does not verify against this
// log — deleted, not a notification, another log's — does the first
// publish of a run carry none). JetStream checks de-duplication first, so a republish inside
// the window is a duplicate ack; a new message is stored only directly after
// its predecessor in log order. The stream is therefore always a gap-free
// log-ordered chain, and a publish that was lost (connection loss,
// time-out) is never overtaken by a later one. A failed expectation means
// another publisher moved the stream; the relay restarts from the stream.
//
// The duplicate window must exceed FailoverTime (ack wait + checkpoint
// interval + lease TTL + retry interval): checked by CheckDuplicateWindow and
// at every acquisition against the stream's actual window. Beyond the window
// a republished old event fails its expectation instead of being stored
// twice; subscribers de-duplicate anyway.
//
// # Subscriber
//
// Subscriber (used by `booking notifications tail`) consumes a durable pull
// consumer. Per message, one PostgreSQL transaction inserts the Nats-Msg-Id
// into the processed set notify_processed (a conflict means already applied:
// ack, no effect), locks the entity's row in notify_entities and compares
// Booking-Revision with the last applied one (older or equal: skipped and
// counted; more than one ahead: handed back with a delay so a redelivery of
// the missing revisions can come first, then applied with the gap reported),
// runs the handler and records the effect in notification_log. The message
// is acked only after the commit; a lost ack or a handler slower than
// AckWait leads to a redelivery that the processed set absorbs. Processed-set
// rows are pruned after ProcessedHorizon; the revision check, which is never
// pruned, still stops later copies.
//
// # Subscribing with a standard NATS client
//
// Any NATS client can read the stream. With the nats CLI, against the
// embedded server of `booking serve` (BOOKING_NATS_ADDR, default
// 127.0.0.1:4222):
//
//	nats --server nats://127.0.0.1:4222 sub 'booking.v1.order.>'         # live, core NATS
//	nats --server nats://127.0.0.1:4222 consumer add BOOKING my-app \
//	    --pull --filter 'booking.v1.>' --ack explicit --deliver all --defaults
//	nats --server nats://127.0.0.1:4222 consumer next BOOKING my-app --count 10
//
// A consumer that must apply each event once de-duplicates by the
// Nats-Msg-Id header and orders per entity by Booking-Revision, as
// Subscriber does; `booking notifications tail` is that consumer.
//
// # Windows and limits
//
// Exactly-once delivery is not promised: a subscriber's effect is once per
// event inside its own database; anything it does outside that transaction
// (printing) is at most once after a crash. The stream must be owned by the
// service (no other publisher on booking.v1.>). The embedded server serves
// the single-process deployment; replicas share an external server or
// cluster (BOOKING_NATS_URL), since only the relay holding the lease
// publishes.
package notify
