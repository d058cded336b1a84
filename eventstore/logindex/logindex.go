// Package logindex answers the questions the service's background jobs ask
// beyond eventstore.Store, from the log itself, read through
// eventstore.Store.ReadAll, so it works on any backend: which streams a
// rule calls pending (Pending: the orders the payment reconciler still
// visits, by the rule the service passes; on every backend, since a query
// of the stored events would read every order event at each pass), which
// streams of a category are past their retention (PurgeStreams: the
// intents) and how many events the log holds (EventCount). The last two
// serve an event store that has no tables to query (the KurrentDB
// backend); pgstore answers them with SQL over its own tables
// (eventstore/pgstore/queries.go).
//
// An Index keeps a small summary of the log in memory and brings it up to
// date with the log's readable horizon at every call, so each answer is
// exact for the log up to that horizon. On PostgreSQL the horizon trails
// the newest commits while an older write transaction runs anywhere on the
// server (pgstore.Store.HorizonLag): the events it holds back count from
// the first call after it ends, as for every reader of the log. Follow
// keeps the summary up to date from a log subscription between calls (the
// service's shared log reader), so a call then reads from the log only the
// events the subscription has not delivered yet.
//
// # Bound and eviction
//
// The summary holds only what can still act:
//
//   - the streams the rule calls pending (no ending event yet, or an
//     obligation open), each with the names its obligations opened and
//     closed; a stream is evicted as soon as it is neither;
//   - the streams that an event may have made pending again since they
//     were evicted (an event that opens an obligation): checked against the
//     whole stream (ReadStream) at the next call, then kept or evicted; so
//     at most the events between two calls;
//   - the streams of the purged category not purged yet, with the revision
//     and occurred_at of each live event: every intent, until PurgeStreams
//     truncates it (after the retention period);
//   - the count of events and the position read up to.
//
// So its size follows the orders in flight, the refunds owed and the
// intents within retention, not the length of the log: an order that
// ended with its obligations closed costs nothing.
//
// # Restarts
//
// With WithSnapshots the summary is saved (every few thousand events
// applied, and by Save) and loaded at the first call after a restart,
// which then reads only the log after the snapshot's position. A snapshot
// is used only if it was taken under the same rule and purged category (a
// release that changes the rule reads the log again, so the rule applies to
// every event) and the log still holds the event it was taken at, at the
// same position (so a snapshot of another log is never used); otherwise,
// and without snapshots, the first call reads the whole log once.
package logindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// readBatch is how many events one ReadAll of a catch-up asks for.
const readBatch = 1000

// DefaultSnapshotEvery is how many events an Index applies between two
// snapshots (WithSnapshots).
const DefaultSnapshotEvery = 10_000

// Clock reads the time the service decides by (pgcoord.Clock: PostgreSQL's
// now()).
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// Snapshots keeps an Index's summary across restarts (pgcoord.Snapshots
// keeps it in PostgreSQL).
type Snapshots interface {
	// Load returns the last snapshot saved, or nil if there is none.
	Load(ctx context.Context) ([]byte, error)
	// Save replaces the saved snapshot with snapshot.
	Save(ctx context.Context, snapshot []byte) error
}

// Option configures an Index in New.
type Option func(*Index)

// WithSnapshots saves the summary to snapshots after every n events
// applied (DefaultSnapshotEvery if n <= 0) and loads it at the first call,
// so a restart reads only the log after it. A failed save does not fail the
// call that made it; a failed load fails it. Either is tried again at the
// next call.
func WithSnapshots(snapshots Snapshots, n int) Option {
	return func(ix *Index) {
		ix.snapshots = snapshots
		ix.snapshotEvery = n
		if n <= 0 {
			ix.snapshotEvery = DefaultSnapshotEvery
		}
	}
}

// Index is the in-memory summary of a log. Create it with New; its methods
// are safe for concurrent use (they run one at a time).
type Index struct {
	log           eventstore.Store
	clock         Clock
	rule          eventstore.PendingRule
	ends          map[string]bool
	purged        string
	ruleKey       string // rule and purged as JSON: a snapshot is used only under the same
	snapshots     Snapshots
	snapshotEvery int

	mu      sync.Mutex
	loaded  bool // the snapshot, if any, was loaded or found unusable
	pos     eventstore.Position
	prev    eventstore.Position // the position of the event before pos's
	lastID  string              // the id of the event at pos
	count   int64
	orders  map[string]*order
	recheck map[string]bool // evicted streams an obligation's opening may have reopened
	intents map[string][]stamp
	unsaved int // events applied since the last snapshot
}

// order is what Pending needs of a pending stream (an order, by the
// service's rule): whether it ended, and per obligation of the rule (in
// its order) the names opened and closed.
type order struct {
	Ended bool        `json:"ended,omitempty"`
	Owed  []owedNames `json:"owed,omitempty"`
}

// owedNames are the names one obligation's events opened and closed.
type owedNames struct {
	Opened map[string]struct{} `json:"opened,omitempty"`
	Closed map[string]struct{} `json:"closed,omitempty"`
}

// owes reports whether an obligation is open: a name opened and not closed.
func (o *order) owes() bool {
	for _, w := range o.Owed {
		for id := range w.Opened {
			if _, ok := w.Closed[id]; !ok {
				return true
			}
		}
	}
	return false
}

// pending is the rule: no ending event, or an obligation open.
func (o *order) pending() bool { return !o.Ended || o.owes() }

// stamp is an intent event not yet known to be truncated: its revision and
// its metadata's occurred_at (the database clock at the time of the fact).
type stamp struct {
	Rev eventstore.Revision `json:"rev"`
	At  time.Time           `json:"at"`
}

// New returns an Index of log that answers Pending by rule and purges the
// streams whose name begins with purged (the service passes its intent
// category), its retention decisions by clock.
func New(log eventstore.Store, clock Clock, rule eventstore.PendingRule, purged string, opts ...Option) *Index {
	ix := &Index{log: log, clock: clock, rule: rule, ends: map[string]bool{}, purged: purged,
		orders: map[string]*order{}, recheck: map[string]bool{}, intents: map[string][]stamp{}}
	for _, t := range rule.Ends {
		ix.ends[t] = true
	}
	key, _ := json.Marshal(struct { // strings and slices of them: cannot fail
		Rule   eventstore.PendingRule
		Purged string
	}{rule, purged})
	ix.ruleKey = string(key)
	for _, opt := range opts {
		opt(ix)
	}
	return ix
}

// catchUp reads the log from the last position seen up to its readable
// horizon: until a read returns nothing (a short page need not be the end:
// a backend may return fewer events than asked, e.g. after skipping system
// events). Then it checks the orders to recheck and saves a snapshot when
// due. Callers hold ix.mu.
func (ix *Index) catchUp(ctx context.Context) error {
	if !ix.loaded {
		// A failed load changes nothing and is tried again at the next
		// call, rather than reading the whole log then.
		if err := ix.load(ctx); err != nil {
			return err
		}
		ix.loaded = true
	}
	for {
		evs, err := ix.log.ReadAll(ctx, ix.pos, readBatch)
		if err != nil {
			return fmt.Errorf("logindex: read the log after %s: %w", ix.pos, err)
		}
		for _, e := range evs {
			ix.applyAt(e)
		}
		if len(evs) == 0 {
			break
		}
	}
	if err := ix.recheckOrders(ctx); err != nil {
		return err
	}
	if ix.snapshots != nil && ix.unsaved >= ix.snapshotEvery {
		_ = ix.save(ctx) // a failed save is tried again at the next call
	}
	return nil
}

// Subscriber is the log subscription Follow reads through
// (eventstore.Store.SubscribeAll; the service passes its shared log reader,
// fanout.Log).
type Subscriber interface {
	SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error
}

// Follow applies the log's events to the summary as sub delivers them,
// until ctx ends or the catch-up or the subscription fails. It first
// catches up as a call does, then subscribes from the position read up
// to, so each later call reads from the log only the events the
// subscription has not delivered yet. It is only a speed-up: every call
// still reads the log up to its horizon, so answers are the same with or
// without it, and the caller restarts it after a failure at its leisure.
// It returns ctx.Err() when ctx is done, else the failure, wrapped.
//
// The subscription delivers the log in order with no gap from the position
// it started at, which the summary's position never falls below: an event
// at or before the summary's position (a call read it first) is skipped,
// and the first one after it is the next event of the log.
func (ix *Index) Follow(ctx context.Context, sub Subscriber) error {
	ix.mu.Lock()
	err := ix.catchUp(ctx)
	from := ix.pos
	ix.mu.Unlock()
	if err == nil {
		err = sub.SubscribeAll(ctx, from, ix.applyBatch)
		if err != nil {
			err = fmt.Errorf("logindex: follow the log after %s: %w", from, err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// applyBatch applies the events of a batch after the summary's position.
func (ix *Index) applyBatch(_ context.Context, batch []eventstore.RecordedEvent) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, e := range batch {
		if ix.pos.Less(e.Position) {
			ix.applyAt(e)
		}
	}
	return nil
}

// applyAt applies e, the next event of the log after the summary's
// position, and moves the position to it. Callers hold ix.mu.
func (ix *Index) applyAt(e eventstore.RecordedEvent) {
	ix.apply(e)
	ix.prev, ix.pos, ix.lastID = ix.pos, e.Position, e.ID
	ix.unsaved++
}

// apply adds one event to the summary.
func (ix *Index) apply(e eventstore.RecordedEvent) {
	ix.count++
	switch {
	case ix.rule.Category != "" && strings.HasPrefix(e.Stream, ix.rule.Category):
		ix.applyOrder(e)
	case ix.purged != "" && strings.HasPrefix(e.Stream, ix.purged):
		m, _ := eventstore.DecodeMetadata(e.Metadata)
		ix.intents[e.Stream] = append(ix.intents[e.Stream], stamp{Rev: e.Revision, At: m.OccurredAt})
	}
}

// applyOrder adds an event of a stream of the rule's category. A stream
// first seen at revision 0 is tracked; one seen later was evicted (ended,
// obligations closed), and only an event that opens an obligation can make
// it pending again: it is rechecked at the end of the catch-up.
func (ix *Index) applyOrder(e eventstore.RecordedEvent) {
	o := ix.orders[e.Stream]
	if o == nil {
		if e.Revision > 0 {
			if ix.opens(e.Type) {
				ix.recheck[e.Stream] = true
			}
			return
		}
		o = &order{}
		ix.orders[e.Stream] = o
	}
	ix.add(o, e.Type, e.Data)
	if !o.pending() {
		delete(ix.orders, e.Stream)
	}
}

// opens reports whether events of type typ open an obligation of the rule.
func (ix *Index) opens(typ string) bool {
	for _, ob := range ix.rule.Owed {
		if slices.Contains(ob.Opens, typ) {
			return true
		}
	}
	return false
}

// add applies one event of the stream to its summary o.
func (ix *Index) add(o *order, typ string, data []byte) {
	if ix.ends[typ] {
		o.Ended = true
	}
	if len(o.Owed) < len(ix.rule.Owed) {
		o.Owed = append(o.Owed, make([]owedNames, len(ix.rule.Owed)-len(o.Owed))...)
	}
	for i, ob := range ix.rule.Owed {
		if slices.Contains(ob.Opens, typ) {
			o.Owed[i].Opened = addMember(o.Owed[i].Opened, data, ob.OpenMember)
		}
		if slices.Contains(ob.Closes, typ) {
			o.Owed[i].Closed = addMember(o.Owed[i].Closed, data, ob.CloseMember)
		}
	}
}

// recheckOrders reads the whole stream of every evicted stream an
// obligation's opening touched and tracks it again if it is pending.
// Callers hold ix.mu.
func (ix *Index) recheckOrders(ctx context.Context) error {
	for stream := range ix.recheck {
		if ix.orders[stream] != nil {
			delete(ix.recheck, stream)
			continue
		}
		evs, err := ix.log.ReadStream(ctx, stream, 0, 0)
		if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
			return fmt.Errorf("logindex: recheck %s: %w", stream, err)
		}
		o := &order{}
		for _, e := range evs {
			if e.Position.Less(ix.pos) || e.Position == ix.pos {
				ix.add(o, e.Type, e.Data)
			}
		}
		if len(evs) > 0 && o.pending() {
			ix.orders[stream] = o
		}
		delete(ix.recheck, stream)
	}
	return nil
}

// addMember adds the string member name of an event's data to set (a
// missing member or JSON null adds nothing).
func addMember(set map[string]struct{}, data []byte, name string) map[string]struct{} {
	id, ok := stringMember(data, name)
	if !ok {
		return set
	}
	if set == nil {
		set = map[string]struct{}{}
	}
	set[id] = struct{}{}
	return set
}

// Tracked returns the number of pending streams and purgeable streams the
// summary holds: what its memory grows with (see the package comment). It
// reads the log up to its horizon first. Returns a wrapped error if the
// log cannot be read.
func (ix *Index) Tracked(ctx context.Context) (orders, intents int, err error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.catchUp(ctx); err != nil {
		return 0, 0, err
	}
	return len(ix.orders), len(ix.intents), nil
}

// Pending returns up to limit ids of the streams of the rule's category
// (the name after the category), ascending by stream name and after the id
// after ("" for the first page), that the rule calls pending (see
// eventstore.PendingRule): those with no ending event, and those with an
// obligation open. It reads
// the log up to its horizon first, so the answer is exact for the log up
// to it (see the package comment). Fewer than limit ids means the last page. Returns a wrapped
// error if the log cannot be read.
func (ix *Index) Pending(ctx context.Context, after string, limit int) ([]string, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.catchUp(ctx); err != nil {
		return nil, err
	}
	from := ""
	if after != "" {
		from = ix.rule.Category + after
	}
	var streams []string
	for name := range ix.orders {
		if name > from {
			streams = append(streams, name)
		}
	}
	sort.Strings(streams)
	if limit > 0 && len(streams) > limit {
		streams = streams[:limit]
	}
	ids := make([]string, len(streams))
	for i, s := range streams {
		ids[i] = strings.TrimPrefix(s, ix.rule.Category)
	}
	return ids, nil
}

// PurgeStreams truncates up to limit streams whose name starts with prefix
// (only the purged category New was given is followed; another prefix is
// an error) and whose first
// live event occurred more than olderThan ago: its metadata's occurred_at
// (the database clock when the fact was decided) against the clock's now,
// never the event store's own timestamps, so on KurrentDB the decision
// stays on PostgreSQL's clock. The whole stream goes (eventstore.Store
// Truncate up to its last revision + 1; on KurrentDB the $tb stream
// metadata), its last revision stays. An event without occurred_at is
// never judged old. It returns the number of streams truncated; fewer than
// limit means none is left for now. Returns a wrapped error if the clock,
// a read or a truncation fails (streams truncated before it stay
// truncated). Same contract as pgstore.Store.PurgeStreams.
func (ix *Index) PurgeStreams(ctx context.Context, prefix string, olderThan time.Duration, limit int) (int, error) {
	if prefix != ix.purged || prefix == "" {
		return 0, fmt.Errorf("logindex: purge %s*: only %s* streams are indexed", prefix, ix.purged)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.catchUp(ctx); err != nil {
		return 0, err
	}
	now, err := ix.clock.Now(ctx)
	if err != nil {
		return 0, fmt.Errorf("logindex: purge %s*: read the clock: %w", prefix, err)
	}
	cutoff := now.Add(-olderThan)
	var candidates []string
	for name, st := range ix.intents {
		if len(st) > 0 && old(st[0].At, cutoff) {
			candidates = append(candidates, name)
		}
	}
	sort.Strings(candidates) // a stable order, so a failing stream does not hide the others at random
	n := 0
	for _, name := range candidates {
		if n >= limit {
			break
		}
		done, err := ix.purge(ctx, name, cutoff)
		if err != nil {
			return n, err
		}
		if done {
			n++
		}
	}
	return n, nil
}

// purge truncates stream name if its first live event is older than
// cutoff, and reports whether it did. The summary may list events already
// truncated (after a restart the index reads them again from the log): the
// stream's live events decide. Callers hold ix.mu.
func (ix *Index) purge(ctx context.Context, name string, cutoff time.Time) (bool, error) {
	live, err := ix.log.ReadStream(ctx, name, 0, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		delete(ix.intents, name)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("logindex: purge %s: %w", name, err)
	}
	st := make([]stamp, len(live))
	for i, e := range live {
		m, _ := eventstore.DecodeMetadata(e.Metadata)
		st[i] = stamp{Rev: e.Revision, At: m.OccurredAt}
	}
	ix.intents[name] = st
	if !old(st[0].At, cutoff) {
		return false, nil
	}
	last := live[len(live)-1].Revision
	if err := ix.log.Truncate(ctx, name, last+1); err != nil {
		return false, fmt.Errorf("logindex: purge %s: %w", name, err)
	}
	ix.intents[name] = dropThrough(ix.intents[name], last)
	if len(ix.intents[name]) == 0 {
		delete(ix.intents, name)
	}
	return true, nil
}

// old reports whether an event that occurred at t is past cutoff; the zero
// time (no occurred_at) never is.
func old(t, cutoff time.Time) bool { return !t.IsZero() && t.Before(cutoff) }

// dropThrough removes the stamps with a revision <= last.
func dropThrough(st []stamp, last eventstore.Revision) []stamp {
	out := st[:0]
	for _, s := range st {
		if s.Rev > last {
			out = append(out, s)
		}
	}
	return out
}

// EventCount returns the number of events the log hands out through
// ReadAll (on KurrentDB that includes truncated events until a scavenge),
// for a progress bar's total. It reads the log up to its horizon first.
// Returns a wrapped error if the log cannot be read.
func (ix *Index) EventCount(ctx context.Context) (int64, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.catchUp(ctx); err != nil {
		return 0, err
	}
	return ix.count, nil
}
