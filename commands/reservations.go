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
func (h *Handler) ReserveSeats(ctx context.Context, req Request, cmd ReserveSeatsCommand) (domain.Reservation, Outcome, error) {
	run, err := h.beginIntent(ctx, req, cmd.Canonical(), nil, nil)
	if err != nil {
		return domain.Reservation{}, Outcome{}, err
	}
	return h.reserveSeats(ctx, run, cmd)
}

// reserveSeats runs a reservation intent from wherever it stands.
func (h *Handler) reserveSeats(ctx context.Context, run *intentRun, cmd ReserveSeatsCommand) (domain.Reservation, Outcome, error) {
	req := run.req
	out := Outcome{Replayed: !run.created}
	resID := run.targetID()
	unlock := h.shows.Lock(cmd.ShowID)
	defer unlock()
	for range h.cfg.ShowRetries {
		res, err := h.loadReservation(ctx, resID)
		if err != nil {
			return domain.Reservation{}, out, err
		}
		if res.Exists() {
			return res, out, nil
		}
		show, s, err := h.LoadShow(ctx, cmd.ShowID)
		if err != nil {
			return domain.Reservation{}, out, err
		}
		if held, ok := heldEvent(s, resID); ok {
			// Committed; finish the follow-up.
			if err := h.ensureReservationHeld(ctx, held); err != nil {
				return domain.Reservation{}, out, err
			}
			continue
		}
		if err := h.awaitExecutor(ctx, run, func() (bool, error) {
			_, s, err := h.LoadShow(ctx, cmd.ShowID)
			if err != nil {
				return false, err
			}
			_, ok := heldEvent(s, resID)
			return ok, nil
		}); err != nil {
			if errors.Is(err, errRetry) {
				continue
			}
			return domain.Reservation{}, out, err
		}
		if !show.Scheduled {
			return domain.Reservation{}, out, h.reject(ctx, run, domain.ErrShowNotFound, "")
		}
		now, err := h.now(ctx)
		if err != nil {
			return domain.Reservation{}, out, err
		}
		evs, err := show.Hold(domain.HoldSeats{ShowID: cmd.ShowID, ReservationID: resID, Actor: req.Actor,
			Intent: run.stream, Quantity: cmd.Quantity, HoldFor: h.cfg.HoldFor}, now)
		if err != nil {
			return domain.Reservation{}, out, h.reject(ctx, run, asDomain(err), "")
		}
		id := DerivedID(run.stream, "seats-held")
		_, err = h.appendEvents(ctx, s.name, s.expected(), run.meta(now, ""), pending{id, evs[0]})
		if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			continue
		}
		if err != nil {
			return domain.Reservation{}, out, err
		}
		h.step("reservation.held")
		held := evs[0].(domain.SeatsHeld)
		if err := h.ensureReservationHeld(ctx, heldRecord{id: id, e: held, meta: run.meta(now, id)}); err != nil {
			return domain.Reservation{}, out, err
		}
	}
	h.metrics.Contention()
	return domain.Reservation{}, out, domain.ErrContention
}

// heldRecord is a SeatsHeld event with its id and metadata.
type heldRecord struct {
	id   string
	e    domain.SeatsHeld
	meta eventstore.Metadata
}

// heldEvent finds the SeatsHeld of reservation resID in a loaded show stream.
func heldEvent(s *stream, resID string) (heldRecord, bool) {
	for i, e := range s.events {
		if h, ok := e.(domain.SeatsHeld); ok && h.ReservationID == resID {
			m, _ := eventstore.DecodeMetadata(s.records[i].Metadata)
			return heldRecord{id: s.records[i].ID, e: h, meta: m}, true
		}
	}
	return heldRecord{}, false
}

// ensureReservationHeld is the follow-up of SeatsHeld: it opens the
// reservation stream with a deterministic event id (a repeat is a no-op).
func (h *Handler) ensureReservationHeld(ctx context.Context, held heldRecord) error {
	m := held.meta
	m.CausationID = held.id
	_, err := h.appendEvents(ctx, domain.ReservationStream(held.e.ReservationID), eventstore.NoStream(), m,
		pending{DerivedID(held.id, "reservation-held"), domain.HeldFrom(held.e)})
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return nil // already opened
	}
	return err
}

func (h *Handler) loadReservation(ctx context.Context, id string) (domain.Reservation, error) {
	r, _, err := h.loadReservationStream(ctx, id)
	return r, err
}

func (h *Handler) loadReservationStream(ctx context.Context, id string) (domain.Reservation, *stream, error) {
	s, err := h.load(ctx, domain.ReservationStream(id))
	if err != nil {
		return domain.Reservation{}, nil, err
	}
	var r domain.Reservation
	for _, e := range s.events {
		r.Apply(e)
	}
	return r, s, nil
}

// GetReservation returns the caller's reservation, strongly consistent.
// Returns domain.ErrReservationNotFound also for another actor's.
func (h *Handler) GetReservation(ctx context.Context, actor, id string) (domain.Reservation, error) {
	r, err := h.loadReservation(ctx, id)
	if err != nil {
		return domain.Reservation{}, err
	}
	if !r.Exists() || r.Actor != actor {
		return domain.Reservation{}, domain.ErrReservationNotFound
	}
	return r, nil
}

// appendFollowUp appends derived events to a stream read just before,
// retrying on a revision conflict: decide is called with the fresh stream
// and returns the events to append (none when already done).
func (h *Handler) appendFollowUp(ctx context.Context, name string, m eventstore.Metadata, decide func(s *stream) []pending) error {
	for range 10 {
		s, err := h.load(ctx, name)
		if err != nil {
			return err
		}
		evs := decide(s)
		if len(evs) == 0 {
			return nil
		}
		now, err := h.now(ctx)
		if err != nil {
			return err
		}
		m.OccurredAt = now
		_, err = h.appendEvents(ctx, name, s.expected(), m, evs...)
		if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			time.Sleep(time.Millisecond)
			continue
		}
		return err
	}
	return fmt.Errorf("follow-up on %s: %w", name, domain.ErrContention)
}
