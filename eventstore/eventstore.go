package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Revision is the 0-based position of an event within its stream, as in
// KurrentDB: the first event of a stream has revision 0.
type Revision = uint64

// ExpectedRevision is the optimistic-concurrency condition of an append,
// following KurrentDB's expected revision (Any, NoStream, StreamExists, or an
// exact revision). The zero value is Any.
type ExpectedRevision struct {
	kind expectedKind
	rev  Revision
}

type expectedKind uint8

const (
	expectAny expectedKind = iota
	expectNoStream
	expectStreamExists
	expectExact
)

// Any appends whatever the stream's state. Like KurrentDB, a repeated append
// whose event ids are already in the stream is a no-op.
func Any() ExpectedRevision { return ExpectedRevision{kind: expectAny} }

// NoStream appends only if the stream has never had an event.
func NoStream() ExpectedRevision { return ExpectedRevision{kind: expectNoStream} }

// StreamExists appends only if the stream has at least one event.
func StreamExists() ExpectedRevision { return ExpectedRevision{kind: expectStreamExists} }

// Exact appends only if the stream's last revision is rev (0-based). After a
// Truncate the stream keeps its last revision, so appends continue from it.
func Exact(rev Revision) ExpectedRevision { return ExpectedRevision{kind: expectExact, rev: rev} }

// IsAny reports whether e is Any.
func (e ExpectedRevision) IsAny() bool { return e.kind == expectAny }

// IsNoStream reports whether e is NoStream.
func (e ExpectedRevision) IsNoStream() bool { return e.kind == expectNoStream }

// IsStreamExists reports whether e is StreamExists.
func (e ExpectedRevision) IsStreamExists() bool { return e.kind == expectStreamExists }

// ExactRevision returns the exact revision and true if e is Exact.
func (e ExpectedRevision) ExactRevision() (Revision, bool) { return e.rev, e.kind == expectExact }

// String formats e for errors and logs: "any", "no_stream", "stream_exists" or the number.
func (e ExpectedRevision) String() string {
	switch e.kind {
	case expectNoStream:
		return "no_stream"
	case expectStreamExists:
		return "stream_exists"
	case expectExact:
		return fmt.Sprint(e.rev)
	default:
		return "any"
	}
}

// Position is a commit-ordered place in the global log. On PostgreSQL, Commit
// is the appending transaction's xid8 and Prepare the event's sequence number
// within the log; on KurrentDB they are the commit and prepare positions of the
// transaction file. Positions compare lexicographically (Commit, then Prepare).
// The zero Position is before every event.
type Position struct {
	Commit  uint64 `json:"commit"`
	Prepare uint64 `json:"prepare"`
}

// Less reports whether p comes before q in the log.
func (p Position) Less(q Position) bool {
	return p.Commit < q.Commit || (p.Commit == q.Commit && p.Prepare < q.Prepare)
}

// IsZero reports whether p is the start of the log.
func (p Position) IsZero() bool { return p == Position{} }

// String formats p as "commit/prepare", the form of the Booking-Position header.
func (p Position) String() string {
	var buf [41]byte // two uint64s of at most 20 digits, and '/'
	b := strconv.AppendUint(buf[:0], p.Commit, 10)
	b = append(b, '/')
	return string(strconv.AppendUint(b, p.Prepare, 10))
}

// ParsePosition parses the "commit/prepare" form produced by String.
func ParsePosition(s string) (Position, error) {
	var p Position
	if _, err := fmt.Sscanf(s, "%d/%d", &p.Commit, &p.Prepare); err != nil {
		return Position{}, fmt.Errorf("eventstore: invalid position %q: want commit/prepare", s)
	}
	return p, nil
}

// EventData is an event to append. ID is a UUID (v7 for new facts, v5 for
// facts derived deterministically from a cause) and is the identity used for
// idempotent appends. Data and Metadata are JSON documents.
type EventData struct {
	ID       string
	Type     string
	Data     []byte
	Metadata []byte
}

// RecordedEvent is an event as stored: its stream, 0-based stream revision,
// commit-ordered log position and the time the store recorded it (database
// clock, UTC).
type RecordedEvent struct {
	ID         string
	Stream     string
	Type       string
	Revision   Revision
	Position   Position
	Data       []byte
	Metadata   []byte
	RecordedAt time.Time
}

// AppendResult tells where an append left the stream: the revision of the
// last event written (or already present, for an idempotent repeat) and the
// log position of the append.
//
// Now is the store's clock as the append ran, in UTC: on PostgreSQL the
// database clock of the appending statement (now(), the RecordedAt of the
// events it wrote), so a caller that needs the service clock right after an
// append does not read it again. It is the zero time where the store has no
// clock shared with the service (KurrentDB: the service's clock stays
// PostgreSQL's); callers then read their clock themselves.
type AppendResult struct {
	NextRevision Revision
	Position     Position
	Now          time.Time
}

// ErrStreamNotFound is returned by ReadStream when a stream has no live
// events: it never existed, or it was truncated or expired.
var ErrStreamNotFound = errors.New("eventstore: stream not found")

// PlaceholderType is the event type of the placeholders a copy of a log
// writes below a stream's truncation point, so the stream keeps its
// revisions on a store whose truncation removed the events
// (eventstore/logcopy); they are truncated again at once. It is in
// KurrentDB's system namespace, so KurrentDB's $all readers (ReadAll,
// SubscribeAll, Head) skip the ones a scavenge has not removed yet. No
// other code writes it.
const PlaceholderType = "$purged"

// ErrAppendTooLarge is matched (errors.Is) by the error of an append the
// store refuses for its size (an event or the whole batch over the store's
// limit, e.g. KurrentDB's MaxAppendEventSize and MaxAppendSize): nothing was
// written, and the same append will always be refused. It is never an
// unknown outcome.
var ErrAppendTooLarge = errors.New("eventstore: append too large")

// ErrWrongExpectedRevision is the sentinel matched (errors.Is) by every
// RevisionConflictError.
var ErrWrongExpectedRevision = errors.New("eventstore: wrong expected revision")

// RevisionConflictError is returned by Append when the stream's revision does
// not satisfy the expected revision and the events were not already appended
// at that place. Actual is the stream's last revision, or -1 if the stream has
// never had an event (KurrentDB's WrongExpectedVersion carries the same).
type RevisionConflictError struct {
	Stream   string
	Expected ExpectedRevision
	Actual   int64
}

// Error describes the conflict: stream, expected and actual revision.
func (e *RevisionConflictError) Error() string {
	return fmt.Sprintf("eventstore: append to %s: expected revision %s, actual %d", e.Stream, e.Expected, e.Actual)
}

// Is makes errors.Is(err, ErrWrongExpectedRevision) true.
func (e *RevisionConflictError) Is(target error) bool { return target == ErrWrongExpectedRevision }

// StreamAppend is one part of an AppendMulti: Events to append to Stream if
// Expected holds, as Append(ctx, Stream, Expected, Events...) takes them.
type StreamAppend struct {
	Stream   string
	Expected ExpectedRevision
	Events   []EventData
}

// AppendPartError is the error of an AppendMulti that failed on one of its
// parts: Part is the part's index in the call (0-based) of Parts, Stream its
// stream, Err the part's error — a *RevisionConflictError (errors.Is
// ErrWrongExpectedRevision) when its expected revision does not hold.
// errors.Is and errors.As see Err through it.
type AppendPartError struct {
	Part   int
	Parts  int
	Stream string
	Err    error
}

// Error names the part and its stream, then the part's error.
func (e *AppendPartError) Error() string {
	return fmt.Sprintf("eventstore: append to %d streams: part %d (%s): %v", e.Parts, e.Part, e.Stream, e.Err)
}

// Unwrap returns the part's error.
func (e *AppendPartError) Unwrap() error { return e.Err }

// CheckAppends checks what AppendMulti requires of its parts before any
// backend-specific check: at least one part, every part with a stream name
// and at least one event, no stream named by two parts, and no event id
// twice in the call. It returns an error naming the first offending part, nil
// otherwise.
func CheckAppends(appends []StreamAppend) error {
	if len(appends) == 0 {
		return errors.New("eventstore: append to no streams: want at least one part")
	}
	streams := make(map[string]int, len(appends))
	ids := make(map[string]int)
	for i, a := range appends {
		if a.Stream == "" {
			return fmt.Errorf("eventstore: append to %d streams: part %d: empty stream name", len(appends), i)
		}
		if len(a.Events) == 0 {
			return fmt.Errorf("eventstore: append to %d streams: part %d (%s): no events", len(appends), i, a.Stream)
		}
		if j, dup := streams[a.Stream]; dup {
			return fmt.Errorf("eventstore: append to %d streams: parts %d and %d both append to %s: want one part per stream", len(appends), j, i, a.Stream)
		}
		streams[a.Stream] = i
		for _, e := range a.Events {
			if j, dup := ids[e.ID]; dup {
				return fmt.Errorf("eventstore: append to %d streams: event id %s is in parts %d and %d: want distinct ids", len(appends), e.ID, j, i)
			}
			ids[e.ID] = i
		}
	}
	return nil
}

// Store is an event store with per-stream optimistic concurrency and a
// commit-ordered global log. Its contract follows KurrentDB's; AppendMulti
// is the one operation a KurrentDB backend cannot do atomically (it appends
// part by part there; see AppendMulti). Implementations are safe for
// concurrent use.
type Store interface {
	// Append writes events to stream atomically if expected holds. A repeat of
	// an append whose event ids are all already in the stream at the place the
	// expected revision names succeeds without writing anything (KurrentDB's
	// idempotent append). Returns a *RevisionConflictError (errors.Is
	// ErrWrongExpectedRevision) otherwise. events must not be empty.
	Append(ctx context.Context, stream string, expected ExpectedRevision, events ...EventData) (AppendResult, error)

	// AppendMulti appends to several streams, each part under its own
	// expected revision, as one unit: it does what Append would do for each
	// part in order, and on an atomic backend every part takes effect or
	// none does. It returns one AppendResult per part, in order.
	//
	// Parts name distinct streams, none is empty, and event ids are
	// distinct across the call (CheckAppends); otherwise it returns a plain
	// error and writes nothing. A part whose events are all stored where
	// its expected revision puts them is a repeat, as for Append: it writes
	// nothing and reports the stored revision and position; so a repeat of
	// a whole call is a no-op, and a repeat of a call that was cut short
	// writes what is missing. A part whose expected revision does not hold
	// (and that is not a repeat) fails the call with an *AppendPartError
	// naming the first such part and wrapping its *RevisionConflictError
	// (errors.Is ErrWrongExpectedRevision).
	//
	// Every event gets a commit-ordered position, increasing in part order
	// and event order. Atomic backends (pgstore: one transaction, one xid8
	// for every event; memstore: one lock) write nothing when any part
	// fails, and no reader sees some parts without the others. KurrentDB
	// (eventstore/kurrentdb, client v4) has no atomic multi-stream append:
	// there AppendMulti appends part by part and stops at the first failure,
	// leaving the parts before it written; repeating the same call completes
	// it, and the service's recovery, which repeats interrupted work, covers
	// the gap.
	AppendMulti(ctx context.Context, appends ...StreamAppend) ([]AppendResult, error)

	// ReadStream returns up to limit live events of stream with revision >=
	// from, in revision order. limit <= 0 means all. Returns
	// ErrStreamNotFound if the stream has no live events.
	ReadStream(ctx context.Context, stream string, from Revision, limit int) ([]RecordedEvent, error)

	// ReadAll returns up to limit events after position after, in log order.
	// It never returns an event while an earlier-positioned event may still
	// commit, so a reader that checkpoints the last position it saw never
	// skips an event. limit must be > 0.
	ReadAll(ctx context.Context, after Position, limit int) ([]RecordedEvent, error)

	// SubscribeAll is a catch-up subscription: it calls fn with batches of
	// events after position after, in log order, first catching up and then
	// following new appends, until ctx is done (returns ctx.Err()) or fn
	// returns an error (returned as is). It blocks.
	SubscribeAll(ctx context.Context, after Position, fn func(ctx context.Context, batch []RecordedEvent) error) error

	// Truncate hides every event of stream with a revision below before (KurrentDB's
	// $tb stream metadata) and deletes them where the backend can. The stream
	// keeps its last revision: a later append must expect it exactly.
	Truncate(ctx context.Context, stream string, before Revision) error

	// Head returns the position of the last event a reader may see now (the
	// log's readable horizon); the zero Position for an empty log.
	Head(ctx context.Context) (Position, error)
}
