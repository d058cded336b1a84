package kurrentdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/tick"
)

// Defaults of the options.
const (
	// DefaultAppendAttempts bounds the attempts of one Append whose outcome
	// stays unknown (WithAppendAttempts).
	DefaultAppendAttempts = 5
	// DefaultAppendTimeout bounds each attempt of an Append
	// (WithAppendTimeout). KurrentDB answers a write it cannot commit within
	// its own write timeout (2 s by default) with Aborted.
	DefaultAppendTimeout = 5 * time.Second
	// DefaultReadAttempts bounds the attempts of a read that fails on the
	// connection (WithReadAttempts).
	DefaultReadAttempts = 3
	// DefaultBatchSize is the most events SubscribeAll hands to its callback
	// at once (WithBatchSize).
	DefaultBatchSize = 500
	// DefaultReconnectWindow is how long SubscribeAll keeps resubscribing
	// while the server is unreachable (WithReconnectWindow).
	DefaultReconnectWindow = time.Minute
	// DefaultFailoverWindow is how long Append and the reads keep retrying,
	// past their attempts, while a cluster changes leader
	// (WithFailoverWindow): KurrentDB detects a lost leader within its gossip
	// timeout (2.5 s) and elects one within its election timeout (1 s).
	DefaultFailoverWindow = 10 * time.Second
	// DefaultBackoffMin and DefaultBackoffMax bound the wait between retries
	// and resubscriptions (WithBackoff); it doubles from min to max.
	DefaultBackoffMin = 25 * time.Millisecond
	DefaultBackoffMax = time.Second
)

// Store is the KurrentDB event store. It implements eventstore.Store on a
// KurrentDB (or EventStoreDB) server through EventStore-Client-Go v4. Create
// it with New; it is safe for concurrent use, and any number of Stores in any
// number of processes may share a server.
type Store struct {
	conn            *conn
	where           string // the connection string, redacted, for errors
	appendAttempts  int
	appendTimeout   time.Duration
	readAttempts    int
	batchSize       int
	reconnectWindow time.Duration
	failoverWindow  time.Duration
	backoffMin      time.Duration
	backoffMax      time.Duration
	logger          *slog.Logger
	// resubscribeLogInterval rate-limits SubscribeAll's resubscription
	// lines (resubscribeLogInterval; tests shorten it).
	resubscribeLogInterval time.Duration
}

var _ eventstore.Store = (*Store)(nil)

// Option configures a Store in New.
type Option func(*Store)

// WithAppendAttempts sets how many times Append tries an append whose
// outcome is unknown (a timeout, Aborted, Unavailable, a lost connection)
// before it gives up, always as the same append: same event ids, same
// expected revision (default 5). n < 1 keeps the default.
func WithAppendAttempts(n int) Option {
	return func(s *Store) {
		if n >= 1 {
			s.appendAttempts = n
		}
	}
}

// WithAppendTimeout bounds each attempt of an Append (default 5 s). d <= 0
// keeps the default.
func WithAppendTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.appendTimeout = d
		}
	}
}

// WithReadAttempts sets how many times a read (ReadStream, ReadAll, Head,
// and the reads of Truncate) is tried when it fails on the connection
// (default 3). n < 1 keeps the default.
func WithReadAttempts(n int) Option {
	return func(s *Store) {
		if n >= 1 {
			s.readAttempts = n
		}
	}
}

// WithBatchSize sets the most events SubscribeAll hands to its callback at
// once (default 500). n <= 0 keeps the default.
func WithBatchSize(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.batchSize = n
		}
	}
}

// WithReconnectWindow sets how long SubscribeAll keeps resubscribing after
// its subscription dropped while the server stays unreachable, before it
// returns the error (default 1 min). d <= 0 keeps the default.
func WithReconnectWindow(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.reconnectWindow = d
		}
	}
}

// WithFailoverWindow sets how long Append and the reads keep retrying,
// past their attempts (WithAppendAttempts, WithReadAttempts), while the
// cluster has no leader or answers from a node that is not the leader
// (NotLeader, "Server Is Not Ready"): long enough for an election (default
// 10 s). d <= 0 keeps the default.
func WithFailoverWindow(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.failoverWindow = d
		}
	}
}

// WithBackoff sets the wait between retries and resubscriptions: min at
// first, doubling up to max (defaults 25 ms and 1 s). Values <= 0 keep the
// defaults; max is raised to min if smaller.
func WithBackoff(min, max time.Duration) Option {
	return func(s *Store) {
		if min > 0 {
			s.backoffMin = min
		}
		if max > 0 {
			s.backoffMax = max
		}
	}
}

// WithLogger sends the Store's own log lines (client replaced, subscription
// resumed; while the server stays down both are rate-limited, the rest at
// debug level) to logger, and the client library's at debug level. By
// default nothing is logged: the client library would write to stdout.
func WithLogger(logger *slog.Logger) Option {
	return func(s *Store) {
		if logger != nil {
			s.logger = logger
		}
	}
}

// New returns a Store for the KurrentDB server or cluster that connString
// names: esdb://host:port?tls=false for a single insecure node,
// esdb://user:password@host1:2113,host2:2113,host3:2113 for a cluster
// through gossip seeds, esdb+discover://host for DNS discovery; kurrentdb://
// and kurrentdb+discover:// are accepted as the same. Query settings are the
// client's (tls, tlsCAFile, tlsVerifyCert, maxDiscoverAttempts,
// discoveryInterval, gossipTimeout, nodePreference, keepAliveInterval,
// keepAliveTimeout, defaultDeadline).
//
// New does not connect: the first call does, and a call made while the
// server is unreachable fails with an error naming the address, after which
// the next call tries again (use Ping to check at start). Returns an error
// naming the problem, never the password, if connString is invalid.
func New(connString string, opts ...Option) (*Store, error) {
	cfg, err := parseConnectionString(connString)
	if err != nil {
		return nil, err
	}
	s := &Store{
		where:           redact(connString),
		appendAttempts:  DefaultAppendAttempts,
		appendTimeout:   DefaultAppendTimeout,
		readAttempts:    DefaultReadAttempts,
		batchSize:       DefaultBatchSize,
		reconnectWindow: DefaultReconnectWindow,
		failoverWindow:  DefaultFailoverWindow,
		backoffMin:      DefaultBackoffMin,
		backoffMax:      DefaultBackoffMax,
		logger:          slog.New(slog.DiscardHandler),

		resubscribeLogInterval: resubscribeLogInterval,
	}
	for _, opt := range opts {
		opt(s)
	}
	s.backoffMax = max(s.backoffMax, s.backoffMin)
	logger := s.logger
	cfg.Logger = func(level esdb.LogLevel, format string, args ...any) {
		logger.Debug("kurrentdb client: "+fmt.Sprintf(format, args...), "client_level", level)
	}
	s.conn = &conn{cfg: *cfg, logger: s.logger}
	return s, nil
}

// Close closes the connection. Calls in flight fail; later calls return
// ErrClosed. It is idempotent and safe for concurrent use.
func (s *Store) Close() error {
	s.conn.close()
	return nil
}

// Ping checks that the server answers and that the connection's user may
// read $all (in secure mode only an admin may), by reading the last event
// of $all. Returns an error naming the server otherwise.
func (s *Store) Ping(ctx context.Context) error {
	_, _, err := s.readAll(ctx, esdb.End{}, esdb.Backwards, 1)
	if err != nil {
		return fmt.Errorf("kurrentdb: ping %s: %w", s.where, describe(err))
	}
	return nil
}

// isSystem reports whether a name is in KurrentDB's system namespace.
func isSystem(name string) bool { return strings.HasPrefix(name, "$") }

// toEventData validates an append's arguments like pgstore does, and also
// refuses names in the system namespace, and converts the events.
func toEventData(stream string, expected eventstore.ExpectedRevision, events []eventstore.EventData) ([]esdb.EventData, esdb.ExpectedRevision, error) {
	if stream == "" {
		return nil, nil, errors.New("kurrentdb: append: empty stream name")
	}
	if isSystem(stream) {
		return nil, nil, fmt.Errorf("kurrentdb: append to %q: stream names starting with $ are KurrentDB's system streams", stream)
	}
	if len(events) == 0 {
		return nil, nil, fmt.Errorf("kurrentdb: append to %q: no events", stream)
	}
	var exp esdb.ExpectedRevision
	switch {
	case expected.IsNoStream():
		exp = esdb.NoStream{}
	case expected.IsStreamExists():
		exp = esdb.StreamExists{}
	case expected.IsAny():
		exp = esdb.Any{}
	default:
		rev, _ := expected.ExactRevision()
		if rev > math.MaxInt64-uint64(len(events)) {
			return nil, nil, fmt.Errorf("kurrentdb: append to %q: expected revision %d out of range", stream, rev)
		}
		exp = esdb.Revision(rev)
	}
	out := make([]esdb.EventData, len(events))
	seen := make(map[uuid.UUID]struct{}, len(events))
	for i, e := range events {
		id, err := uuid.Parse(e.ID)
		if err != nil {
			return nil, nil, fmt.Errorf("kurrentdb: append to %q: event %d: id %q is not a UUID", stream, i, e.ID)
		}
		if _, dup := seen[id]; dup {
			return nil, nil, fmt.Errorf("kurrentdb: append to %q: event %d: id %s appears twice in the batch", stream, i, id)
		}
		seen[id] = struct{}{}
		if e.Type == "" {
			return nil, nil, fmt.Errorf("kurrentdb: append to %q: event %d (%s): empty type", stream, i, id)
		}
		if isSystem(e.Type) && e.Type != eventstore.PlaceholderType {
			return nil, nil, fmt.Errorf("kurrentdb: append to %q: event %d (%s): event types starting with $ are KurrentDB's", stream, i, id)
		}
		out[i] = esdb.EventData{EventID: id, EventType: e.Type, ContentType: esdb.ContentTypeJson, Data: e.Data, Metadata: e.Metadata}
	}
	return out, exp, nil
}

// Append writes events to stream atomically if expected holds, as one
// KurrentDB append (Streams.Append) with the expected revision. On success
// it returns the revision of the batch's last event (0-based) and its log
// position.
//
// It is idempotent as KurrentDB is: dedup is by event id within the stream,
// the body is ignored. With Exact(n) or NoStream, an append whose ids are
// all already in the stream at n+1, n+2, … (at 0, 1, … for NoStream) is a
// repeat: it writes nothing and returns the stored revision and position of
// its last event (a zero Position if $tb hides that event). With Any and
// StreamExists the server recognises a repeat only while the ids are in its
// bounded in-memory cache (recent appends since its last restart);
// otherwise it writes the batch again.
//
// Otherwise it returns a *eventstore.RevisionConflictError (errors.Is
// eventstore.ErrWrongExpectedRevision) whose Actual is the stream's last
// revision, or -1 if it never had an event; KurrentDB sends that revision
// only in the message text of client v4, and Append parses it there.
//
// An unknown outcome (a timeout, Aborted, Unavailable, a lost or replaced
// connection) is retried as the same append (same ids, same expected
// revision) up to the append attempts (WithAppendAttempts), each bounded by
// the append timeout; if they run out, or ctx ends, the error says the
// outcome is unknown and matches context.DeadlineExceeded when a deadline
// passed. It returns a plain error, with nothing sent, for an empty or
// system ($-prefixed) stream name, no events, an id that is not a UUID, an
// id repeated in the batch, or an empty or system event type (except
// eventstore.PlaceholderType, which a copy of a log writes). Safe for
// concurrent use.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	evs, exp, err := toEventData(stream, expected, events)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	if err := s.checkSize(ctx, stream, evs); err != nil {
		return eventstore.AppendResult{}, err
	}
	return s.appendChecked(ctx, stream, expected, evs, exp)
}

// AppendMulti appends every part in order, each as one Append (KurrentDB
// client v4 has no atomic multi-stream append): it is not atomic. It first
// checks every part (eventstore.CheckAppends, and what Append refuses) and
// returns a plain error, with nothing sent, if one is invalid. Then it
// appends the parts one by one, with Append's idempotency and retries, and
// stops at the first that fails: the error is an
// *eventstore.AppendPartError naming that part and wrapping Append's error
// (a *eventstore.RevisionConflictError for a wrong expected revision, an
// unknown outcome otherwise), and the parts before it stay written. A
// repeat of the same call recognises those parts as repeats and writes the
// rest; the service's recovery, which repeats interrupted work with the same
// event ids, covers the gap. Each part's events get commit-ordered
// positions after the previous part's, though other appends may commit
// between two parts. Returns one result per part, in order. Safe for
// concurrent use.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	if err := eventstore.CheckAppends(appends); err != nil {
		return nil, err
	}
	type part struct {
		evs []esdb.EventData
		exp esdb.ExpectedRevision
	}
	parts := make([]part, len(appends))
	for i, a := range appends {
		evs, exp, err := toEventData(a.Stream, a.Expected, a.Events)
		if err != nil {
			return nil, err
		}
		if err := s.checkSize(ctx, a.Stream, evs); err != nil {
			return nil, err
		}
		parts[i] = part{evs, exp}
	}
	results := make([]eventstore.AppendResult, len(appends))
	for i, a := range appends {
		res, err := s.appendChecked(ctx, a.Stream, a.Expected, parts[i].evs, parts[i].exp)
		if err != nil {
			return nil, &eventstore.AppendPartError{Part: i, Parts: len(appends), Stream: a.Stream, Err: err}
		}
		results[i] = res
	}
	return results, nil
}

// appendChecked is Append after its checks: the attempts of one append of
// evs to stream at exp (expected, for errors).
func (s *Store) appendChecked(ctx context.Context, stream string, expected eventstore.ExpectedRevision, evs []esdb.EventData, exp esdb.ExpectedRevision) (eventstore.AppendResult, error) {
	var lastErr error
	tried := 0 // attempts made, fewer than appendAttempts if the server is known unreachable
	started := time.Now()
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if err := s.sleep(ctx, attempt-1); err != nil {
				break
			}
		}
		tried = attempt
		var res *esdb.WriteResult
		actx, cancel := context.WithTimeout(ctx, s.appendTimeout)
		err := s.conn.call(actx, func(ctx context.Context, c *esdb.Client) error {
			var err error
			res, err = c.AppendToStream(leaderOnly(ctx), stream, esdb.AppendToStreamOptions{ExpectedRevision: exp, Deadline: &s.appendTimeout}, evs...)
			return err
		})
		cancel()
		if err == nil {
			return s.appendResult(ctx, stream, res)
		}
		if code, ok := esdbCode(err); ok && code == esdb.ErrorCodeWrongExpectedVersion {
			return eventstore.AppendResult{}, s.conflict(ctx, stream, expected, err)
		}
		if errors.Is(err, ErrClosed) {
			return eventstore.AppendResult{}, err
		}
		if tooLarge(err) {
			return eventstore.AppendResult{}, fmt.Errorf("kurrentdb: append to %q: %w (nothing written): %w", stream, eventstore.ErrAppendTooLarge, err)
		}
		if lastErr == nil || !errors.Is(err, ErrUnreachable) {
			lastErr = err // a call not sent does not hide why an earlier one failed
		}
		if !s.again(ctx, attempt, s.appendAttempts, started, err) {
			// Known unreachable: the outcome stays unknown as after the
			// last attempt, and the caller answers now (503) instead of
			// after every attempt's connection timeout.
			break
		}
		s.logger.Debug("kurrentdb: append outcome unknown, repeating it", "stream", stream, "attempt", attempt, "error", err)
	}
	if cerr := ctx.Err(); cerr != nil {
		return eventstore.AppendResult{}, fmt.Errorf("kurrentdb: append to %q: %w (outcome unknown: %v)", stream, cerr, lastErr)
	}
	if !transient(lastErr) {
		if code, ok := esdbCode(lastErr); ok && code == esdb.ErrorCodeStreamDeleted {
			return eventstore.AppendResult{}, fmt.Errorf("kurrentdb: append to %q: the stream is tombstoned and can never be written again: %w", stream, lastErr)
		}
		return eventstore.AppendResult{}, fmt.Errorf("kurrentdb: append to %q: %w", stream, describe(lastErr))
	}
	err := fmt.Errorf("kurrentdb: append to %q at %s: outcome unknown after %d attempts: %w", stream, s.where, tried, lastErr)
	if code, _ := esdbCode(lastErr); code == esdb.ErrorUnavailable || code == esdb.ErrorCodeConnectionClosed {
		err = fmt.Errorf("kurrentdb: append to %q: cannot reach the server at %s (outcome unknown after %d attempts): %w", stream, s.where, tried, lastErr)
	}
	if timedOut(lastErr) && !errors.Is(lastErr, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
	}
	return eventstore.AppendResult{}, err
}

// timedOut reports whether err is a timeout: a passed deadline, or the
// server's Aborted "Operation timed out".
func timedOut(err error) bool {
	code, _ := esdbCode(err)
	return errors.Is(err, context.DeadlineExceeded) || code == esdb.ErrorCodeDeadlineExceeded || code == esdb.ErrorAborted
}

// appendResult converts a successful append. A repeat whose last event
// KurrentDB can no longer read (hidden by $tb) comes without a position
// (0/0 from the client): the event is looked up, and the Position stays zero
// if it is hidden.
func (s *Store) appendResult(ctx context.Context, stream string, res *esdb.WriteResult) (eventstore.AppendResult, error) {
	out := eventstore.AppendResult{
		NextRevision: res.NextExpectedVersion,
		Position:     eventstore.Position{Commit: res.CommitPosition, Prepare: res.PreparePosition},
	}
	if !out.Position.IsZero() {
		return out, nil
	}
	events, err := s.readStream(ctx, stream, esdb.ReadStreamOptions{From: esdb.Revision(out.NextRevision)}, 1)
	if err != nil && !notFound(err) {
		return out, fmt.Errorf("kurrentdb: append to %q succeeded; reading its position: %w", stream, err)
	}
	if len(events) == 1 && events[0].Revision == out.NextRevision {
		out.Position = events[0].Position
	}
	return out, nil
}

// wevActual finds the current revision in client v4's WrongExpectedVersion
// text: "wrong expected version: expecting '5' but got '0'", where
// 'no_stream' stands for -1.
var wevActual = regexp.MustCompile(`but got '([^']*)'`)

// conflict translates a WrongExpectedVersion. If the message does not carry
// the current revision in the form client v4 writes, it is read from the
// stream instead (its last readable revision).
func (s *Store) conflict(ctx context.Context, stream string, expected eventstore.ExpectedRevision, err error) error {
	conflict := &eventstore.RevisionConflictError{Stream: stream, Expected: expected, Actual: -1}
	if actual, ok := parseActual(err.Error()); ok {
		conflict.Actual = actual
		return conflict
	}
	events, rerr := s.readStream(ctx, stream, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
	switch {
	case rerr != nil && !notFound(rerr):
		return fmt.Errorf("kurrentdb: append to %q: %w; reading the actual revision: %v", stream, conflict, rerr)
	case len(events) == 1:
		conflict.Actual = int64(events[0].Revision)
	}
	return conflict
}

// parseActual reads the current revision out of a WrongExpectedVersion
// message of client v4.
func parseActual(msg string) (int64, bool) {
	m := wevActual.FindStringSubmatch(msg)
	if m == nil {
		return 0, false
	}
	if m[1] == "no_stream" {
		return -1, true
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// notFound reports whether err is a read of a stream that does not exist
// or was deleted.
func notFound(err error) bool {
	code, ok := esdbCode(err)
	return ok && (code == esdb.ErrorCodeResourceNotFound || code == esdb.ErrorCodeStreamDeleted)
}

// sleep waits the backoff before retry n (1-based), or until ctx is done.
func (s *Store) sleep(ctx context.Context, n int) error {
	d := s.backoffMin << min(n-1, 20)
	if d <= 0 || d > s.backoffMax {
		d = s.backoffMax
	}
	return tick.Sleep(ctx, d)
}

// retryRead runs read until it succeeds, fails for good, the read
// attempts run out, or the server is known to be unreachable (two clients
// in a row failed to connect: the caller gets the error at once). Each attempt is bounded by the append timeout
// (WithAppendTimeout): a client that stopped answering (its connection
// loop ended) is replaced and the read tried again instead of waiting for
// the caller's deadline.
func (s *Store) retryRead(ctx context.Context, read func(ctx context.Context) error) error {
	var err error
	started := time.Now()
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if serr := s.sleep(ctx, attempt-1); serr != nil {
				return fmt.Errorf("%w (after %v)", serr, err)
			}
		}
		actx, cancel := context.WithTimeout(leaderOnly(ctx), s.appendTimeout)
		err = read(actx)
		cancel()
		if err == nil || errors.Is(err, ErrClosed) || !s.again(ctx, attempt, s.readAttempts, started, err) {
			return err
		}
	}
}

// again reports whether a call that failed with err on its attempt-th try
// (of attempts, the first at started) is tried again: if the error may pass
// (transient), ctx is alive and the server is not known to be unreachable,
// within the attempts, and past them while a cluster changes leader (the
// error says so, failover, or the connection failed while the client is
// being replaced, conn.reconnecting; a client that panicked is not a
// failover), until the failover window has passed since the first try.
func (s *Store) again(ctx context.Context, attempt, attempts int, started time.Time, err error) bool {
	if ctx.Err() != nil || !transient(err) || s.conn.unreachable() {
		return false
	}
	if attempt < attempts {
		return true
	}
	var panicked *clientPanicError
	electing := failover(err) || (s.conn.reconnecting() && !errors.As(err, &panicked))
	return electing && time.Since(started) < s.failoverWindow
}

// readStream reads up to count events of a stream (client ReadStream,
// retried on connection failures) and converts them.
func (s *Store) readStream(ctx context.Context, stream string, opts esdb.ReadStreamOptions, count uint64) ([]eventstore.RecordedEvent, error) {
	var out []eventstore.RecordedEvent
	err := s.retryRead(ctx, func(ctx context.Context) error {
		// The attempt's result is its own: call can return (ctx done) while
		// op still runs, and a late op must not write what the next
		// attempt or the caller reads. It is read only after op returned
		// through call (err == nil), which orders the write before the read.
		var got []eventstore.RecordedEvent
		err := s.conn.call(ctx, func(ctx context.Context, c *esdb.Client) error {
			rs, err := c.ReadStream(ctx, stream, opts, count)
			if err != nil {
				return err
			}
			defer rs.Close()
			var events []eventstore.RecordedEvent
			for {
				e, err := rs.Recv()
				if errors.Is(err, io.EOF) {
					got = events
					return nil
				}
				if err != nil {
					return err
				}
				r, err := recorded(e)
				if err != nil {
					return err
				}
				events = append(events, r)
			}
		})
		if err == nil {
			out = got
		}
		return err
	})
	return out, err
}

// readAll reads up to count events of $all from from in direction dir,
// system events included, and returns them with the number received.
func (s *Store) readAll(ctx context.Context, from esdb.AllPosition, dir esdb.Direction, count uint64) ([]eventstore.RecordedEvent, int, error) {
	var (
		out []eventstore.RecordedEvent
		n   int
	)
	err := s.retryRead(ctx, func(ctx context.Context) error {
		// The attempt's result is its own (see readStream).
		var (
			got      []eventstore.RecordedEvent
			gotCount int
		)
		err := s.conn.call(ctx, func(ctx context.Context, c *esdb.Client) error {
			rs, err := c.ReadAll(ctx, esdb.ReadAllOptions{From: from, Direction: dir}, count)
			if err != nil {
				return err
			}
			defer rs.Close()
			var events []eventstore.RecordedEvent
			received := 0
			for {
				e, err := rs.Recv()
				if errors.Is(err, io.EOF) {
					got, gotCount = events, received
					return nil
				}
				if err != nil {
					return err
				}
				received++
				r, err := recorded(e)
				if err != nil {
					return err
				}
				events = append(events, r)
			}
		})
		if err == nil {
			out, n = got, gotCount
		}
		return err
	})
	return out, n, err
}

// recorded converts an event read from KurrentDB. Its log position is the
// commit and prepare position of the transaction file; servers before
// 22.6 send 2^64-1 for events read from a stream, which is refused.
func recorded(e *esdb.ResolvedEvent) (eventstore.RecordedEvent, error) {
	r := e.OriginalEvent()
	if r == nil {
		return eventstore.RecordedEvent{}, errors.New("kurrentdb: the server sent a read reply without an event")
	}
	if r.Position.Commit == math.MaxUint64 {
		return eventstore.RecordedEvent{}, fmt.Errorf("kurrentdb: event %s@%d has no log position: the server is older than 22.6, which this backend needs", r.StreamID, r.EventNumber)
	}
	out := eventstore.RecordedEvent{
		ID:         r.EventID.String(),
		Stream:     r.StreamID,
		Type:       r.EventType,
		Revision:   r.EventNumber,
		Position:   eventstore.Position{Commit: r.Position.Commit, Prepare: r.Position.Prepare},
		Data:       r.Data,
		Metadata:   r.UserMetadata,
		RecordedAt: r.CreatedDate.UTC(),
	}
	if len(out.Data) == 0 {
		out.Data = nil
	}
	if len(out.Metadata) == 0 {
		out.Metadata = nil
	}
	return out, nil
}

// systemEvent reports whether a recorded event is KurrentDB's own: its
// stream or its type is in the system namespace ($metadata events of $$
// streams, $statsCollected, $> links, a $streamDeleted tombstone, …).
func systemEvent(e eventstore.RecordedEvent) bool { return isSystem(e.Stream) || isSystem(e.Type) }

// ReadStream returns up to limit live events of stream with revision >=
// from, in revision order; limit <= 0 means all. An event is live unless
// the stream's $tb, $maxCount or $maxAge metadata hides it. It returns an
// empty slice when the stream has live events but none at or after from,
// eventstore.ErrStreamNotFound when it has none (never written, fully
// truncated, soft-deleted or tombstoned), and a wrapped error if the read
// fails (connection failures are retried, WithReadAttempts). Safe for
// concurrent use.
func (s *Store) ReadStream(ctx context.Context, stream string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error) {
	if stream == "" || isSystem(stream) {
		return nil, fmt.Errorf("kurrentdb: read stream %q: not a stream name of this store", stream)
	}
	count := uint64(math.MaxInt64)
	if limit > 0 {
		count = uint64(limit)
	}
	events, err := s.readStream(ctx, stream, esdb.ReadStreamOptions{From: esdb.Revision(min(from, math.MaxInt64))}, count)
	if notFound(err) {
		return nil, eventstore.ErrStreamNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("kurrentdb: read stream %q: %w", stream, describe(err))
	}
	if len(events) > 0 {
		return events, nil
	}
	// KurrentDB reads a fully truncated stream as empty, not missing: look
	// for a live last event.
	last, err := s.readStream(ctx, stream, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
	if notFound(err) || (err == nil && len(last) == 0) {
		return nil, eventstore.ErrStreamNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("kurrentdb: read stream %q: %w", stream, describe(err))
	}
	return []eventstore.RecordedEvent{}, nil
}

// ReadAll returns up to limit (> 0) events after position after, in log
// order, leaving out KurrentDB's system events (see the package
// documentation). KurrentDB's single writer commits in log order and reads
// return only replicated records, so no event can later appear before one
// returned. An empty slice means no readable event after after yet. Returns
// a plain error if limit <= 0 and a wrapped error if the read fails. Safe
// for concurrent use.
func (s *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("kurrentdb: read all: limit %d, want > 0", limit)
	}
	// A read from a position includes it: ask for one more. A page of only
	// system events doubles the next one, up to maxPage.
	const maxPage = 4096
	page := uint64(min(limit+1, maxPage))
	var out []eventstore.RecordedEvent
	pos := after
	for {
		var from esdb.AllPosition = esdb.Start{}
		if !pos.IsZero() {
			from = esdb.Position{Commit: pos.Commit, Prepare: pos.Prepare}
		}
		events, n, err := s.readAll(ctx, from, esdb.Forwards, page)
		if err != nil {
			return nil, fmt.Errorf("kurrentdb: read all after %s: %w", after, describe(err))
		}
		moved, found := false, len(out)
		for _, e := range events {
			if !pos.Less(e.Position) {
				continue
			}
			pos, moved = e.Position, true
			if systemEvent(e) {
				continue
			}
			out = append(out, e)
			if len(out) == limit {
				return out, nil
			}
		}
		if uint64(n) < page || !moved {
			if out == nil {
				out = []eventstore.RecordedEvent{}
			}
			return out, nil
		}
		if len(out) == found {
			page = min(page*2, maxPage)
		}
	}
}

// Head returns the position of the last event ReadAll can return now (the
// last non-system event of $all), or the zero Position if there is none.
// It never moves back: truncation does not remove events from $all until a
// scavenge. Returns a wrapped error if the read fails. Safe for concurrent
// use.
func (s *Store) Head(ctx context.Context) (eventstore.Position, error) {
	const page = 64
	var from esdb.AllPosition = esdb.End{}
	for {
		events, n, err := s.readAll(ctx, from, esdb.Backwards, page)
		if err != nil {
			return eventstore.Position{}, fmt.Errorf("kurrentdb: head: %w", describe(err))
		}
		for _, e := range events {
			if !systemEvent(e) {
				return e.Position, nil
			}
		}
		if n < page || len(events) == 0 {
			return eventstore.Position{}, nil
		}
		last := events[len(events)-1].Position
		from = esdb.Position{Commit: last.Commit, Prepare: last.Prepare}
	}
}

// maxTruncateAttempts bounds Truncate's read-modify-write of the stream
// metadata when other writers change it meanwhile.
const maxTruncateAttempts = 10

// Truncate hides every event of stream with a revision below before by
// setting the stream's $tb metadata, keeping any other metadata keys.
// before is capped at the stream's last revision + 1, and $tb never moves
// back (KurrentDB does not enforce either; Truncate writes the metadata with
// the metastream's expected revision and tries again when another writer
// changed it meanwhile). The stream keeps its last revision: a later append
// must expect it exactly. Truncating a stream with no live events does
// nothing.
//
// KurrentDB's truncation is logical: the events stay in the log, and in
// $all (ReadAll, SubscribeAll), until a scavenge removes them; the last
// event of a stream is never removed. Returns a wrapped error if reading or
// writing the metadata fails. Safe for concurrent use.
func (s *Store) Truncate(ctx context.Context, stream string, before eventstore.Revision) error {
	if stream == "" || isSystem(stream) {
		return fmt.Errorf("kurrentdb: truncate %q: not a stream name of this store", stream)
	}
	for attempt := 1; ; attempt++ {
		done, err := s.truncateOnce(ctx, stream, before)
		if done || err != nil {
			return err
		}
		if attempt == maxTruncateAttempts {
			return fmt.Errorf("kurrentdb: truncate %q before %d: the metadata kept changing under %d attempts", stream, before, attempt)
		}
		if err := s.sleep(ctx, attempt); err != nil {
			return fmt.Errorf("kurrentdb: truncate %q before %d: %w", stream, before, err)
		}
	}
}

// truncateOnce does one read-modify-write of the metadata; done is false
// when it must be tried again.
func (s *Store) truncateOnce(ctx context.Context, stream string, before eventstore.Revision) (done bool, err error) {
	metastream := "$$" + stream
	meta, err := s.readStream(ctx, metastream, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
	if err != nil && !notFound(err) {
		return false, fmt.Errorf("kurrentdb: truncate %q: read metadata: %w", stream, describe(err))
	}
	fields := map[string]json.RawMessage{}
	var expected esdb.ExpectedRevision = esdb.NoStream{}
	oldTB := int64(0)
	if len(meta) == 1 {
		expected = esdb.Revision(meta[0].Revision)
		if err := json.Unmarshal(meta[0].Data, &fields); err != nil || fields == nil {
			return false, fmt.Errorf("kurrentdb: truncate %q: the stream metadata is not a JSON object: %q", stream, meta[0].Data)
		}
		if raw, ok := fields["$tb"]; ok {
			if oldTB, err = strconv.ParseInt(string(raw), 10, 64); err != nil {
				return false, fmt.Errorf("kurrentdb: truncate %q: the stream metadata has $tb %s, want an integer", stream, raw)
			}
		}
	}
	last, err := s.readStream(ctx, stream, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
	if notFound(err) || (err == nil && len(last) == 0) {
		return true, nil // no live events: nothing to hide
	}
	if err != nil {
		return false, fmt.Errorf("kurrentdb: truncate %q: read last revision: %w", stream, describe(err))
	}
	tb := max(oldTB, int64(min(before, last[0].Revision+1)))
	if tb <= oldTB {
		return true, nil
	}
	fields["$tb"] = json.RawMessage(strconv.FormatInt(tb, 10))
	data, err := json.Marshal(fields)
	if err != nil {
		return false, fmt.Errorf("kurrentdb: truncate %q: %w", stream, err)
	}
	ev := esdb.EventData{EventID: uuid.New(), EventType: "$metadata", ContentType: esdb.ContentTypeJson, Data: data}
	actx, cancel := context.WithTimeout(ctx, s.appendTimeout)
	defer cancel()
	err = s.conn.call(actx, func(ctx context.Context, c *esdb.Client) error {
		_, err := c.AppendToStream(leaderOnly(ctx), metastream, esdb.AppendToStreamOptions{ExpectedRevision: expected, Deadline: &s.appendTimeout}, ev)
		return err
	})
	if code, ok := esdbCode(err); ok && code == esdb.ErrorCodeWrongExpectedVersion {
		return false, nil // the metadata changed meanwhile: read it again
	}
	if err != nil {
		if ctx.Err() == nil && transient(err) {
			return false, nil // outcome unknown: read the metadata again
		}
		return false, fmt.Errorf("kurrentdb: truncate %q: write metadata: %w", stream, describe(err))
	}
	return true, nil
}
