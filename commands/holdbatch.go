package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// maxHoldBatch bounds how many reservations one append to a show stream
// decides, so one failed batch costs few retries.
const maxHoldBatch = 64

// holdReq is one reservation waiting for the show stream's next append.
// fresh says that its reservation cannot have been held yet: its request
// recorded the intent and is alone on it (intentRun.alone), and has not
// tried to hold before.
type holdReq struct {
	run   *intentRun
	cmd   ReserveSeatsCommand
	resID string
	fresh bool
	done  chan holdResult
	// trace is the request's span context, kept with its SeatsHeld.
	trace trace.SpanContext
}

// holdResult is what the batch decided for one request: the SeatsHeld (ok),
// a definitive refusal to record (rejection), a lost race to retry
// (neither), or a dependency error (errIntentTaken: another request
// recorded the request's pending intent first). intent is the result of
// the request's pending IntentRecorded when the batch's unit appended it.
type holdResult struct {
	held      heldRecord
	ok        bool
	rejection *domain.Error
	err       error
	intent    *eventstore.AppendResult
}

// holdBatcher is a per-show group commit of seat holds: while one batch is
// being appended to a show stream, new requests queue; the next batch decides
// them in arrival order against the show's capacity and appends all their
// SeatsHeld events in one append at the expected revision. On an on-sale the
// show stream's append rate, not the request rate, bounds throughput; this
// turns N holds into one round trip and one commit. Safe for concurrent use.
//
// Batches of one show run one after the other, each appended only once the
// previous one has its outcome. The next batch is not sent behind an
// uncommitted one: if the first failed (a lost race), the second, appended
// at the revision the first would have left, could succeed where another
// writer's events took those revisions, having decided against a state the
// stream never had; an expected revision cannot tell the two apart.
type holdBatcher struct {
	mu sync.Mutex
	// queue and running are, per show, the requests waiting for its next
	// batch and whether a batch of it is running. Bound: the requests in
	// flight; eviction: a show leaves both once its queue is empty.
	queue   map[string][]*holdReq
	running map[string]bool
	// own is, for a show this process appended a batch to, the show
	// stream's revision that batch left and when its answer arrived: the
	// snapshot the next batch may decide on without reading the stream,
	// for ownHoldTrust after it. Bound: the shows with a batch running or
	// appended within ownHoldTrust; eviction: an entry is dropped when an
	// append fails, and every entry older than ownHoldTrust when a run of
	// batches ends.
	own map[string]ownHolds
}

// ownHolds is the show stream's revision a batch of this process appended,
// at the host instant its answer arrived.
type ownHolds struct {
	last eventstore.Revision
	at   time.Time
}

// ownHoldTrust is how long after its append the snapshot a batch left is
// decided on without reading the show stream. Another writer's append in
// that time costs the next batch one failed append and a read of the tail
// (as it does within a run of batches), instead of the read every hold
// would pay; a longer gap is read first, since other replicas' holds and
// releases have most likely come in it.
const ownHoldTrust = 5 * time.Second

// holdSeats is the read-decide-append of a reservation on the show stream,
// batched with concurrent reservations of the same show (see holdBatcher).
// It returns the appended SeatsHeld, or decided false after a revision
// conflict (another replica appended first), or the recorded *Rejection.
// fresh is holdReq.fresh.
func (h *core) holdSeats(ctx context.Context, run *intentRun, cmd ReserveSeatsCommand, resID string, fresh bool) (heldRecord, bool, error) {
	req := &holdReq{run: run, cmd: cmd, resID: resID, fresh: fresh, done: make(chan holdResult, 1), trace: trace.SpanContextFromContext(ctx)}
	b := &h.holds
	b.mu.Lock()
	if b.queue == nil {
		b.queue, b.running, b.own = map[string][]*holdReq{}, map[string]bool{}, map[string]ownHolds{}
	}
	b.queue[cmd.ShowID] = append(b.queue[cmd.ShowID], req)
	lead := !b.running[cmd.ShowID]
	if lead {
		b.running[cmd.ShowID] = true
	}
	b.mu.Unlock()
	if lead {
		h.leadHolds(ctx, cmd.ShowID)
	}
	var res holdResult
	select {
	case res = <-req.done:
	case <-ctx.Done():
		select {
		case res = <-req.done: // decided just in time
		default:
			// Queued behind a busy show for the whole budget: transient,
			// never stored; a repeat finds whatever the batch decided.
			return heldRecord{}, false, fmt.Errorf("%w: %w", domain.ErrContention, ctx.Err())
		}
	}
	switch {
	case res.err != nil:
		return heldRecord{}, false, res.err
	case res.intent != nil:
		h.recordedPending(ctx, run, *res.intent)
	case res.rejection != nil || res.ok:
		// The refusal, or a hold found, is recorded on the intent: record it first.
		if err := h.ensureRecorded(ctx, run); err != nil {
			return heldRecord{}, false, err
		}
	}
	if res.rejection != nil {
		return heldRecord{}, false, h.reject(ctx, run, res.rejection, "")
	}
	return res.held, res.ok, nil
}

// leadHolds appends batches for showID until its queue is empty. The leader
// runs one batch itself (the one with its own request) and hands any further
// batches to a new goroutine, so its own caller is not kept waiting.
func (h *core) leadHolds(ctx context.Context, showID string) {
	b := &h.holds
	b.mu.Lock()
	batch := b.queue[showID]
	if len(batch) > maxHoldBatch {
		b.queue[showID] = batch[maxHoldBatch:]
		batch = batch[:maxHoldBatch]
	} else {
		delete(b.queue, showID)
	}
	b.mu.Unlock()
	bctx, cancel := context.WithTimeout(h.detach(ctx), 15*time.Second)
	h.appendHoldsSafely(bctx, showID, batch)
	cancel()
	b.mu.Lock()
	if len(b.queue[showID]) == 0 {
		delete(b.running, showID)
		for id, o := range b.own {
			if !b.running[id] && time.Since(o.at) > ownHoldTrust {
				delete(b.own, id)
			}
		}
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go h.leadHolds(ctx, showID) // it detaches the batch's context itself
}

// appendHoldsSafely runs appendHolds and turns a panic into an error for
// every request of the batch, so a bug cannot leave the show's queue without
// a leader (and its requests waiting out their budget).
func (h *core) appendHoldsSafely(ctx context.Context, showID string, batch []*holdReq) {
	answered := false
	defer func() {
		if p := recover(); p != nil && !answered {
			h.log.ErrorContext(ctx, "hold batch panicked", "show_id", showID, "panic", p)
			for _, r := range batch {
				select {
				case r.done <- holdResult{err: fmt.Errorf("hold batch failed: %v", p)}:
				default:
				}
			}
		}
	}()
	h.appendHolds(ctx, showID, batch)
	answered = true
}

// holdDecision is what one pass over a batch decided: the result of every
// request not appended (already held, refused, failed), and the SeatsHeld
// to append with the requests they answer.
type holdDecision struct {
	results  map[*holdReq]holdResult
	appended []decidedHold
	data     []eventstore.EventData
	// opens are the ReservationHeld that open the reservation streams of
	// the fresh requests decided, appended with the SeatsHeld as one unit.
	opens []openedHold
	// recording are the requests decided whose intent is pending
	// (intentRun.pending): their IntentRecorded lead the unit.
	recording []*holdReq
	refusals  int
}

// openedHold is the encoded ReservationHeld that opens a fresh request's
// reservation stream, in the same unit as its SeatsHeld.
type openedHold struct {
	req  *holdReq
	data eventstore.EventData
}

// decidedHold is a request of the batch and the SeatsHeld decided for it.
type decidedHold struct {
	req  *holdReq
	held heldRecord
}

// priorHolds returns the SeatsHeld already on the show stream (as far as
// snapshot e has read it) of the batch's reservations: findHold for a
// request that is not fresh, the cache alone for one that is (its
// reservation cannot be on the stream). The caller holds the show's lock.
func (h *core) priorHolds(ctx context.Context, e *showEntry, showID string, batch []*holdReq) (map[string]heldRecord, error) {
	prior := map[string]heldRecord{}
	for _, r := range batch {
		var held heldRecord
		var ok bool
		if r.fresh {
			held, ok, _ = h.showCache.lookup(e, r.resID)
		} else {
			var err error
			if held, ok, err = h.findHold(ctx, showID, e, r.resID); err != nil {
				return nil, err
			}
		}
		if ok {
			prior[r.resID] = held
		}
	}
	return prior, nil
}

// decideHolds decides batch in arrival order against snapshot e at now, each
// request against the show as it will be after the earlier ones; prior
// holds the SeatsHeld already on the stream of its reservations
// (priorHolds). With open, the reservation streams of fresh requests are
// opened in the same unit (holdDecision.opens). The caller holds the
// show's lock; e is left as it was.
func (h *core) decideHolds(e *showEntry, prior map[string]heldRecord, showID string, batch []*holdReq, now time.Time, open bool) holdDecision {
	d := holdDecision{results: make(map[*holdReq]holdResult, len(batch))}
	byRes := map[string]heldRecord{}
	extra := 0 // seats taken by earlier requests of this batch
	for _, r := range batch {
		if held, ok := prior[r.resID]; ok {
			d.results[r] = holdResult{held: held, ok: true}
			continue
		}
		if held, ok := byRes[r.resID]; ok { // the same intent twice in one batch
			d.appended = append(d.appended, decidedHold{r, held})
			continue
		}
		if !e.show.Scheduled {
			d.results[r] = holdResult{rejection: domain.ErrShowNotFound}
			d.refusals++
			continue
		}
		e.show.Taken += extra
		evs, derr := e.show.Hold(domain.HoldSeats{ShowID: showID, ReservationID: r.resID, Actor: r.run.req.Actor,
			Intent: r.run.stream, Quantity: r.cmd.Quantity, HoldFor: h.cfg.HoldFor}, now)
		e.show.Taken -= extra
		if derr != nil {
			d.results[r] = holdResult{rejection: asDomain(derr)}
			d.refusals++
			continue
		}
		if len(evs) == 0 {
			// Its seats are held, yet its SeatsHeld was not found: decide
			// again on a fresh read (not decided, no error).
			d.results[r] = holdResult{}
			continue
		}
		id := DerivedID(r.run.cause(), "seats-held")
		m := r.run.meta(now, "")
		stampSpan(r.trace, &m)
		m.SchemaVersion = domain.SchemaVersionOf(evs[0])
		ed, err := eventstore.Encode(id, evs[0], m)
		if err != nil {
			d.results[r] = holdResult{err: err}
			continue
		}
		held := heldRecord{id: id, e: evs[0].(domain.SeatsHeld), meta: r.run.meta(now, id)}
		byRes[r.resID] = held
		extra += r.cmd.Quantity
		d.data = append(d.data, ed)
		d.appended = append(d.appended, decidedHold{r, held})
		if r.run.pending != nil {
			d.recording = append(d.recording, r)
		}
		if r.fresh && open {
			od, err := encodeOpen(held, r.trace)
			if err != nil {
				d.results[r] = holdResult{err: err}
				continue
			}
			d.opens = append(d.opens, openedHold{r, od})
		}
	}
	return d
}

// encodeOpen encodes the ReservationHeld that opens held's reservation
// stream, as openReservation appends it, kept with the request's trace.
func encodeOpen(held heldRecord, sc trace.SpanContext) (eventstore.EventData, error) {
	m := held.meta
	m.CausationID = held.id
	stampSpan(sc, &m)
	ev := domain.HeldFrom(held.e)
	m.SchemaVersion = domain.SchemaVersionOf(ev)
	return eventstore.Encode(DerivedID(held.id, "reservation-held"), ev, m)
}

// appendHolds decides a batch in arrival order and appends its SeatsHeld
// events in one unit with the ReservationHeld that open the fresh
// requests' reservation streams, led by the IntentRecorded of the requests
// whose intent is pending; every request gets its result. An intent that
// another request recorded first fails the unit on its part: its request
// is answered errIntentTaken (it answers as a repeat) and the rest decide
// again.
//
// A batch decides on the show's cached snapshot without reading the stream
// when that snapshot is the one this process's previous batch on the show
// left, within ownHoldTrust (holdBatcher.own: the stream as this process
// last wrote it).
// The snapshot is a hint: the append is at its exact revision, so a snapshot
// that missed another writer's events fails the append, and the batch reads
// the stream's tail and decides once more. A refusal (sold out, no such
// show) is only ever decided on a snapshot just read from the stream, since
// it is recorded and answered without an append to check it. A reservation
// stream that exists already fails the unit too: the batch then decides
// again without opening any (the requests open them as a follow-up).
func (h *core) appendHolds(ctx context.Context, showID string, batch []*holdReq) {
	answer := func(d holdDecision) {
		for _, r := range batch {
			r.done <- d.results[r]
		}
	}
	// The clock is read before the show's lock is taken: holds are decided
	// at a time no later than the decision, and the read is not paid while
	// every other user of the show waits.
	now, err := h.now(ctx)
	if err != nil {
		answer(failedHolds(batch, err))
		return
	}
	open := true
	for attempt := 0; ; attempt++ {
		d, exp, trusted, err := h.decideBatch(ctx, showID, batch, now, attempt == 0, open)
		if err != nil {
			answer(failedHolds(batch, err))
			return
		}
		if len(d.data) == 0 {
			answer(d)
			return
		}
		err = h.commitHolds(ctx, showID, exp, &d)
		if err == nil {
			answer(d)
			return
		}
		h.holds.mu.Lock()
		delete(h.holds.own, showID)
		h.holds.mu.Unlock()
		var part *eventstore.AppendPartError
		conflict := errors.As(err, &part) && errors.Is(err, eventstore.ErrWrongExpectedRevision)
		if conflict && part.Part < len(d.recording) {
			// Another request recorded this one's intent first: it is
			// answered as a repeat, and the rest decide again.
			taken := d.recording[part.Part]
			taken.done <- holdResult{err: errIntentTaken}
			batch = slices.DeleteFunc(slices.Clone(batch), func(r *holdReq) bool { return r == taken })
			if len(batch) == 0 {
				return
			}
			continue
		}
		if open && conflict && part.Part > len(d.recording) {
			open = false // a reservation stream exists: decide again on a read, opening none
			continue
		}
		if trusted && errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			continue // the snapshot missed another writer: read the tail, decide again
		}
		// The batch was not written (a lost race), or its outcome is still
		// unknown after repeats (503, never stored: a repeat of the request
		// or recovery learns it); refusals (sold out) may have counted seats
		// of holds that do not exist. Every request decides again or fails.
		if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			err = nil
		}
		answer(failedHolds(batch, err))
		return
	}
}

// failedHolds is the decision that answers every request of batch with err
// (nil: decide again).
func failedHolds(batch []*holdReq, err error) holdDecision {
	d := holdDecision{results: make(map[*holdReq]holdResult, len(batch))}
	for _, r := range batch {
		d.results[r] = holdResult{err: err}
	}
	return d
}

// decideBatch decides batch under the show's lock: on the cached snapshot
// when trust allows it (the first try, on the snapshot this process's last
// batch left within ownHoldTrust, and no refusal), on a fresh read of the
// stream otherwise. It returns the decision, the show stream's expected
// revision for its append, and whether it was decided on the cached
// snapshot. open is decideHolds'.
func (h *core) decideBatch(ctx context.Context, showID string, batch []*holdReq, now time.Time, first, open bool) (holdDecision, eventstore.ExpectedRevision, bool, error) {
	unlock := h.shows.Lock(showID)
	// The lock guards the cached snapshot, not the stream: it is released
	// before the append, so the requests' own checks of the show (and
	// releases) proceed while the batch commits. No other batch of this
	// show starts before this one has its outcome (holdBatcher.running),
	// and every writer of the stream appends at an expected revision:
	// whoever loses decides again.
	defer unlock()
	e := h.showCache.get(showID)
	h.holds.mu.Lock()
	own, trusted := h.holds.own[showID]
	h.holds.mu.Unlock()
	trusted = trusted && first && e.exists && e.last == own.last && time.Since(own.at) <= ownHoldTrust
	for {
		if !trusted {
			var err error
			if e, err = h.refreshShow(ctx, showID); err != nil {
				return holdDecision{}, eventstore.ExpectedRevision{}, false, err
			}
		}
		prior, err := h.priorHolds(ctx, e, showID, batch)
		if err != nil {
			return holdDecision{}, eventstore.ExpectedRevision{}, false, err
		}
		d := h.decideHolds(e, prior, showID, batch, now, open)
		if trusted && d.refusals > 0 {
			trusted = false // a refusal is decided on a fresh read only
			continue
		}
		return d, e.expected(), trusted, nil
	}
}

// commitHolds appends d's SeatsHeld to the show stream at exp with d's
// ReservationHeld, one unit led by the pending IntentRecorded of
// d.recording (appended first, so KurrentDB, appending part by part,
// writes no hold before its intent), and on success records every appended
// request's result in d (with the revision its reservation stream was
// opened at, and its intent's append) and the snapshot the batch left.
func (h *core) commitHolds(ctx context.Context, showID string, exp eventstore.ExpectedRevision, d *holdDecision) error {
	parts := make([]unitPart, 0, len(d.recording)+1+len(d.opens))
	for _, r := range d.recording {
		parts = append(parts, r.run.pending.part)
	}
	parts = append(parts, unitPart{s: expectedStream(domain.ShowStream(showID), exp), data: d.data})
	for _, o := range d.opens {
		parts = append(parts, unitPart{s: newStream(domain.ReservationStream(o.req.resID)), data: []eventstore.EventData{o.data}})
	}
	res, err := h.commitUnit(ctx, keyWrite{}, parts...)
	if err != nil {
		return err
	}
	recorded := make(map[*holdReq]*eventstore.AppendResult, len(d.recording))
	for i, r := range d.recording {
		recorded[r] = &res[i]
	}
	res = res[len(d.recording):]
	h.noteOwnHolds(showID, exp, res[0].NextRevision, d.appended)
	opened := make(map[*holdReq]eventstore.Revision, len(d.opens))
	for i, o := range d.opens {
		opened[o.req] = res[1+i].NextRevision
	}
	for _, a := range d.appended {
		held := a.held
		if rev, ok := opened[a.req]; ok {
			held.opened, held.openedAt = true, rev
		}
		d.results[a.req] = holdResult{held: held, ok: true, intent: recorded[a.req]}
	}
	return nil
}

// advanceOwn records that this process appended to show showID's stream
// right after revision prev, ending at next, and applied the append to the
// cached snapshot (a release): when the snapshot a batch left was at prev,
// it is the stream as this process last wrote it again, at next.
func (b *holdBatcher) advanceOwn(showID string, prev, next eventstore.Revision) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if o, ok := b.own[showID]; ok && o.last == prev {
		b.own[showID] = ownHolds{last: next, at: time.Now()}
	}
}

// noteOwnHolds applies a batch's appended SeatsHeld (now at revisions up to
// last of the show stream, written after exp) to the cached snapshot, unless
// the snapshot moved meanwhile (a reader brought it to the head, or it was
// evicted), and records the revision the batch left for the next batch of
// this run (holdBatcher.own).
func (h *core) noteOwnHolds(showID string, exp eventstore.ExpectedRevision, last eventstore.Revision, appended []decidedHold) {
	unlock := h.shows.Lock(showID)
	defer unlock()
	e := h.showCache.get(showID)
	if e.expected() == exp {
		seen := map[string]bool{}
		for _, a := range appended {
			if seen[a.held.e.ReservationID] {
				continue
			}
			seen[a.held.e.ReservationID] = true
			e.show.Apply(a.held.e)
			h.showCache.remember(e, a.held)
		}
		e.exists, e.last = true, last
	}
	b := &h.holds
	b.mu.Lock()
	if e.exists && e.last == last {
		b.own[showID] = ownHolds{last: last, at: time.Now()}
	} else {
		delete(b.own, showID)
	}
	b.mu.Unlock()
}
