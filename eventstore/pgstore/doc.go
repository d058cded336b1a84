// Package pgstore is the PostgreSQL backend of eventstore.Store, on pgx v5
// (pgxpool). The schema is migrations/00001_eventstore.sql: a streams table, an
// events table and two plpgsql functions, eventstore_append and
// eventstore_truncate, whose current versions are in
// migrations/00008_append_without_stream_rows.sql. Create a Store with New(pool, options...); it is safe
// for concurrent use, and any number of Stores in any number of processes may
// share one database.
//
// # Log positions are commit-ordered
//
// A sequence number is not commit order: appender A can take number 100 and
// commit after B commits 101, and a reader that has passed 101 never sees
// 100. So every event stores the id of its appending transaction
// (pg_current_xact_id(), an xid8) as tx, plus a global sequence number seq,
// and its log position is eventstore.Position{Commit: tx, Prepare: seq}.
// ReadAll returns only events with
//
//	(tx, seq) > after AND tx < pg_snapshot_xmin(pg_current_snapshot())
//
// ordered by (tx, seq). Every transaction below the snapshot's xmin has ended,
// so no event can later appear at or before a position a reader has
// returned: a reader that checkpoints the last position it handled never
// skips an event and never needs to look back. Head is the last position
// below that horizon.
//
// The price is that readers of the log wait behind the oldest running
// transaction that holds a transaction id, on the whole server (any database):
// a long write transaction anywhere holds back every subscriber, though not
// ReadStream, which returns every committed event at once. Keep write
// transactions short on the server, and watch HorizonLag, which reports the
// committed events held back and their age.
//
// Appends to one stream serialize on a transaction-scoped advisory lock,
// key (1702261620, hashtext(stream)) in PostgreSQL's two-int4 key space (apart
// from the single-bigint keys applications usually use). The lock is taken
// before anything assigns the transaction its id, so within a stream the
// order of tx is the order of revisions, and the log delivers each stream in
// revision order. (A row lock would not do: SELECT ... FOR UPDATE assigns the
// id before it waits, so a waiter could hold a lower tx than the appender it
// waits for, and land before it in the log with a higher revision.) Appends
// to different streams never wait for each other, except on a rare hash
// collision, so concurrent commits share their WAL flushes (group commit).
// Nothing takes a table-wide or category-wide lock, and the append path does
// not NOTIFY: NOTIFY serializes every committing transaction on one global
// lock.
//
// # Append
//
// Append validates its arguments in Go, then runs one statement, SELECT ...
// FROM eventstore_append(stream, expected kind and revision, ids, types,
// data, metadata, timeout), now(): one round trip and one transaction. The
// function takes the stream's lock; reads the stream's last revision and
// whether any id of the batch is stored, in one snapshot; and, if the
// expected revision holds and no id is stored, inserts the events at the
// next revisions. Otherwise it classifies the append as a repeat or a
// conflict without writing. A unique violation on an event id (another
// stream's append of the same id committed meanwhile), a deadlock between
// two batches that share ids, or a serialization failure makes Append try
// again, at most three times in all; the next attempt sees the winner's rows
// and classifies. The function plans with sequential scans disabled, so
// plans cached while the tables were small stay on the indexes, and with
// generic plans (plan_cache_mode = force_generic_plan), made once per
// session: PostgreSQL would otherwise plan eventstore_append_multi's
// statements again on every call, as their custom plans look cheaper
// (migration 00016).
//
// The now() beside the call is the database clock of the append's
// transaction, the value the events' recorded_at defaults to: Append returns
// it as AppendResult.Now, so a caller needs no separate clock read (for a
// repeat it is the clock of the repeat).
//
// An append writes nothing but its events: one heap row and three index
// entries per event. A stream's last revision is that of its newest event
// (a backward probe of events_stream_revision_key). The streams table holds
// a row only for a stream that has been truncated: its truncation point and
// its last revision at that time, which must survive when every event is
// gone (a later append must still expect it); the last revision is the
// greater of the two. Events below a truncation point are deleted, so a
// stream's rows in events are exactly its live events.
//
// data and metadata are bytea: the bytes given are the bytes read, which
// golden files need. recorded_at is the database clock (now(), the start of
// the appending transaction).
//
// # AppendMulti
//
// AppendMulti runs one statement too, SELECT ... FROM
// eventstore_append_multi(the parts' streams, kinds, revisions and event
// counts, then every event's id, type, data and metadata, timeout), now():
// one round trip, one transaction and one transaction id for every event of
// the call, so the call is atomic and its events are contiguous in the log.
// The function takes every part's stream lock in ascending key order (two
// calls sharing streams never wait for each other in a cycle), all before
// the transaction id, then decides each part as eventstore_append does; a
// conflicting part raises SQLSTATE EV409, rolling the whole call back, with
// the part and the stream's actual revision in the error's DETAIL.
// AppendMultiWith adds the caller's statements on other tables of the same
// database (a key table, say) to the same implicit transaction, sent as one
// pipeline: the events and those rows commit together or not at all.
//
// # Indexes
//
// The events table has the three indexes its reads need, and no other:
//
//	events_pkey (tx, seq)                 the log: ReadAll, SubscribeAll, Head,
//	                                      EventsAfter and HorizonLag are range
//	                                      scans in log order
//	events_stream_revision_key            ReadStream; the append's last
//	  UNIQUE (stream, revision)           revision (newest event); Truncate's
//	                                      delete; PurgeStreams (streams by name
//	                                      prefix)
//	events_id_key UNIQUE (id)             the append's idempotency: which ids of
//	                                      a batch are stored, and where
//
// Two of them also keep an invariant: no two events at one revision of a
// stream (a backstop to the stream's lock), and event ids unique across the
// log (a concurrent append of the same id to another stream fails on it and
// is retried, then classified). Dropping any one would turn a read above
// into a scan of the log. streams_pkey serves the lookup of a truncated
// stream's row.
//
// # Idempotent appends
//
// When the expected revision does not hold, or an id of the batch is
// already stored, Append succeeds without writing if every id of the batch
// is already in the stream where the expected revision puts it:
//
//	Exact(n)                at revisions n+1, n+2, … in batch order
//	NoStream                at revisions 0, 1, … in batch order
//	Any, StreamExists       anywhere in the stream
//
// It then returns the stored revision and position of the batch's last
// event. Anything else — some ids stored and some not, ids stored at other
// revisions than Exact or NoStream names, ids stored in another stream, or no
// id stored while the expected revision fails — is a
// *eventstore.RevisionConflictError whose Actual is the stream's last
// revision (-1 if it never had an event). The event body is not compared.
//
// These are KurrentDB's rules (dedup by event id within the stream, body
// ignored; below the current revision: all events written means success,
// none or some written means wrong expected version), with two differences.
// Dedup for Any and StreamExists is exact here, not KurrentDB's best effort
// from an in-memory cache. And event ids are unique across the whole log:
// appending an id that is stored in another stream is a conflict, whose
// message names that stream (KurrentDB would store the event twice). Events
// removed by Truncate no longer count as stored, as in KurrentDB after a
// scavenge.
//
// # Bounded transactions
//
// A stuck append stalls every log reader at the horizon, so append
// transactions are bounded. Each is one statement in its own transaction:
// the server runs it from start to commit without waiting for the client, so
// a slow or vanished client cannot leave it idle in transaction. Inside,
// every lock wait (the stream's lock, a concurrent insert of the same id) is
// limited by lock_timeout, and the client's context gets a deadline (pgx
// cancels the statement on the server when it passes); both are the append
// timeout, 5 s by default (WithAppendTimeout). The lock_timeout is set by the
// function for its own transaction (one set_config per call, a few µs): set
// once on the pool's sessions it would also cut the lock waits of every
// other statement on the pool, such as pgcoord's pg_advisory_lock, which
// waits for as long as another process leads. Called inside a transaction
// of the caller's (a negative timeout argument), the function also sets
// idle_in_transaction_session_timeout. An append past its bound fails with
// an error matching context.DeadlineExceeded. Not bounded: a commit waiting
// for synchronous replication.
//
// An error that is neither a RevisionConflictError nor a validation error
// (a timeout, a lost connection) leaves the outcome unknown: the commit may
// have happened. Repeat the same append, with the same ids and expected
// revision, to learn it; the repeat is recognised and writes nothing.
//
// The pool's sessions are expected to use READ COMMITTED (PostgreSQL's
// default). Under a stricter default isolation appends stay correct but fail
// more often with serialization errors after their retries.
//
// # Subscriptions
//
// SubscribeAll reads the log with ReadAll in batches (WithBatchSize, 500 by
// default) and calls its callback with each; once caught up it waits. An
// append through the same *Store wakes it at once (an in-process broadcast);
// appends from elsewhere are found by polling every 5 ms at first, doubling
// on each empty poll up to 100 ms (WithPollInterval).
//
// # Queries beyond eventstore.Store
//
// Every statement of the service on the events and streams tables lives in
// this package (a test in test/sqlhome_test.go keeps it so). Besides the
// Store interface, the service's jobs and metrics use PurgeStreams (intent
// retention), EventCount (the rebuild's progress) and HorizonLag (a
// metric); the payment reconciler's work list comes from a
// eventstore/logindex.Index on every backend (a query here would read every
// order event of the log at each pass). Their
// callers declare one-method interfaces for them, so another backend
// supplies its own. What the service needs from PostgreSQL whatever the
// event store (clock, locks, checkpoints, leases) is in eventstore/pgcoord.
//
// # Errors
//
// Database errors are translated at the package boundary: conflicts are
// *eventstore.RevisionConflictError (errors.Is
// eventstore.ErrWrongExpectedRevision), missing streams
// eventstore.ErrStreamNotFound, exceeded bounds match
// context.DeadlineExceeded, and everything else is wrapped with the
// operation and stream ("pgstore: …: %w"), never reported as a conflict.
package pgstore
