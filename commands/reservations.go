package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// ReserveSeatsCommand is the normalized body of POST /v1/reservations.
type ReserveSeatsCommand struct {
	ShowID   string
	Quantity int
}

// Canonical returns the normalized command fingerprinted for the intent.
func (c ReserveSeatsCommand) Canonical() map[string]any {
	return map[string]any{"show_id": c.ShowID, "quantity": int64(c.Quantity)}
}

// ReserveSeats holds seats of a show for the caller. The commit point is
// SeatsHeld on the show stream (capacity is checked there); the reservation
// stream follows. Returns the reservation and how it was answered. Definitive
// refusals (show not found, sold out, show started) are *Rejection and are
// answered the same to every repeat; domain.ErrContention (503) when bounded
// retries on the show stream run out, never stored.
func (h *Commands) ReserveSeats(ctx context.Context, req Request, cmd ReserveSeatsCommand) (domain.Reservation, Outcome, error) {
	// An absent show is refused before the intent is recorded: a probe
	// writes nothing and leaves the key unused.
	visible := func(time.Time) error {
		_, err := h.scheduledShow(ctx, cmd.ShowID)
		return err
	}
	run, err := h.beginDeferred(ctx, req, cmd.Canonical(), nil, visible)
	if err != nil {
		return domain.Reservation{}, Outcome{}, err
	}
	if p := run.pending; p != nil {
		defer h.inflight.release(run.stream, p.flight) // whatever became of the hold
	}
	res, out, err := h.reserveSeats(run.context(ctx), run, cmd)
	if errors.Is(err, errIntentTaken) {
		// Another request recorded the intent first: answer as its repeat.
		if run, err = h.resolveTaken(ctx, run); err != nil {
			return domain.Reservation{}, Outcome{}, err
		}
		return h.reserveSeats(run.context(ctx), run, cmd)
	}
	return res, out, err
}

// reserveSeats runs a reservation intent from wherever it stands. A request
// that has just recorded the intent, alone on it, or whose intent the hold
// batch records (intentRun.pending), knows that neither the reservation nor
// its hold exists: it goes straight to the hold, the first time; every
// other try records a pending intent alone first (ensureRecorded:
// errIntentTaken when another request recorded it first) and finds out
// how far the intent got (reservationSoFar).
func (h *core) reserveSeats(ctx context.Context, run *intentRun, cmd ReserveSeatsCommand) (domain.Reservation, Outcome, error) {
	out := Outcome{Replayed: !run.created}
	var res domain.Reservation
	alone := run.alone(h.cfg.IntentLease)
	err := h.retryConflicts(ctx, func() error {
		trusted := alone
		alone = false
		if !trusted {
			if err := h.ensureRecorded(ctx, run); err != nil {
				return err
			}
			r, done, err := h.reservationSoFar(ctx, run, cmd)
			if err != nil || done {
				res = r
				return err
			}
		}
		var err error
		res, err = h.holdAndOpen(ctx, run, cmd, trusted)
		return err
	})
	if errors.Is(err, domain.ErrContention) {
		h.metrics.Contention()
	}
	if err != nil {
		return domain.Reservation{}, out, err
	}
	return res, out, nil
}

// reservationSoFar reads how far the run's reservation got: opened (done,
// the reservation), held on the show stream (its follow-up finished, then
// done), or neither, when a repeat waits for the executor first
// (awaitExecutor) and the caller then holds the seats itself.
func (h *core) reservationSoFar(ctx context.Context, run *intentRun, cmd ReserveSeatsCommand) (domain.Reservation, bool, error) {
	resID := run.targetID()
	res, err := h.loadReservation(ctx, resID)
	if err != nil || res.Exists() {
		return res, err == nil, err
	}
	// committed reports the reservation's SeatsHeld if the show stream has it.
	committed := func() (heldRecord, bool, error) {
		unlock := h.shows.Lock(cmd.ShowID)
		defer unlock()
		e, err := h.refreshShow(ctx, cmd.ShowID)
		if err != nil {
			return heldRecord{}, false, err
		}
		return h.findHold(ctx, cmd.ShowID, e, resID)
	}
	held, ok, err := committed()
	if err != nil {
		return domain.Reservation{}, false, err
	}
	if ok {
		// Committed; finish the follow-up, then read the reservation.
		if err := h.ensureReservationHeld(ctx, held); err != nil {
			return domain.Reservation{}, false, err
		}
		return h.openedOnRead(ctx, resID)
	}
	return domain.Reservation{}, false, h.awaitExecutor(ctx, run, func() (bool, error) {
		_, ok, err := committed()
		return ok, err
	})
}

// openedOnRead reads reservation id: done when its stream exists, errRetry
// otherwise.
func (h *core) openedOnRead(ctx context.Context, id string) (domain.Reservation, bool, error) {
	res, err := h.loadReservation(ctx, id)
	if err == nil && !res.Exists() {
		err = errRetry
	}
	return res, err == nil, err
}

// holdAndOpen holds the run's seats on the show stream (the commit point,
// batched: holdSeats) and opens its reservation stream: in the hold's own
// unit when the batch could (a fresh request), else as the hold's
// follow-up. trusted is holdReq.fresh. errRetry after a lost race.
func (h *core) holdAndOpen(ctx context.Context, run *intentRun, cmd ReserveSeatsCommand, trusted bool) (domain.Reservation, error) {
	resID := run.targetID()
	h.step(ctx, "reservation.holding")
	held, decided, err := h.holdSeats(ctx, run, cmd, resID, trusted)
	if err != nil {
		return domain.Reservation{}, err
	}
	if !decided {
		return domain.Reservation{}, errRetry // lost a race on the show stream: decide again
	}
	h.step(ctx, "reservation.held")
	if held.opened {
		// The batch opened the reservation stream with the hold.
		return h.openedReservation(held), nil
	}
	if trusted && run.alone(h.cfg.IntentLease) {
		// Still alone: the hold is this request's own, and the
		// reservation stream, derived from it, holds what it opens.
		res, err := h.openReservation(ctx, held)
		if !errors.Is(err, errRetry) {
			return res, err
		}
	} else if err := h.ensureReservationHeld(ctx, held); err != nil {
		return domain.Reservation{}, err
	}
	res, _, err := h.openedOnRead(ctx, resID)
	return res, err
}

// heldRecord is a SeatsHeld event with its id and metadata. opened is
// true when the hold batch opened the reservation stream in the same unit
// (ReservationHeld at revision openedAt).
type heldRecord struct {
	id       string
	e        domain.SeatsHeld
	meta     eventstore.Metadata
	opened   bool
	openedAt eventstore.Revision
}

// ensureReservationHeld is the follow-up of SeatsHeld: it opens the
// reservation stream with a deterministic event id (a repeat is a no-op).
func (h *core) ensureReservationHeld(ctx context.Context, held heldRecord) error {
	m := held.meta
	m.CausationID = held.id
	_, err := h.commit(ctx, newStream(domain.ReservationStream(held.e.ReservationID)), m,
		pending{DerivedID(held.id, "reservation-held"), domain.HeldFrom(held.e)})
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return nil // already opened
	}
	return err
}

// openReservation is ensureReservationHeld for a request alone on its
// intent: it returns the reservation the stream holds after the append
// without reading it (the event is derived from held, so whoever wrote it
// first wrote the same), and caches it. errRetry when the stream held
// something else (read it).
func (h *core) openReservation(ctx context.Context, held heldRecord) (domain.Reservation, error) {
	m := held.meta
	m.CausationID = held.id
	ev := domain.HeldFrom(held.e)
	name := domain.ReservationStream(held.e.ReservationID)
	res, err := h.commit(ctx, newStream(name), m, pending{DerivedID(held.id, "reservation-held"), ev})
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return domain.Reservation{}, errRetry
	}
	if err != nil {
		return domain.Reservation{}, err
	}
	var r domain.Reservation
	r.Apply(ev)
	h.reservations.put(name, r, res.NextRevision)
	return r, nil
}

// openedReservation is the reservation a hold batch opened with held (its
// ReservationHeld appended in the same unit as the hold), cached at the
// revision the unit left.
func (h *core) openedReservation(held heldRecord) domain.Reservation {
	var r domain.Reservation
	r.Apply(domain.HeldFrom(held.e))
	h.reservations.put(domain.ReservationStream(held.e.ReservationID), r, held.openedAt)
	return r
}

func (h *core) loadReservation(ctx context.Context, id string) (domain.Reservation, error) {
	r, _, err := h.loadReservationStream(ctx, id)
	return r, err
}

// loadReservationStream reads reservation id's stream (and caches what it
// found).
func (h *core) loadReservationStream(ctx context.Context, id string) (domain.Reservation, *stream, error) {
	r, s, err := loadState[domain.Reservation](ctx, h, domain.ReservationStream(id))
	if err == nil && s.exists {
		h.reservations.put(s.name, r, s.last)
	}
	return r, s, err
}

// cachedReservation returns reservation id as this process last wrote or
// read it, reading the stream only when it is not cached. A hint (see
// streamCache): only for decisions that depend on what ReservationHeld
// fixed, or that an append at the returned revision fences.
func (h *core) cachedReservation(ctx context.Context, id string) (domain.Reservation, *stream, error) {
	name := domain.ReservationStream(id)
	if r, last, ok := h.reservations.get(name); ok {
		return r, &stream{name: name, exists: true, last: last}, nil
	}
	return h.loadReservationStream(ctx, id)
}

// GetReservation returns the caller's reservation, strongly consistent.
// Returns domain.ErrReservationNotFound also for another actor's.
func (h *Queries) GetReservation(ctx context.Context, actor, id string) (domain.Reservation, error) {
	r, err := h.loadReservation(ctx, id)
	if err != nil {
		return domain.Reservation{}, err
	}
	if !r.Exists() || r.Actor != actor {
		return domain.Reservation{}, domain.ErrReservationNotFound
	}
	return r, nil
}

// appendFollowUp appends derived events to a stream with update (see the
// retry policy in update.go): decide is called with the fresh stream and
// returns the events to append (none when already done), with metadata m.
func (h *core) appendFollowUp(ctx context.Context, name string, m eventstore.Metadata, decide func(s *stream) []pending) error {
	_, err := h.update(ctx, name, func(s *stream) (change, error) {
		return change{events: decide(s), meta: m}, nil
	})
	if errors.Is(err, domain.ErrContention) {
		return fmt.Errorf("follow-up on %s: %w", name, err)
	}
	return err
}
