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

// maxHoldBatch bounds how many reservations one append to a show stream
// decides, so one failed batch costs few retries.
const maxHoldBatch = 64

// holdReq is one reservation waiting for the show stream's next append.
type holdReq struct {
	run   *intentRun
	cmd   ReserveSeatsCommand
	resID string
	done  chan holdResult
}

// holdResult is what the batch decided for one request: the SeatsHeld (ok),
// a definitive refusal to record (rejection), a lost race to retry
// (neither), or a dependency error.
type holdResult struct {
	held      heldRecord
	ok        bool
	rejection *domain.Error
	err       error
}

// holdBatcher is a per-show group commit of seat holds: while one batch is
// being appended to a show stream, new requests queue; the next batch decides
// them in arrival order against the show's capacity and appends all their
// SeatsHeld events in one append at the expected revision. On an on-sale the
// show stream's append rate, not the request rate, bounds throughput; this
// turns N holds into one round trip and one commit. Safe for concurrent use.
type holdBatcher struct {
	mu      sync.Mutex
	queue   map[string][]*holdReq
	running map[string]bool
}

// holdSeats is the read-decide-append of a reservation on the show stream,
// batched with concurrent reservations of the same show (see holdBatcher).
// It returns the appended SeatsHeld, or decided false after a revision
// conflict (another replica appended first), or the recorded *Rejection.
func (h *Handler) holdSeats(ctx context.Context, run *intentRun, cmd ReserveSeatsCommand, resID string) (heldRecord, bool, error) {
	req := &holdReq{run: run, cmd: cmd, resID: resID, done: make(chan holdResult, 1)}
	b := &h.holds
	b.mu.Lock()
	if b.queue == nil {
		b.queue, b.running = map[string][]*holdReq{}, map[string]bool{}
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
	case res.rejection != nil:
		return heldRecord{}, false, h.reject(ctx, run, res.rejection, "")
	}
	return res.held, res.ok, nil
}

// leadHolds appends batches for showID until its queue is empty. The leader
// runs one batch itself (the one with its own request) and hands any further
// batches to a new goroutine, so its own caller is not kept waiting.
func (h *Handler) leadHolds(ctx context.Context, showID string) {
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
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	h.appendHoldsSafely(bctx, showID, batch)
	cancel()
	b.mu.Lock()
	if len(b.queue[showID]) == 0 {
		delete(b.running, showID)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go h.leadHolds(context.WithoutCancel(ctx), showID)
}

// appendHoldsSafely runs appendHolds and turns a panic into an error for
// every request of the batch, so a bug cannot leave the show's queue without
// a leader (and its requests waiting out their budget).
func (h *Handler) appendHoldsSafely(ctx context.Context, showID string, batch []*holdReq) {
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

// appendHolds decides a batch in arrival order and appends its SeatsHeld
// events in one append; every request gets its result.
func (h *Handler) appendHolds(ctx context.Context, showID string, batch []*holdReq) {
	fail := func(err error) {
		for _, r := range batch {
			r.done <- holdResult{err: err}
		}
	}
	unlock := h.shows.Lock(showID)
	defer unlock()
	e, err := h.refreshShow(ctx, showID)
	if err != nil {
		fail(err)
		return
	}
	now, err := h.now(ctx)
	if err != nil {
		fail(err)
		return
	}
	type decided struct {
		req  *holdReq
		held heldRecord
	}
	var (
		results  = make(map[*holdReq]holdResult, len(batch))
		appended []decided
		data     []eventstore.EventData
		byRes    = map[string]heldRecord{}
		extra    int // seats taken by earlier requests of this batch
	)
	for _, r := range batch {
		if held, ok := e.held[r.resID]; ok {
			results[r] = holdResult{held: held, ok: true}
			continue
		}
		if held, ok := byRes[r.resID]; ok { // the same intent twice in one batch
			appended = append(appended, decided{r, held})
			continue
		}
		if !e.show.Scheduled {
			results[r] = holdResult{rejection: domain.ErrShowNotFound}
			continue
		}
		// Decide against the show as it will be after the earlier requests.
		e.show.Taken += extra
		evs, derr := e.show.Hold(domain.HoldSeats{ShowID: showID, ReservationID: r.resID, Actor: r.run.req.Actor,
			Intent: r.run.stream, Quantity: r.cmd.Quantity, HoldFor: h.cfg.HoldFor}, now)
		e.show.Taken -= extra
		if derr != nil {
			results[r] = holdResult{rejection: asDomain(derr)}
			continue
		}
		id := DerivedID(r.run.stream, "seats-held")
		m := r.run.meta(now, "")
		m.SchemaVersion = domain.SchemaVersionOf(evs[0])
		d, err := eventstore.Encode(id, evs[0], m)
		if err != nil {
			results[r] = holdResult{err: err}
			continue
		}
		held := heldRecord{id: id, e: evs[0].(domain.SeatsHeld), meta: r.run.meta(now, id)}
		byRes[r.resID] = held
		extra += r.cmd.Quantity
		data = append(data, d)
		appended = append(appended, decided{r, held})
	}
	if len(data) > 0 {
		_, err := h.appendResolving(ctx, domain.ShowStream(showID), e.expected(), data...)
		if err == nil {
			for _, d := range appended {
				results[d.req] = holdResult{held: d.held, ok: true}
			}
		} else {
			// The batch was not written (a lost race), or its outcome is
			// still unknown after repeats (503, never stored: a repeat of
			// the request or recovery learns it); refusals (sold out) may
			// have counted seats of holds that do not exist. Every request
			// decides again or fails.
			for _, r := range batch {
				if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
					results[r] = holdResult{}
				} else {
					results[r] = holdResult{err: err}
				}
			}
		}
	}
	for _, r := range batch {
		r.done <- results[r]
	}
}
