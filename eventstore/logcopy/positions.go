package logcopy

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/retrysafe/booking/eventstore"
)

// MapPositions translates positions of src's log into dst's, for
// checkpoints that must keep their place across a copy: each position p
// maps to dst's position of the last event at or before p in src that dst
// holds (the zero Position maps to itself, and so does a p before every
// such event). The two logs are walked side by side (ReadAll) and matched
// by event id, which a copy keeps, in the order a copy keeps; an event only
// src shows (purged in dst) maps to the event before it, so a checkpoint
// never moves past an event it had not reached. Before the walk it waits,
// for at most DefaultWait, until neither store (if a Horizon) holds back a
// committed event, so the walk reaches the end of both logs. Returns a
// wrapped error if a read fails, or a *HeldBackError if the wait ran out.
func MapPositions(ctx context.Context, src, dst eventstore.Store, positions []eventstore.Position) (map[eventstore.Position]eventstore.Position, error) {
	out := map[eventstore.Position]eventstore.Position{}
	todo := append([]eventstore.Position(nil), positions...)
	sort.Slice(todo, func(i, j int) bool { return todo[i].Less(todo[j]) })
	for len(todo) > 0 && todo[0].IsZero() {
		out[todo[0]] = eventstore.Position{}
		todo = todo[1:]
	}
	if len(todo) == 0 {
		return out, nil
	}
	for _, s := range []eventstore.Store{src, dst} {
		if err := waitReadable(ctx, s, DefaultWait, nil); err != nil {
			return nil, err
		}
	}
	srcIt := &reader{store: src}
	dstIt := &reader{store: dst}
	var mapped eventstore.Position // dst's position of the last matched event
	for len(todo) > 0 {
		e, ok, err := srcIt.next(ctx)
		if err != nil {
			return nil, fmt.Errorf("logcopy: map positions: read the source: %w", err)
		}
		for len(todo) > 0 && (!ok || todo[0].Less(e.Position)) {
			out[todo[0]] = mapped
			todo = todo[1:]
		}
		if !ok {
			break
		}
		p, found, err := locate(ctx, dst, dstIt, e)
		if err != nil {
			return nil, fmt.Errorf("logcopy: map positions: read the target: %w", err)
		}
		if found {
			mapped = p
		}
	}
	return out, nil
}

// locate finds src event e in dst: the next event of dst's log if it is e;
// otherwise, if dst's stream holds e at its revision, dst's events before it
// are ones src does not have (skipped); if not, e is not in dst.
func locate(ctx context.Context, dst eventstore.Store, it *reader, e eventstore.RecordedEvent) (eventstore.Position, bool, error) {
	d, ok, err := it.peek(ctx)
	if err != nil || !ok {
		return eventstore.Position{}, false, err
	}
	if d.ID == e.ID {
		it.advance()
		return d.Position, true, nil
	}
	evs, err := dst.ReadStream(ctx, e.Stream, e.Revision, 1)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return eventstore.Position{}, false, nil
	}
	if err != nil {
		return eventstore.Position{}, false, err
	}
	if len(evs) != 1 || evs[0].ID != e.ID || evs[0].Revision != e.Revision {
		return eventstore.Position{}, false, nil
	}
	for {
		d, ok, err := it.peek(ctx)
		if err != nil || !ok {
			return eventstore.Position{}, false, err
		}
		it.advance()
		if d.ID == e.ID {
			return d.Position, true, nil
		}
	}
}

// reader walks a store's log a page at a time.
type reader struct {
	store eventstore.Store
	after eventstore.Position
	page  []eventstore.RecordedEvent
	done  bool
}

func (r *reader) peek(ctx context.Context) (eventstore.RecordedEvent, bool, error) {
	for len(r.page) == 0 && !r.done {
		page, err := r.store.ReadAll(ctx, r.after, DefaultBatch)
		if err != nil {
			return eventstore.RecordedEvent{}, false, err
		}
		if len(page) == 0 {
			r.done = true
			break
		}
		r.page = page
		r.after = page[len(page)-1].Position
	}
	if len(r.page) == 0 {
		return eventstore.RecordedEvent{}, false, nil
	}
	return r.page[0], true, nil
}

func (r *reader) advance() { r.page = r.page[1:] }

func (r *reader) next(ctx context.Context) (eventstore.RecordedEvent, bool, error) {
	e, ok, err := r.peek(ctx)
	if ok {
		r.advance()
	}
	return e, ok, err
}
