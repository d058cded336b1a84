// Package kurrentdb is the KurrentDB (EventStoreDB) backend of
// eventstore.Store, on github.com/EventStore/EventStore-Client-Go/v4 v4.2.0,
// the only package of the service that imports the client. Create a Store
// with New(connectionString, options...); it is safe for concurrent use,
// and any number of Stores in any number of processes may share a server or
// cluster.
//
// # Connection strings
//
// New accepts the client's connection strings, esdb://host:2113?tls=false
// for an insecure single node, esdb://user:password@host1:2113,host2:2113,
// host3:2113 for a cluster reached through gossip seeds, and
// esdb+discover://host for DNS discovery, and the same with kurrentdb:// and
// kurrentdb+discover://, which client v4 refuses and New rewrites to esdb.
// Query settings are the client's (tls, tlsCAFile, tlsVerifyCert,
// nodePreference, maxDiscoverAttempts, discoveryInterval, gossipTimeout,
// keepAliveInterval, keepAliveTimeout, defaultDeadline). Keep the default
// nodePreference=leader in a cluster: followers serve reads only once
// records are replicated to them, so reading from one could miss an append
// just acknowledged. Errors never show the password.
//
// In a cluster, appends and reads (not subscriptions) carry the header
// requires-leader: true, which client v4 means to send but never does (it
// puts it in the incoming metadata of its context): a follower answers
// NotLeader naming the leader, and the client moves there, so the service
// reads its own writes even through a connection string that names a
// follower, and never decides on what a demoted or lagging node holds.
// While the cluster elects a leader (NotLeader, "Server Is Not Ready", or
// connections failing while the client is replaced and nothing answers),
// appends and reads keep retrying past their attempts for the failover
// window (WithFailoverWindow, 10 s) unless the server is known
// unreachable, so an election costs requests time, not errors. Subscriptions may be served by followers.
//
// In secure mode (the default of KurrentDB) the user needs to read $all,
// which by default only admins may: ReadAll, SubscribeAll, Head and Ping
// fail with "access denied" otherwise. Ping reads $all once, to check the
// server and the user at start.
//
// # Mapping
//
//	Append       Streams.Append with the expected revision (Any, NoStream,
//	             StreamExists, or the exact revision); one request per append
//	ReadStream   a forward stream read; when it returns nothing, a backward
//	             read of the last event tells an empty page of a live stream
//	             from a stream with no live events (ErrStreamNotFound)
//	ReadAll      forward $all reads from the position (inclusive, so the
//	             event at it is dropped), paging past system events
//	SubscribeAll a catch-up subscription to $all from the position
//	             (exclusive), with the server-side filter ^[^$] on stream
//	             names
//	Truncate     read-modify-write of the $tb key of the stream's metadata
//	             ($$stream), with the metastream's expected revision
//	Head         backward $all reads from the end to the last user event
//
// Positions are KurrentDB's commit and prepare positions in the transaction
// file (byte offsets; equal for every event written through gRPC). They are
// not comparable with PostgreSQL's (transaction id, sequence): moving the
// service from one backend to the other means rebuilding read models and
// resetting checkpoints (booking serve checks which backend wrote them, see
// eventstore/pgcoord CheckBackend). Stream reads need KurrentDB 22.6 or later, which
// sends positions with them; an older server's 2^64-1 is refused.
//
// System events (a stream or an event type starting with $: $metadata
// events of $$ metastreams, $statsCollected, $> links of projections, the
// $streamDeleted tombstone of a hard-deleted stream) are left out of
// ReadAll, SubscribeAll and Head. Append refuses such names.
//
// # Idempotency
//
// KurrentDB deduplicates by event id within a stream and ignores the body.
// With an expected revision below the stream's (Exact(n) with n < current,
// or NoStream on an existing stream) it checks each id at n+1, n+2, … in the
// stream: all there is a repeat that writes nothing and answers the stored
// revision and position; none or only some is a wrong expected version. The
// service appends with NoStream and Exact only, so its repeats are always
// recognised. With Any and StreamExists the server only consults a bounded
// in-memory cache (8 MiB, empty after a restart): a repeat of an old append
// is written again. Unlike pgstore, an event id may appear in two streams,
// and an append at Exact(current) of ids already stored writes them again.
// A repeat of events that $tb hides succeeds with a zero Position.
//
// # Truncation is logical
//
// Truncate sets $tb: stream reads stop returning the events, but they stay
// in the log, and in $all (ReadAll, SubscribeAll, rebuilds), until a
// scavenge, an administrator's operation this package does not start; the
// last event of a stream is never scavenged. Truncate keeps $tb from moving
// back and caps it at the stream's last revision + 1, which KurrentDB itself
// does not do. Head never moves back.
//
// # Unknown outcomes and the client's traps
//
// An append whose outcome is unknown (a deadline, Aborted "Operation timed
// out" — which KurrentDB also answers to a repeat that arrives before the
// original is replicated, dropping it —, Unavailable, a lost connection) is
// repeated as the same append, same ids and expected revision, a bounded
// number of times: a repeat of a written append is recognised. Reads are
// retried on connection failures. Once two clients in a row could not
// reach any node (discovery ran out, or the client gave up), the server is
// known unreachable: reads and appends stop retrying, one call a second
// tries the server and the others fail at once with ErrUnreachable
// (nothing sent; an append so cut short still reports its outcome
// unknown), until a call is answered. The first client replaced in an
// outage is logged at WARN, the next at DEBUG, the reconnection at INFO.
//
// Client v4 has traps this package handles at its boundary:
//
//   - The current revision of a WrongExpectedVersion is only in the
//     message text ("expecting '5' but got '0'"); Append parses it into
//     RevisionConflictError.Actual (and reads the stream if the text ever
//     changes).
//   - A client that failed to discover a node gives up for good: every
//     later call fails with ConnectionClosed, even once the server is back.
//     The Store replaces such a client (and one that saw Unavailable) with a
//     fresh one, and closes the old one once no call runs on it.
//   - Its calls can block forever sending to its connection loop after the
//     loop ended. Every call runs in a goroutine of its own, so the caller
//     returns when its context ends; each read attempt is bounded by the
//     append timeout and the opening of a subscription by a watchdog of the
//     same length, and a call that got no answer in time replaces the client,
//     so the next attempt does not wait on the dead loop.
//   - It panics on a read reply it does not expect ("unreachable code").
//     The panic is recovered and the read retried.
//   - SubscribeToAll without a start position starts at the end of the log:
//     SubscribeAll always passes one (Start for the zero Position).
//   - A dropped subscription is not resumed by the client: SubscribeAll
//     subscribes again from the position of the last event it took, so no
//     event is skipped or delivered twice, with backoff, for up to the
//     reconnect window.
//   - It reports a recorded event without a "created" time by calling
//     log.Fatalf, which ends the process. No real server omits it; nothing
//     in this package can catch it, and the test double always sends it.
//   - Its default logger writes to stdout: the Store silences it, or sends
//     it to WithLogger's logger at debug level.
//
// # Not possible on KurrentDB
//
// KurrentDB has no client-visible transactions, so the conformance cases
// that hold an append open do not apply (storetest.HoldOpenUnsupported);
// its single writer commits in log order and readers see only replicated
// records, which gives ReadAll the guarantee pgstore gets from its
// readable horizon. RecordedAt is the KurrentDB leader's clock (100 ns
// precision), not PostgreSQL's.
//
// Client v4 has no atomic multi-stream append either: AppendMulti appends
// its parts one by one, each as Append does, and stops at the first that
// fails, leaving the parts before it written. A repeat of the same call
// (recovery repeats interrupted work with the same event ids) recognises
// those parts and writes the rest; a caller that puts the part most likely
// to conflict first leaves nothing written when it conflicts. The
// conformance cases that check atomicity are skipped with that reason
// (storetest.MultiAppendNotAtomic).
//
// # Tests
//
// The tests run against the server double of package kurrentdbtest, which
// the real client drives over gRPC, and against a real server where
// BOOKING_TEST_KURRENTDB_URL is set. No real KurrentDB server ran where this
// package was written: the double's rules are ported from the server's
// source and held to a real server by kurrentdbtest's contract tests only
// where that variable is set.
package kurrentdb
