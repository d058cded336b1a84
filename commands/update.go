package commands

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/tick"
)

// The retry policy of every load-decide-append in this package, written
// once (retryConflicts, and update on top of it):
//
//   - Only a lost race is retried: an append that failed with a revision
//     conflict (eventstore.ErrWrongExpectedRevision) or a step that found the
//     intent changed hands (errRetry). Every other error is returned at once;
//     an append whose outcome is unknown is resolved below this policy, by
//     appendResolving.
//   - At most Config.ConflictAttempts tries (20 by default, and when zero),
//     each loading the stream afresh and deciding again on what it holds.
//   - Between tries a capped exponential backoff with jitter (see backoff),
//     from conflictBackoffBase doubling up to conflictBackoffMax, so
//     contenders spread out instead of colliding again.
//   - When the tries run out: domain.ErrContention (503 with Retry-After),
//     which is never stored as an intent's outcome, so a repeat completes
//     the intent.
const (
	conflictBackoffBase = 2 * time.Millisecond
	conflictBackoffMax  = 100 * time.Millisecond
)

// retryConflicts runs try under the retry policy above: again while it
// returns a revision conflict or errRetry, up to Config.ConflictAttempts
// times. Returns try's first other result (nil included), ctx's error if it
// is done while backing off, or domain.ErrContention. Blocks while backing
// off.
func (h *core) retryConflicts(ctx context.Context, try func() error) error {
	bo := newBackoff(conflictBackoffBase, conflictBackoffMax)
	attempts := h.cfg.ConflictAttempts
	if attempts <= 0 {
		attempts = DefaultConfig().ConflictAttempts
	}
	for n := range attempts {
		if n > 0 {
			if err := tick.Sleep(ctx, bo.next()); err != nil {
				return err
			}
		}
		err := try()
		if !errors.Is(err, eventstore.ErrWrongExpectedRevision) && !errors.Is(err, errRetry) {
			return err
		}
	}
	return domain.ErrContention
}

// change is what one decision appends to one stream: its events with their
// ids, and their metadata (update sets OccurredAt from the database clock).
type change struct {
	events []pending
	meta   eventstore.Metadata
}

// domainEvents returns the change's events without their ids.
func (c change) domainEvents() []domain.Event {
	evs := make([]domain.Event, len(c.events))
	for i, p := range c.events {
		evs[i] = p.e
	}
	return evs
}

// update is the load-decide-append under the retry policy: it loads stream
// name, lets decide choose the change to append after what it loaded (no
// events: nothing left to do), and appends it at the loaded revision (the
// expected revision), again on a lost race. It returns the change
// appended, or the zero change when decide chose none; decide's error, a
// dependency failure (wrapping domain.ErrUnavailable) or
// domain.ErrContention. decide may run several times and must not have side
// effects.
func (h *core) update(ctx context.Context, name string, decide func(s *stream) (change, error)) (change, error) {
	c, _, err := h.updateFrom(ctx, name, nil, decide)
	return c, err
}

// updateFrom is update whose first try decides on from, the stream as the
// caller knows it, instead of reading it (nil reads it): the append at its
// revision fences the decision, and a conflict reads the stream for the
// next try. Every change is stamped with the database clock after its
// decision (whatever OccurredAt decide set), and a fact recorded by whoever
// loaded the stream (a webhook, the reconciler) keeps the correlation of
// the intent that last acted on it. It also returns the stream as the
// append left it (nil when nothing was appended).
func (h *core) updateFrom(ctx context.Context, name string, from *stream, decide func(s *stream) (change, error)) (change, *stream, error) {
	var done change
	var after *stream
	err := h.retryConflicts(ctx, func() error {
		var err error
		done, after, _, err = h.decideOnce(ctx, name, from, onceStamped, decide)
		from = nil
		return err
	})
	return done, after, err
}

// onceMode says what decideOnce stamps on a change beyond what appendEvents
// stamps from ctx.
type onceMode uint8

const (
	// onceAsGiven appends the change's metadata as decide gave it.
	onceAsGiven onceMode = iota
	// onceStamped sets OccurredAt to the database clock after the
	// decision, and, when ctx carries no correlation, the correlation of
	// the stream's last event.
	onceStamped
)

// decideOnce is one try of the load–decide–append, the one place in this
// package where a decision is appended (the hold batcher's batched append
// aside): it decides on from, the stream as the caller knows it (nil loads
// stream name; a stream known only by its revision, such as a create's
// &stream{name: name}, carries no events), and appends the change decide
// chose at from's revision, stamped as mode says. It returns the change
// appended (the zero change when decide chose none), the stream
// as the append left it (nil when nothing was appended; its events as far
// as from held them) and the append's result. A lost race is returned,
// not retried (eventstore.ErrWrongExpectedRevision): the caller decides
// again, by update's policy or its own loop.
func (h *core) decideOnce(ctx context.Context, name string, from *stream, mode onceMode, decide func(s *stream) (change, error)) (change, *stream, eventstore.AppendResult, error) {
	s := from
	if s == nil {
		var err error
		if s, err = h.streams.load(ctx, name); err != nil {
			return change{}, nil, eventstore.AppendResult{}, err
		}
	}
	c, err := decide(s)
	if err != nil || len(c.events) == 0 {
		return change{}, nil, eventstore.AppendResult{}, err
	}
	if mode == onceStamped {
		if c.meta.OccurredAt, err = h.streams.now(ctx); err != nil {
			return change{}, nil, eventstore.AppendResult{}, err
		}
		ctx = withStreamCorrelation(ctx, s)
	}
	part := []unitPart{{s: s, m: c.meta, evs: c.events}}
	res, err := h.appendEvents(ctx, keyWrite{}, part...)
	if err != nil {
		return change{}, nil, eventstore.AppendResult{}, err
	}
	after := &stream{name: name, records: s.records, exists: true, last: res[0].NextRevision,
		events: append(slices.Clone(s.events), change{events: part[0].evs}.domainEvents()...)}
	return c, after, res[0], nil
}

// newStream returns stream name as known before it exists: a commit on it
// creates it (no stream expected).
func newStream(name string) *stream { return &stream{name: name} }

// streamAt returns stream name known only by its last revision: a commit on
// it appends at that revision.
func streamAt(name string, last eventstore.Revision) *stream {
	return &stream{name: name, exists: true, last: last}
}

// expectedStream returns stream name known only by the expected revision
// exp of an append to it (no stream, or an exact revision).
func expectedStream(name string, exp eventstore.ExpectedRevision) *stream {
	if rev, ok := exp.ExactRevision(); ok {
		return streamAt(name, rev)
	}
	return newStream(name)
}

// commit appends events decided on s (the stream as the caller knows it,
// or known only by its revision) at s's revision with metadata m, through
// decideOnce: the helper for a caller that decided before and fences the
// decision by the revision it saw. A lost race is
// eventstore.ErrWrongExpectedRevision, for the caller to decide again.
func (h *core) commit(ctx context.Context, s *stream, m eventstore.Metadata, evs ...pending) (eventstore.AppendResult, error) {
	_, _, res, err := h.decideOnce(ctx, s.name, s, onceAsGiven, func(*stream) (change, error) {
		return change{events: evs, meta: m}, nil
	})
	return res, err
}

// commitUnit appends parts, each decided before on its stream as the caller
// knows it, as one unit of work (appendEvents): on an atomic store all of
// them or none. It returns one result per part, in order. A lost race on a
// part is eventstore.ErrWrongExpectedRevision (an
// *eventstore.AppendPartError names the part when there are several), for
// the caller to decide again. kw joins the unit (KeyUnits).
func (h *core) commitUnit(ctx context.Context, kw keyWrite, parts ...unitPart) ([]eventstore.AppendResult, error) {
	return h.appendEvents(ctx, kw, parts...)
}
