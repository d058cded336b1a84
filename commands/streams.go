package commands

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// streams is the event store as the use cases see it: they load streams,
// read the service clock and ask what this process wrote through it as
// they would a plain store, and the write path (appendEvents) tells it what
// was appended. Beneath that surface it keeps, per stream category:
//
//   - order streams (orders), kept whole after a load: the next load reads
//     only the tail after the kept revision (loadKept);
//   - intent streams (intents), kept likewise while their intent is young
//     (keepIntents after its record), so a kept one is only ever appended
//     to;
//   - reservations (reservations), the folded state this process last read
//     or appended, answered without a read (knownReservation) for decisions
//     an append at its revision fences;
//   - show snapshots (shows, showcache.go), brought to the stream's head
//     by reading its tail (refreshShow) under the show's keyed lock;
//   - show streams, the revision this process's last append to each left
//     and when (own): a show snapshot at that revision may be decided on
//     without a read for ownHoldTrust (trusted);
//   - the intent streams this process loaded or appended to (seenIntents,
//     intentHints in intent.go: seen);
//   - the clock reading (clock.go) and the ids this process appended
//     (written.go).
//
// A load answers what a whole read of the stream answers at that moment;
// only knownIntent, knownReservation, keptOrder and snapshot, which say so,
// answer from memory alone, for facts a stream never changes or never
// un-records, or decisions an append at the answered revision fences.
// Bounds: orders and intents maxKeptStreams each, reservations
// maxCachedStreams (streamCache: an arbitrary entry is dropped past the
// bound), shows maxCachedShows and maxHeldRecords (showCache), seen
// intents intentHintCap, written ids writtenCap (first in, first out), own
// below. A dropped entry costs a read, never a wrong answer. Safe for
// concurrent use.
type streams struct {
	store    EventStore
	registry *eventstore.Registry
	clock    Clock
	// keepIntents is how long after its record an intent stream is kept
	// (half the intent retention): an intent stream is truncated or
	// purged only once its intent expired, so a kept intent younger than
	// that is only ever appended to.
	keepIntents time.Duration

	reading      clockReading
	written      writtenSet
	orders       streamCache[*stream]
	intents      streamCache[*stream]
	reservations streamCache[domain.Reservation]
	seenIntents  intentHints
	// shows holds the show snapshots (showcache.go): refreshShow, snapshot.
	shows showCache

	ownMu sync.Mutex
	// own is, per show stream this process appended to within
	// ownHoldTrust, the revision its last append left and the host
	// instant its answer arrived. Bound: the shows appended to within
	// ownHoldTrust (older entries are swept at most once per
	// ownHoldTrust); eviction: an entry goes when an append to its
	// stream fails or it is swept.
	own      map[string]ownAppend
	ownSwept time.Time
}

// ownAppend is the revision an append of this process left on a stream,
// at the host instant its answer arrived.
type ownAppend struct {
	last eventstore.Revision
	at   time.Time
}

// newStreams returns the loader of store, decoding with registry and
// reading clock; intents are kept for keepIntents after their record.
func newStreams(store EventStore, registry *eventstore.Registry, clock Clock, keepIntents time.Duration) *streams {
	s := &streams{store: store, registry: registry, clock: clock, keepIntents: keepIntents}
	s.orders.limit, s.intents.limit = maxKeptStreams, maxKeptStreams
	return s
}

// load returns stream name as the store holds it now (a stream that does
// not exist has exists false). An order stream this process loaded before
// is read from its kept revision on; an intent stream is loaded with the
// clock (loadAt); a reservation's state is remembered for
// knownReservation. Errors: a failed read wraps domain.ErrUnavailable; an
// event the registry cannot decode is an internal error. The caller may
// read the stream's slices but not write them in place (appending is
// safe).
func (s *streams) load(ctx context.Context, name string) (*stream, error) {
	switch cat, _, _ := domain.CategoryOf(name); cat {
	case domain.CategoryOrder:
		return s.loadKept(ctx, &s.orders, name)
	case domain.CategoryIntent:
		_, st, err := s.loadAt(ctx, name)
		return st, err
	case domain.CategoryReservation:
		st, err := s.read(ctx, name)
		if err == nil && st.exists {
			s.reservations.put(name, fold[domain.Reservation](st.events), st.last)
		}
		return st, err
	}
	return s.read(ctx, name)
}

// read reads and decodes the whole of stream name, keeping nothing.
func (s *streams) read(ctx context.Context, name string) (*stream, error) {
	recs, err := s.store.ReadStream(ctx, name, 0, 0)
	st := &stream{name: name}
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return st, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	st.records = recs
	st.events = make([]domain.Event, 0, len(recs))
	for _, r := range recs {
		e, err := s.registry.Decode(r.Type, r.Data)
		if err != nil {
			return nil, fmt.Errorf("load %s@%d: %w", name, r.Revision, err)
		}
		st.events = append(st.events, e.(domain.Event))
	}
	if len(recs) > 0 {
		st.exists, st.last = true, recs[len(recs)-1].Revision
	}
	return st, nil
}

// young reports whether kept intent stream st is still kept at now.
func (s *streams) young(st *stream, now time.Time) bool {
	return st.exists && now.Before(intentOpened(st).Add(s.keepIntents))
}

// loadAt reads the service clock and stream name (an intent stream). A
// kept intent stream still young at the clock's reading has only its tail
// read, after the clock (usually the process's reading, no round trip);
// otherwise the whole stream is read, with the clock beside it when the
// process's reading is stale (two statements, one round trip of waiting),
// and the stream is kept when it is young. Errors are now's and load's.
func (s *streams) loadAt(ctx context.Context, name string) (time.Time, *stream, error) {
	if k, _, ok := s.intents.get(name); ok {
		now, err := s.now(ctx)
		if err != nil {
			return time.Time{}, nil, err
		}
		if s.young(k, now) {
			st, err := s.loadKept(ctx, &s.intents, name)
			if err == nil && st.exists {
				s.seenIntents.note(name)
			}
			return now, st, err
		}
		s.intents.drop(name)
	}
	now, fresh := s.reading.now(s.ticket())
	nowErr := make(chan error, 1)
	if fresh {
		nowErr <- nil
	} else {
		go func() {
			var err error
			now, err = s.now(ctx)
			nowErr <- err
		}()
	}
	st, err := s.read(ctx, name)
	if nerr := <-nowErr; err == nil {
		err = nerr
	}
	if err != nil {
		return time.Time{}, nil, err
	}
	if st.exists {
		s.seenIntents.note(name)
	}
	if s.young(st, now) {
		k := st.keptCopy()
		k.opened = intentOpened(st) // k is not shared yet
		s.intents.put(name, k, k.last)
		st = k.clipped()
	}
	return now, st, nil
}

// snapshot returns the snapshot of show id as this process holds it,
// possibly behind the stream (an empty one when it holds none): for what a
// show fixes when it is scheduled, or for a decision an append at its
// revision fences. The caller holds the show's keyed lock (core.shows).
func (s *streams) snapshot(id string) *showEntry { return s.shows.get(id) }

// heldIn returns the SeatsHeld of reservation res that snapshot e keeps,
// without reading, and whether e is partial (a reservation it does not
// keep may be on the stream all the same; findHold reads then).
func (s *streams) heldIn(e *showEntry, res string) (heldRecord, bool, bool) {
	return s.shows.lookup(e, res)
}

// keepHeld keeps rec, a SeatsHeld on snapshot e's stream, with e (bounded:
// see showCache).
func (s *streams) keepHeld(e *showEntry, rec heldRecord) { s.shows.remember(e, rec) }

// tail returns st brought to its stream's head by reading and decoding
// only the events after st.last (st itself when none came), and the events
// read. The stream returned has st's records (the tail's events only in
// its events). Errors: a failed read wraps domain.ErrUnavailable; an event
// the registry cannot decode is an internal error.
func (s *streams) tail(ctx context.Context, st *stream) (*stream, []domain.Event, error) {
	recs, err := s.store.ReadStream(ctx, st.name, st.last+1, 0)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	if len(recs) == 0 {
		return st, nil, nil
	}
	next := &stream{name: st.name, records: st.records, exists: true, last: st.last,
		events: append([]domain.Event(nil), st.events...)}
	for _, r := range recs {
		e, err := s.registry.Decode(r.Type, r.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("load %s@%d: %w", st.name, r.Revision, err)
		}
		next.events = append(next.events, e.(domain.Event))
		next.last = r.Revision
	}
	return next, next.events[len(st.events):], nil
}

// truncate deletes the events of intent stream name before revision
// before (an expired intent, whose key starts anew) and forgets the stream
// if it is kept. Errors wrap domain.ErrUnavailable.
func (s *streams) truncate(ctx context.Context, name string, before eventstore.Revision) error {
	err := s.store.Truncate(ctx, name, before)
	s.intents.drop(name)
	return unavailable(err)
}

// seen reports whether this process loaded intent stream name and found
// it, or appended to it (intentHints: a hint; a miss proves nothing).
func (s *streams) seen(name string) bool { return s.seenIntents.has(name) }

// knownIntent returns intent stream name as this process last loaded it,
// without reading it, with the service clock: nil when it is not kept or
// no longer young. Exact only for what an intent stream never changes once
// written (its IntentRecorded: command, fingerprint, target); what came
// after may be missing. Errors are now's.
func (s *streams) knownIntent(ctx context.Context, name string) (time.Time, *stream, error) {
	k, _, ok := s.intents.get(name)
	if !ok || !k.exists {
		return time.Time{}, nil, nil
	}
	now, err := s.now(ctx)
	if err != nil || !s.young(k, now) {
		return now, nil, err
	}
	return now, k.clipped(), nil
}

// knownReservation returns reservation id as this process last read or
// appended it, and its stream known by that revision only (no events),
// reading the stream only when it holds none. A hint: another writer may
// have appended since, so it serves decisions on what ReservationHeld
// fixed, or that an append at the returned revision fences (a conflict
// drops the entry, and the next call reads). Errors are load's.
func (s *streams) knownReservation(ctx context.Context, id string) (domain.Reservation, *stream, error) {
	name := domain.ReservationStream(id)
	if r, last, ok := s.reservations.get(name); ok {
		return r, streamAt(name, last), nil
	}
	st, err := s.load(ctx, name)
	if err != nil {
		return domain.Reservation{}, nil, err
	}
	return fold[domain.Reservation](st.events), st, nil
}

// keptOrder returns order stream name as this process keeps it (loadKept),
// without reading it: nil when it keeps none. It answers from memory
// alone, for a fact a stream never un-records (a charge the order records
// as succeeded stays succeeded in the fold of every longer stream): what
// was appended after the kept revision is missing, so it serves only a
// fact it shows, never one it lacks. The caller may read the stream's
// slices but not write them in place.
func (s *streams) keptOrder(name string) *stream {
	if k, _, ok := s.orders.get(name); ok {
		return k.clipped()
	}
	return nil
}

// committed is told by the write path the outcome of a unit of parts: res
// (one result per part) when it was stored, else err. A stored part of a
// reservation stream brings the remembered state to the revision it left
// when the state before it is known (remembered at the part's revision, a
// new stream, or a part decided on the whole stream); every other
// reservation part, and each one of a failed unit (a conflict, or an
// outcome unknown), forgets its stream, which the next use reads. A show
// stream's part sets or ends the trust in its revision (trusted); a stored
// intent part marks its stream seen. Kept order and intent streams need
// nothing: their next load reads the tail.
func (s *streams) committed(parts []unitPart, res []eventstore.AppendResult, err error) {
	for i, p := range parts {
		name := p.s.name
		switch cat, _, _ := domain.CategoryOf(name); cat {
		case domain.CategoryShow:
			s.ownShow(name, res, i, err)
			continue
		case domain.CategoryIntent:
			if err == nil {
				s.seenIntents.note(name)
			}
			continue
		case domain.CategoryReservation:
		default:
			continue
		}
		r, ok := s.reservationAt(p.s)
		if err != nil || !ok || (p.data != nil && len(p.evs) != len(p.data)) {
			s.reservations.drop(name)
			continue
		}
		for _, e := range p.evs {
			r.Apply(e.e)
		}
		s.reservations.put(name, r, res[i].NextRevision)
	}
}

// ownShow records the outcome of part i of a unit on show stream name:
// the revision it left when stored, no trust when not.
func (s *streams) ownShow(name string, res []eventstore.AppendResult, i int, err error) {
	now := time.Now()
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	if err != nil {
		delete(s.own, name)
		return
	}
	if s.own == nil {
		s.own = map[string]ownAppend{}
	}
	if now.Sub(s.ownSwept) > ownHoldTrust {
		for k, o := range s.own {
			if now.Sub(o.at) > ownHoldTrust {
				delete(s.own, k)
			}
		}
		s.ownSwept = now
	}
	s.own[name] = ownAppend{last: res[i].NextRevision, at: now}
}

// trusted reports whether revision last of stream name is the one this
// process's own last append to it left, less than ownHoldTrust ago: a
// snapshot at last is the stream as this process last wrote it, which
// another writer may have passed since (an append at last then
// conflicts, and the conflict ends the trust). Only show streams are
// tracked.
func (s *streams) trusted(name string, last eventstore.Revision) bool {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	o, ok := s.own[name]
	return ok && o.last == last && time.Since(o.at) <= ownHoldTrust
}

// reservationAt returns the state of reservation stream st before an
// append at st's revision, when this process knows it.
func (s *streams) reservationAt(st *stream) (domain.Reservation, bool) {
	if !st.exists {
		return domain.Reservation{}, true
	}
	if r, last, ok := s.reservations.get(st.name); ok && last == st.last {
		return r, true
	}
	whole := len(st.records) > 0 && st.records[0].Revision == 0 && len(st.events) == len(st.records) &&
		st.records[len(st.records)-1].Revision == st.last
	if whole {
		return fold[domain.Reservation](st.events), true
	}
	return domain.Reservation{}, false
}

// wrote reports whether every id is of an event this process appended
// (writtenSet: a hint, see there).
func (s *streams) wrote(ids ...string) bool { return s.written.has(ids...) }

// wroteAfter reports whether id is of an event this process appended at a
// log position after after (writtenSet.hasAfter).
func (s *streams) wroteAfter(after eventstore.Position, id string) bool {
	return s.written.hasAfter(after, id)
}

// noteDone records a side effect done for good under key (writtenSet.note).
func (s *streams) noteDone(key string) { s.written.note(key) }

// appended records what an acknowledged unit teaches: the event ids of
// parts written at the positions in res, and the store's clock when the
// unit's round trip, begun at sent under ticket tk, was short
// (noteAppendClock).
func (s *streams) appended(tk clockTicket, sent time.Time, parts []eventstore.StreamAppend, res []eventstore.AppendResult) {
	for i, p := range parts {
		s.written.add(p.Events, res[i].Position)
	}
	s.noteAppendClock(tk, res[len(res)-1], sent)
}

// loadKept is load for a stream this process keeps in c (orders; intents
// while they are young, see loadAt): when c holds the stream, only its
// tail after the kept revision is read and decoded — for a finished order
// or intent, one read that returns no event — and the longer stream is kept
// in its place. A stream that is not held is loaded whole and kept if it
// exists.
//
// It is exact for streams that are only appended to while they are kept:
// a stream's events never change, so the kept prefix plus the tail is what
// a whole read returns. Orders are never truncated; an intent stream is
// truncated only after its intent expired, so intents are kept only while
// far from expiry. A tail that does not continue the kept revision, a tail
// that records an intent again (the stream was truncated and its key
// reused: by a replica whose retention is shorter, or whose clock is ahead
// by half the retention), or a stream that has no live event any more, is
// read whole instead. The caller gets its own copy of the stream value,
// whose slices it may read but not write in place (appending is safe:
// their capacity ends at their length).
func (s *streams) loadKept(ctx context.Context, c *streamCache[*stream], name string) (*stream, error) {
	if k, last, ok := c.get(name); ok {
		recs, err := s.store.ReadStream(ctx, name, last+1, 0)
		switch {
		case errors.Is(err, eventstore.ErrStreamNotFound):
			c.drop(name)
		case err != nil:
			return nil, unavailable(err)
		case len(recs) == 0:
			return k.clipped(), nil
		case recs[0].Revision != last+1:
			c.drop(name)
		default:
			next, err := s.extend(k, recs)
			if err != nil {
				return nil, err
			}
			if next != nil {
				c.put(name, next, next.last)
				return next.clipped(), nil
			}
			c.drop(name)
		}
	}
	st, err := s.read(ctx, name)
	if err != nil {
		return nil, err
	}
	if st.exists {
		k := st.keptCopy()
		c.put(name, k, k.last)
		return k.clipped(), nil
	}
	return st, nil
}

// extend returns kept stream k followed by its tail recs, decoded; nil when
// the tail records an intent again (the stream was truncated and recorded
// anew, continuing the revisions).
func (s *streams) extend(k *stream, recs []eventstore.RecordedEvent) (*stream, error) {
	next := k.clipped()
	for _, r := range recs {
		e, err := s.registry.Decode(r.Type, r.Data)
		if err != nil {
			return nil, fmt.Errorf("load %s@%d: %w", k.name, r.Revision, err)
		}
		if _, again := e.(domain.IntentRecorded); again {
			return nil, nil
		}
		r.Data = nil // decoded in events; see keptCopy
		next.events = append(next.events, e.(domain.Event))
		next.records = append(next.records, r)
		next.last = r.Revision
	}
	return next, nil
}

// keptCopy returns st as a stream cache keeps it: its records without their
// data, which its events hold decoded (every use of a loaded stream's
// records reads their ids, revisions, positions, times and metadata), so a
// kept stream costs its decoded events and metadata only.
func (st *stream) keptCopy() *stream {
	cp := *st
	cp.records = make([]eventstore.RecordedEvent, len(st.records))
	for i, r := range st.records {
		r.Data = nil
		cp.records[i] = r
	}
	return &cp
}

// clipped returns a copy of st whose slices end at their capacity, so that
// appending to them never writes into st's arrays.
func (st *stream) clipped() *stream {
	cp := *st
	cp.events = cp.events[:len(cp.events):len(cp.events)]
	cp.records = cp.records[:len(cp.records):len(cp.records)]
	return &cp
}
