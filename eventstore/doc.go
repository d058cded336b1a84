// Package eventstore defines the event store the booking service is built
// on: the Store interface, its types, and the Registry that encodes domain
// events. The contract follows KurrentDB (formerly EventStoreDB), so that a
// KurrentDB server and PostgreSQL can serve the same service; it imports
// only the standard library.
//
// # Streams and expected revisions
//
// Events live in named streams (order-{id}, intent-{hash}, ...). Each
// stream numbers its events from revision 0 up, without gaps. Append writes
// one or more events to one stream atomically, under an ExpectedRevision,
// the optimistic-concurrency condition of KurrentDB:
//
//   - Any: whatever the stream's state;
//   - NoStream: only if the stream has never had an event (the way a stream
//     is created exactly once);
//   - StreamExists: only if it has at least one event;
//   - Exact(n): only if its last revision is n (load, decide, append).
//
// When the condition fails, Append returns a *RevisionConflictError
// (errors.Is ErrWrongExpectedRevision) carrying the actual revision, and
// the caller reloads and decides again. No operation touches two streams:
// everything a KurrentDB backend could not do atomically is kept out of the
// interface.
//
// # Idempotent appends
//
// Every event has an id (EventData.ID, a UUID: v7 for a new fact, v5
// derived from its cause for a fact that must be written once). An append
// repeated with the same event ids at the place its expected revision names
// succeeds without writing anything, as in KurrentDB. So a writer that lost
// the answer to an append (a timeout, a dropped connection) repeats it and
// learns the outcome: written once, never twice.
//
// # The global log
//
// Every event also has a Position in one global log, ordered by commit
// (Commit, then Prepare). ReadAll and SubscribeAll return events in that
// order and never return an event while an earlier-positioned one may still
// commit, so a reader (a projector, the relay, a background job) that saves
// the last position it handled as its checkpoint never skips an event and
// never looks back. SubscribeAll is a catch-up subscription: it reads from
// a position, then follows new appends until its context ends. Head is the
// position of the last event a reader may see now.
//
// # Truncation
//
// Truncate hides the events of a stream below a revision (KurrentDB's $tb
// stream metadata) and deletes them where the backend can; the stream keeps
// its last revision, so a later append must expect that revision exactly.
// The service truncates intent streams after their retention.
//
// # Events and metadata
//
// Registry maps stable event type names to Go types and encodes them to
// JSON; Metadata is the JSON stored with every event: the actor, the intent
// stream, correlation and causation ids, when it happened and the schema
// version of its data.
//
// # Backends
//
//   - eventstore/pgstore: PostgreSQL (pgx), the default; commit-ordered
//     positions from transaction ids.
//   - eventstore/kurrentdb: a KurrentDB server or cluster.
//   - eventstore/memstore: in memory, for tests of the code above the store.
//
// Each backend's tests run eventstore/storetest, the conformance suite of
// this contract, so they keep the same behaviour.
package eventstore
