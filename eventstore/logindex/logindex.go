// Package logindex answers, for an event store that has no tables to query
// (the KurrentDB backend), the questions the service's background jobs ask
// beyond eventstore.Store: which orders still need the payment reconciler
// (PendingOrders), which intent streams are past their retention
// (PurgeStreams) and how many events the log holds (EventCount). pgstore
// answers them with SQL over its own tables (eventstore/pgstore/queries.go);
// an Index answers them from the log itself, read through
// eventstore.Store.ReadAll, so it works on any backend.
//
// An Index keeps a small summary of the log in memory and brings it up to
// date with the log's readable horizon at every call, so each answer is
// exact at the moment of the call, as the SQL is. After a restart it reads
// the whole log once.
package logindex

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// readBatch is how many events one ReadAll of a catch-up asks for.
const readBatch = 1000

// orderPrefix is the stream name prefix of orders ("order-{orderID}", see
// domain.OrderStream).
const orderPrefix = "order-"

// endingTypes are the events after which an order needs no more payment
// work, unless a refund is still open (see PendingOrders).
var endingTypes = map[string]bool{"OrderConfirmed": true, "OrderFailed": true, "OrderCancelled": true, "OrderNeedsReview": true}

// Clock reads the time the service decides by (pgcoord.Clock: PostgreSQL's
// now()).
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// Index is the in-memory summary of a log. Create it with New; its methods
// are safe for concurrent use (they run one at a time).
type Index struct {
	log   eventstore.Store
	clock Clock

	mu      sync.Mutex
	pos     eventstore.Position
	count   int64
	orders  map[string]*order
	intents map[string][]stamp
}

// order is what PendingOrders needs of an order stream.
type order struct {
	ended     bool
	requested map[string]struct{} // charge ids of RefundRequested
	settled   map[string]struct{} // charge ids of RefundSucceeded and RefundRefused
	awaiting  map[string]struct{} // payment ids of PaymentActionRequired
	resolved  map[string]struct{} // charge ids of PaymentSucceeded and PaymentFailed
}

// awaitsCancel reports whether a payment that required the customer's
// action has no recorded final state.
func (o *order) awaitsCancel() bool {
	for id := range o.awaiting {
		if _, ok := o.resolved[id]; !ok {
			return true
		}
	}
	return false
}

// stamp is an intent event not yet known to be truncated: its revision and
// its metadata's occurred_at (the database clock at the time of the fact).
type stamp struct {
	rev eventstore.Revision
	at  time.Time
}

// New returns an Index of log whose retention decisions use clock.
func New(log eventstore.Store, clock Clock) *Index {
	return &Index{log: log, clock: clock, orders: map[string]*order{}, intents: map[string][]stamp{}}
}

// catchUp reads the log from the last position seen up to its readable
// horizon: until a read returns nothing (a short page need not be the end:
// a backend may return fewer events than asked, e.g. after skipping system
// events). Callers hold ix.mu.
func (ix *Index) catchUp(ctx context.Context) error {
	for {
		evs, err := ix.log.ReadAll(ctx, ix.pos, readBatch)
		if err != nil {
			return fmt.Errorf("logindex: read the log after %s: %w", ix.pos, err)
		}
		for _, e := range evs {
			ix.apply(e)
			ix.pos = e.Position
		}
		if len(evs) == 0 {
			return nil
		}
	}
}

// apply adds one event to the summary.
func (ix *Index) apply(e eventstore.RecordedEvent) {
	ix.count++
	switch {
	case strings.HasPrefix(e.Stream, orderPrefix):
		o := ix.orders[e.Stream]
		if o == nil {
			o = &order{}
			ix.orders[e.Stream] = o
		}
		switch {
		case endingTypes[e.Type]:
			o.ended = true
		case e.Type == "RefundRequested":
			o.requested = addCharge(o.requested, e.Data)
		case e.Type == "RefundSucceeded" || e.Type == "RefundRefused":
			o.settled = addCharge(o.settled, e.Data)
		case e.Type == "PaymentActionRequired":
			o.awaiting = addMember(o.awaiting, e.Data, "payment_id")
		case e.Type == "PaymentSucceeded" || e.Type == "PaymentFailed":
			o.resolved = addCharge(o.resolved, e.Data)
		}
	case strings.HasPrefix(e.Stream, intentPrefix):
		m, _ := eventstore.DecodeMetadata(e.Metadata)
		ix.intents[e.Stream] = append(ix.intents[e.Stream], stamp{rev: e.Revision, at: m.OccurredAt})
	}
}

// intentPrefix is the stream name prefix PurgeStreams follows.
const intentPrefix = "intent-"

// addCharge adds the charge_id member of a refund event's data to set; the
// SQL version counts distinct charge ids the same way (a missing member
// counts as none).
func addCharge(set map[string]struct{}, data []byte) map[string]struct{} {
	return addMember(set, data, "charge_id")
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

// PendingOrders returns up to limit order ids, ascending by stream name and
// after the order id after ("" for the first page), of the order streams
// (order-{id}) that still need the payment reconciler: those with no ending
// event (OrderConfirmed, OrderFailed, OrderCancelled, OrderNeedsReview), and
// those with more distinct charge ids in RefundRequested than in
// RefundSucceeded and RefundRefused, and those with a payment id of
// PaymentActionRequired that no PaymentSucceeded or PaymentFailed names
// (charge_id). The same rule as
// pgstore.Store.PendingOrders; it implements commands.PendingOrders. It
// reads the log up to its horizon first, so the answer is exact at the
// moment of the call. Fewer than limit ids means the last page. Returns a
// wrapped error if the log cannot be read.
func (ix *Index) PendingOrders(ctx context.Context, after string, limit int) ([]string, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.catchUp(ctx); err != nil {
		return nil, err
	}
	from := ""
	if after != "" {
		from = orderPrefix + after
	}
	var streams []string
	for name, o := range ix.orders {
		if name > from && (!o.ended || len(o.requested) > len(o.settled) || o.awaitsCancel()) {
			streams = append(streams, name)
		}
	}
	sort.Strings(streams)
	if limit > 0 && len(streams) > limit {
		streams = streams[:limit]
	}
	ids := make([]string, len(streams))
	for i, s := range streams {
		ids[i] = strings.TrimPrefix(s, orderPrefix)
	}
	return ids, nil
}

// PurgeStreams truncates up to limit streams whose name starts with prefix
// (only "intent-" is followed; another prefix is an error) and whose first
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
	if prefix != intentPrefix {
		return 0, fmt.Errorf("logindex: purge %s*: only %s* streams are indexed", prefix, intentPrefix)
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
		if len(st) > 0 && old(st[0].at, cutoff) {
			candidates = append(candidates, name)
		}
	}
	sort.Strings(candidates) // a stable order, so a failing stream does not hide the others at random
	n := 0
	for _, name := range candidates {
		if n >= limit {
			break
		}
		// The summary may list events already truncated (after a restart
		// the index reads them again from the log): the stream's live
		// events decide.
		live, err := ix.log.ReadStream(ctx, name, 0, 0)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			delete(ix.intents, name)
			continue
		}
		if err != nil {
			return n, fmt.Errorf("logindex: purge %s: %w", name, err)
		}
		st := make([]stamp, len(live))
		for i, e := range live {
			m, _ := eventstore.DecodeMetadata(e.Metadata)
			st[i] = stamp{rev: e.Revision, at: m.OccurredAt}
		}
		ix.intents[name] = st
		if !old(st[0].at, cutoff) {
			continue
		}
		last := live[len(live)-1].Revision
		if err := ix.log.Truncate(ctx, name, last+1); err != nil {
			return n, fmt.Errorf("logindex: purge %s: %w", name, err)
		}
		ix.intents[name] = dropThrough(ix.intents[name], last)
		if len(ix.intents[name]) == 0 {
			delete(ix.intents, name)
		}
		n++
	}
	return n, nil
}

// old reports whether an event that occurred at t is past cutoff; the zero
// time (no occurred_at) never is.
func old(t, cutoff time.Time) bool { return !t.IsZero() && t.Before(cutoff) }

// dropThrough removes the stamps with a revision <= last.
func dropThrough(st []stamp, last eventstore.Revision) []stamp {
	out := st[:0]
	for _, s := range st {
		if s.rev > last {
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
