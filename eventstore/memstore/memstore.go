// Package memstore is an in-memory eventstore.Store for unit tests of the
// packages above the event store (commands). It keeps the contract the
// conformance suite (eventstore/storetest) checks of every backend: appends
// to one stream at an expected revision (KurrentDB's any, no stream, stream
// exists, exact), atomic appends to several streams (AppendMulti), the
// idempotent repeat of an append whose event ids are already where the
// expected revision puts them, event ids unique across streams, a
// commit-ordered log with catch-up subscriptions, and truncation that keeps
// a stream's last revision.
//
// Nothing is persisted. An append is atomic and visible the moment it
// returns (there are no transactions a reader could overtake), so a log
// reader never waits for a horizon.
package memstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// Clock stamps RecordedAt, standing in for the database clock (for example
// a test's settable clock). Now returns UTC or local time; it is stored as UTC.
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// Store is an in-memory eventstore.Store. The zero Store is not usable; call
// New. Safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	streams map[string]*stream
	ids     map[string]string // event id → stream
	log     []eventstore.RecordedEvent
	commits uint64
	// changed is closed and replaced by every append that writes, waking
	// subscribers.
	changed chan struct{}

	clock        Clock
	beforeAppend func(stream string)
	afterAppend  func(stream string, types []string)
}

type stream struct {
	events   []eventstore.RecordedEvent // all, including truncated ones
	truncate eventstore.Revision
}

var _ eventstore.Store = (*Store)(nil)

// New returns an empty Store whose RecordedAt is the host clock (see SetClock).
func New() *Store {
	return &Store{streams: map[string]*stream{}, ids: map[string]string{}, changed: make(chan struct{})}
}

// SetClock makes the store stamp RecordedAt from c (nil: the host clock).
func (m *Store) SetClock(c Clock) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clock = c
}

// SetBeforeAppend installs fn (nil removes it), called with the stream name
// before each append takes effect, outside the store's lock: a test uses it
// to interleave a competing writer.
func (m *Store) SetBeforeAppend(fn func(stream string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.beforeAppend = fn
}

// SetAfterAppend installs fn (nil removes it), called outside the store's
// lock after each append that wrote events, with their types in order.
func (m *Store) SetAfterAppend(fn func(stream string, types []string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.afterAppend = fn
}

// Append implements eventstore.Store: it writes events to stream atomically
// if expected holds. A repeat whose event ids are all stored in stream at
// the place expected names succeeds without writing (KurrentDB's idempotent
// append). Otherwise, or when an id is already stored elsewhere, it returns
// a *eventstore.RevisionConflictError (errors.Is
// eventstore.ErrWrongExpectedRevision) with the stream's last revision (-1
// if it never had an event). Returns ctx's error if ctx is done, and an
// error if events is empty.
func (m *Store) Append(ctx context.Context, name string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	if len(events) == 0 {
		return eventstore.AppendResult{}, errors.New("memstore: no events")
	}
	if err := ctx.Err(); err != nil {
		return eventstore.AppendResult{}, err
	}
	m.mu.Lock()
	before, clock := m.beforeAppend, m.clock
	m.mu.Unlock()
	if before != nil {
		before(name)
	}
	recordedAt := time.Now()
	if clock != nil {
		t, err := clock.Now(ctx)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		recordedAt = t
	}
	res, types, after, err := m.append(name, expected, recordedAt.UTC(), events)
	if err == nil && types != nil && after != nil {
		after(name, types)
	}
	if err == nil && clock != nil {
		res.Now = recordedAt.UTC() // the stand-in database clock; none without SetClock
	}
	return res, err
}

// append does Append under the lock. types is nil for a repeat that wrote
// nothing.
func (m *Store) append(name string, expected eventstore.ExpectedRevision, recordedAt time.Time, events []eventstore.EventData) (eventstore.AppendResult, []string, func(string, []string), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res, write, err := m.classifyLocked(name, expected, events)
	if err != nil || !write {
		return res, nil, nil, err
	}
	m.commits++
	res, types := m.writeLocked(name, recordedAt, events)
	m.wakeLocked()
	return res, types, m.afterAppend, nil
}

// classifyLocked decides an append to name as Append does: write reports
// that it is to be written; otherwise res is a repeat's stored result, or
// err the conflict.
func (m *Store) classifyLocked(name string, expected eventstore.ExpectedRevision, events []eventstore.EventData) (res eventstore.AppendResult, write bool, err error) {
	s := m.streams[name]
	last := int64(-1)
	if s != nil {
		last = int64(len(s.events)) - 1
	}
	holds := false
	switch rev, exact := expected.ExactRevision(); {
	case expected.IsAny():
		holds = true
	case expected.IsNoStream():
		holds = last == -1
	case expected.IsStreamExists():
		holds = last >= 0
	case exact:
		holds = last == int64(rev)
	}
	dup := slices.ContainsFunc(events, func(e eventstore.EventData) bool { _, ok := m.ids[e.ID]; return ok })
	if holds && !dup {
		return res, true, nil
	}
	if m.alreadyAppendedLocked(name, s, expected, events) {
		r := s.events[indexOf(s, events[len(events)-1].ID)]
		return eventstore.AppendResult{NextRevision: r.Revision, Position: r.Position}, false, nil
	}
	return res, false, &eventstore.RevisionConflictError{Stream: name, Expected: expected, Actual: last}
}

// writeLocked writes events to name under the current commit number and
// returns the result and the events' types.
func (m *Store) writeLocked(name string, recordedAt time.Time, events []eventstore.EventData) (eventstore.AppendResult, []string) {
	s := m.streams[name]
	if s == nil {
		s = &stream{}
		m.streams[name] = s
	}
	var res eventstore.AppendResult
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.Type
		r := eventstore.RecordedEvent{ID: e.ID, Stream: name, Type: e.Type, Revision: uint64(len(s.events)),
			Position: eventstore.Position{Commit: m.commits, Prepare: uint64(len(m.log)) + 1},
			Data:     e.Data, Metadata: e.Metadata, RecordedAt: recordedAt}
		s.events = append(s.events, r)
		m.log = append(m.log, r)
		m.ids[e.ID] = name
		res = eventstore.AppendResult{NextRevision: r.Revision, Position: r.Position}
	}
	return res, types
}

// wakeLocked wakes the subscribers after a write.
func (m *Store) wakeLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// AppendMulti implements eventstore.Store atomically: under the store's
// lock it decides every part as Append would and, unless a part conflicts,
// writes the parts to be written under one commit number, so a reader sees
// all of them or none. It returns one result per part, in order (a repeated
// part's stored result); an *eventstore.AppendPartError wrapping the first
// conflicting part's *eventstore.RevisionConflictError, with nothing
// written; the error of eventstore.CheckAppends for invalid parts; or ctx's
// error. The before-append hook (SetBeforeAppend) is called for each part's
// stream before the lock is taken, the after-append hook (SetAfterAppend)
// for each part written.
func (m *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	if err := eventstore.CheckAppends(appends); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	before, clock := m.beforeAppend, m.clock
	m.mu.Unlock()
	if before != nil {
		for _, a := range appends {
			before(a.Stream)
		}
	}
	recordedAt := time.Now()
	if clock != nil {
		t, err := clock.Now(ctx)
		if err != nil {
			return nil, err
		}
		recordedAt = t
	}
	results, written, after, err := m.appendMulti(appends, recordedAt.UTC())
	if err != nil {
		return nil, err
	}
	for i, types := range written {
		if types != nil && after != nil {
			after(appends[i].Stream, types)
		}
		if clock != nil {
			results[i].Now = recordedAt.UTC()
		}
	}
	return results, nil
}

// appendMulti does AppendMulti under the lock. written holds each part's
// written types, nil for a repeat.
func (m *Store) appendMulti(appends []eventstore.StreamAppend, recordedAt time.Time) ([]eventstore.AppendResult, [][]string, func(string, []string), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	results := make([]eventstore.AppendResult, len(appends))
	write := make([]bool, len(appends))
	writes := false
	for i, a := range appends {
		res, w, err := m.classifyLocked(a.Stream, a.Expected, a.Events)
		if err != nil {
			return nil, nil, nil, &eventstore.AppendPartError{Part: i, Parts: len(appends), Stream: a.Stream, Err: err}
		}
		results[i], write[i] = res, w
		writes = writes || w
	}
	written := make([][]string, len(appends))
	if !writes {
		return results, written, nil, nil
	}
	m.commits++
	for i, a := range appends {
		if write[i] {
			results[i], written[i] = m.writeLocked(a.Stream, recordedAt, a.Events)
		}
	}
	m.wakeLocked()
	return results, written, m.afterAppend, nil
}

func indexOf(s *stream, id string) int {
	return slices.IndexFunc(s.events, func(r eventstore.RecordedEvent) bool { return r.ID == id })
}

// alreadyAppendedLocked reports whether every event of the batch is stored in
// the stream where expected puts it (KurrentDB's idempotent append).
func (m *Store) alreadyAppendedLocked(name string, s *stream, expected eventstore.ExpectedRevision, events []eventstore.EventData) bool {
	if s == nil {
		return false
	}
	first := -1
	if rev, exact := expected.ExactRevision(); exact {
		first = int(rev) + 1
	} else if expected.IsNoStream() {
		first = 0
	}
	for i, e := range events {
		if m.ids[e.ID] != name {
			return false
		}
		if idx := indexOf(s, e.ID); first >= 0 && idx != first+i {
			return false
		}
	}
	return true
}

// ReadStream implements eventstore.Store: up to limit live events of stream
// with revision >= from, in revision order (limit <= 0: all). Returns
// eventstore.ErrStreamNotFound if the stream never had an event or every
// event is truncated, or ctx's error.
func (m *Store) ReadStream(ctx context.Context, name string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.streams[name]
	if s == nil {
		return nil, eventstore.ErrStreamNotFound
	}
	var out []eventstore.RecordedEvent
	for _, r := range s.events {
		if limit > 0 && len(out) == limit {
			break
		}
		if r.Revision >= from && r.Revision >= s.truncate {
			out = append(out, r)
		}
	}
	if len(out) == 0 && from <= s.truncate {
		return nil, eventstore.ErrStreamNotFound
	}
	return out, nil
}

// ReadAll implements eventstore.Store: up to limit events after position
// after, in log order, truncated ones excluded. Returns an error if limit is
// not positive, or ctx's error.
func (m *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		return nil, errors.New("memstore: ReadAll needs a positive limit")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.readAllLocked(after, limit), nil
}

func (m *Store) readAllLocked(after eventstore.Position, limit int) []eventstore.RecordedEvent {
	i, _ := slices.BinarySearchFunc(m.log, after, func(r eventstore.RecordedEvent, p eventstore.Position) int {
		if !p.Less(r.Position) {
			return -1
		}
		return 1
	})
	var out []eventstore.RecordedEvent
	for _, r := range m.log[i:] {
		if limit > 0 && len(out) == limit {
			break
		}
		if r.Revision >= m.streams[r.Stream].truncate {
			out = append(out, r)
		}
	}
	return out
}

// SubscribeAll implements eventstore.Store: it calls fn with batches of the
// events after position after, in log order, catching up first and then
// following new appends, until ctx is done (returns ctx.Err()) or fn fails
// (returns its error). It blocks.
func (m *Store) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error {
	const batchSize = 256
	for {
		m.mu.Lock()
		batch := m.readAllLocked(after, batchSize)
		changed := m.changed
		m.mu.Unlock()
		if len(batch) > 0 {
			if err := fn(ctx, batch); err != nil {
				return err
			}
			after = batch[len(batch)-1].Position
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Truncate implements eventstore.Store: it hides the events of stream below
// revision before; the stream keeps its last revision. A stream that does
// not exist is left alone. Never fails.
func (m *Store) Truncate(_ context.Context, name string, before eventstore.Revision) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.streams[name]; s != nil && before > s.truncate {
		s.truncate = min(before, eventstore.Revision(len(s.events)))
	}
	return nil
}

// Head implements eventstore.Store: the position of the last event
// appended, or the zero Position for an empty log.
func (m *Store) Head(ctx context.Context) (eventstore.Position, error) {
	if err := ctx.Err(); err != nil {
		return eventstore.Position{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.log) == 0 {
		return eventstore.Position{}, nil
	}
	return m.log[len(m.log)-1].Position, nil
}

// Types returns the event types of stream in revision order, truncated
// events included (nil when the stream never had an event): a test's view
// of everything ever appended to it.
func (m *Store) Types(name string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	if s := m.streams[name]; s != nil {
		for _, r := range s.events {
			out = append(out, r.Type)
		}
	}
	return out
}
