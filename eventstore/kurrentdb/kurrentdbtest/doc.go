// Package kurrentdbtest is a KurrentDB server double for tests: an
// in-process gRPC server that implements KurrentDB's Streams service
// (Append, Read, Delete, Tombstone) on the server interfaces that
// EventStore-Client-Go v4 ships, so the real client drives it over real
// gRPC. It is test support code; nothing in the service imports it.
//
// # What it reproduces
//
// The rules are ported from the KurrentDB server source, file by file:
//
//   - Expected revisions and idempotent appends (IndexWriter.CheckCommit):
//     Any and NoStream on a new stream succeed; StreamExists fails on a
//     stream with neither events nor metadata, and on a soft-deleted one;
//     Exact(n) succeeds at the current revision and fails above it;
//     StreamExists on a soft-deleted stream is refused with stream-deleted
//     (RequestManagerBase.Handle(ConsistencyChecksFailed)). Below
//     the current revision (Exact(n) with n < current, NoStream on an
//     existing stream) the strong check runs: every id must be the event at
//     n+1, n+2, … (looked up in the committed-events cache, then in the
//     index); all match is a repeat that writes nothing, the first differing
//     is a wrong expected version, a later one too ("corrupted
//     idempotency"). With Any and StreamExists only the bounded cache is
//     consulted: a first id not in it writes the whole batch. A repeat whose
//     original is not indexed yet is dropped (IdempotentNotReady) and the
//     client gets Aborted after the write timeout. Writing to a tombstoned
//     stream fails with stream-deleted.
//   - Replies (Streams.Append.cs): success carries the revision and the
//     position of the last event, or no position when a repeat's last event
//     is hidden; WrongExpectedVersion carries the stream's current revision
//     (both the current and the 20.6.0 fields).
//   - Positions: one log; every record is self-committed, so its position
//     is (p, p), p its byte offset, strictly increasing with gaps, never 0
//     for a user event (a new database starts with its epoch record).
//   - Stream reads (IndexReader.ReadStreamEventsForward/BackwardInternal and
//     the ReadStream enumerators): never written or soft-deleted →
//     stream_not_found; tombstoned → stream-deleted; otherwise events at or
//     above max(from, $tb, last−$maxCount+1) and younger than $maxAge; a
//     fully truncated stream reads as empty success. A metastream ($$name)
//     keeps only its last event ($maxCount 1). Every event carries the
//     system metadata type, content-type and created (100 ns ticks since the
//     Unix epoch), and its data and custom metadata exactly as written.
//   - $all reads (AllReader): forwards from a position inclusive, backwards
//     exclusive, only indexed records, through the default $all filter (which
//     hides $epoch-information and persistent-subscription checkpoints but
//     not other system events, nor events hidden by $tb or $maxAge).
//   - Subscriptions to $all (Enumerator.AllSubscription,
//     AllSubscriptionFiltered): a confirmation first; a start before the
//     last indexed record catches up in pages of 32 (a start inside a
//     record fails with InvalidPosition after the confirmation), a start at
//     or past it goes live at once and skips every event at or before it,
//     even one written later below a start past the end of the log; then
//     events after the start (exclusive) in log order, caught_up, live
//     events. A filtered subscription sends checkpoints every multiplier ×
//     window considered events while catching up (the last event's position
//     or the page's start, whose prepare position is 0: (0, 0) for the first
//     page from the start), one when going live, and one every multiplier ×
//     window events written while live; a checkpoint that would not move
//     forward is dropped, as the enumerator's MoveNextAsync drops it.
//   - Size limits by server version (Options.Version, LimitsOf): the
//     append size (1 MiB up to 25.0, 256 MiB from 25.1), the event size
//     (none before 25.0, 16 MiB from 25.1) and the gRPC receive limit of the
//     Streams service (16 MiB − 10,000 bytes), refused as the server does
//     (maximum-append-size-exceeded, maximum-append-event-size-exceeded,
//     ResourceExhausted).
//   - Soft delete and tombstone (StorageWriterService WriteDelete), and the
//     soft undelete that writing to a soft-deleted stream implies.
//
// # Clusters
//
// StartCluster (NewTestCluster) runs N nodes over one log, one of them the
// leader, each a gRPC server of its own with Gossip.Read (so esdb://a,b,c
// seed lists and esdb+discover:// work with the real client) and
// ServerFeatures (the imitated version). As ClusterVNodeController routes
// requests: the leader serves everything; a follower serves reads and
// subscriptions from what has been replicated to it (Options.ReplicationLag
// behind the leader), forwards writes to the leader (Aborted "Operation
// timed out: Forwarding timeout" after Options.ForwardTimeout if it cannot
// reach it), and answers a request carrying requires-leader: true with
// NotLeader naming the leader (NotFound, trailers exception=not-leader,
// leader-endpoint-host/-port); a node without a leader answers writes and
// requires-leader requests Unavailable "Server Is Not Ready". Stopping the
// leader (Stop) or cutting it off (Isolate) leaves the others without a
// leader for Options.ElectionDelay, then the majority elects one, which
// starts with an empty committed-events cache and writes an epoch record;
// a node cut off keeps believing in its leader for the election delay (a
// cut-off leader's writes time out, nothing written) and reads what it had.
// Start and Heal bring a node back as a follower. Not modelled: the gossip
// timeout before followers notice a lost leader, truncation of a deposed
// leader's unreplicated records (it writes nothing while cut off), read-only
// replicas, node priorities.
//
// # What it does not do
//
// No TLS, authentication or access control (every caller is admin), no
// persistent subscriptions, projections, scavenging, BatchAppend or
// subscriptions to a single stream. The committed-events cache is bounded
// by entries, not bytes.
//
// # Faults
//
// Stop and Start (a crash and a restart on the same address; the log
// survives, in memory or in Options.DataFile, and the committed-events
// cache starts empty), DropConnections (a network failure), FailNext (any
// status for the next calls of a method, e.g. Unavailable), HoldIndex and
// ReleaseIndex (writes not replicated yet: unreadable and unacknowledged,
// repeats dropped with Aborted), SendUnexpectedReply (a read reply the
// client does not expect, on which it panics), and AppendSystemEvent
// (system events in $all).
//
// The command cmd/kurrentdb-double runs a Server as its own process; Build
// or BuildCommand builds it and StartProcess runs it, and a Process killed
// with SIGKILL and started again on its data file keeps its log.
package kurrentdbtest
