package domain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Limits on show and reservation commands.
const (
	MaxCapacity     = 1_000_000 // seats per show
	MaxSeatsPerHold = 20        // seats per reservation
	MaxNameLength   = 200       // characters of a show name: Unicode code points as sent, not normalized
	MaxAmountMinor  = 1<<53 - 1 // largest money amount (minor units), JSON-safe
)

// Show is the state of a show stream: its schedule and capacity, and the
// seats held by each live reservation. The zero Show is a show that does not
// exist yet. Show is not safe for concurrent use.
type Show struct {
	ID        string
	Name      string
	StartsAt  time.Time
	Capacity  int
	Price     Money
	Scheduled bool
	// Holds maps each reservation whose seats are not released to its seat count.
	Holds map[string]int
	// Taken is the sum of Holds.
	Taken int
}

// Available returns the number of seats neither held nor ordered.
func (s *Show) Available() int { return s.Capacity - s.Taken }

// ScheduleShow is the command to create a show.
type ScheduleShow struct {
	ShowID   string
	Name     string
	StartsAt time.Time
	Capacity int
	Price    Money
}

// Schedule decides ScheduleShow. Returns ErrShowExists if the show exists,
// or an Invalid error for a bad name, capacity, price or a start in the past
// (by now).
func (s *Show) Schedule(cmd ScheduleShow, now time.Time) ([]Event, error) {
	if s.Scheduled {
		return nil, ErrShowExists
	}
	if err := validateShow(cmd, now); err != nil {
		return nil, err
	}
	return []Event{ShowScheduled{
		ShowID: cmd.ShowID, Name: cmd.Name, StartsAt: cmd.StartsAt.UTC(),
		Capacity: cmd.Capacity, Price: cmd.Price,
	}}, nil
}

// validateShow names every invalid member of cmd at once, as one Invalid
// error (joinInvalid), or returns nil.
func validateShow(cmd ScheduleShow, now time.Time) error {
	var errs []*Error
	switch {
	case strings.TrimSpace(cmd.Name) == "" || len([]rune(cmd.Name)) > MaxNameLength:
		errs = append(errs, invalidField("name", fmt.Sprintf("name must have 1 to %d characters and not be blank", MaxNameLength)))
	case strings.ContainsFunc(cmd.Name, unicode.IsControl):
		// Read models keep names in PostgreSQL text, which cannot hold U+0000:
		// such a name would stop the shows projection at its event forever.
		errs = append(errs, invalidField("name", "name must not contain control characters (U+0000–U+001F, U+007F–U+009F)"))
	}
	if cmd.Capacity < 1 || cmd.Capacity > MaxCapacity {
		errs = append(errs, invalidField("capacity", fmt.Sprintf("capacity must be between 1 and %d", MaxCapacity)))
	}
	if cmd.Price.Amount < 1 || cmd.Price.Amount > MaxAmountMinor/MaxSeatsPerHold {
		// Free tickets would need an order path without payment; until then a
		// show has a price, and every reservation's total stays JSON-safe.
		errs = append(errs, invalidField("price.amount", fmt.Sprintf("price.amount must be an integer of minor units from 1 to %d", MaxAmountMinor/MaxSeatsPerHold)))
	}
	var price *Error
	if errors.As(CheckPrice("price", cmd.Price), &price) && !slices.Contains(fieldsOf(errs), price.Fields[0]) {
		errs = append(errs, price)
	}
	if !cmd.StartsAt.After(now) {
		errs = append(errs, invalidField("starts_at", "starts_at must be in the future"))
	}
	return joinInvalid(errs)
}

// joinInvalid returns nil for no errors, the one error, or one Invalid
// error whose message joins theirs with "; " and whose Fields are theirs,
// in order.
func joinInvalid(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Msg
	}
	return &Error{Kind: Invalid, Code: ErrInvalid.Code, Msg: strings.Join(msgs, "; "), Fields: fieldsOf(errs)}
}

// fieldsOf returns the fields errs name, in order.
func fieldsOf(errs []*Error) []string {
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Fields...)
	}
	return fields
}

func invalidField(field, msg string) *Error {
	return &Error{Kind: Invalid, Code: "invalid-request", Msg: msg, Fields: []string{field}}
}

// HoldSeats is the command to hold Quantity seats for a new reservation.
type HoldSeats struct {
	ShowID        string
	ReservationID string
	Actor         string
	Intent        string
	Quantity      int
	HoldFor       time.Duration // how long the hold lasts before it expires
}

// Hold decides HoldSeats against the show's capacity. It returns no events if
// the reservation already holds seats (a repeat). Returns ErrShowNotFound,
// ErrShowStarted, ErrSoldOut, or an Invalid error for a bad quantity.
func (s *Show) Hold(cmd HoldSeats, now time.Time) ([]Event, error) {
	if !s.Scheduled {
		return nil, ErrShowNotFound
	}
	if _, ok := s.Holds[cmd.ReservationID]; ok {
		return nil, nil
	}
	if cmd.Quantity < 1 || cmd.Quantity > MaxSeatsPerHold {
		return nil, invalidField("quantity", fmt.Sprintf("quantity must be between 1 and %d", MaxSeatsPerHold))
	}
	if err := s.AcceptsOrders(now); err != nil {
		return nil, err
	}
	if s.Available() < cmd.Quantity {
		return nil, ErrSoldOut.With(fmt.Sprintf("%d seat(s) requested, %d available", cmd.Quantity, s.Available()))
	}
	return []Event{SeatsHeld{
		ShowID: s.ID, ReservationID: cmd.ReservationID, Actor: cmd.Actor, Intent: cmd.Intent,
		Quantity: cmd.Quantity, Amount: s.Price.Times(cmd.Quantity), ExpiresAt: now.Add(cmd.HoldFor).UTC(),
	}}, nil
}

// Release decides the release of a reservation's seats. It returns no events
// if the reservation holds no seats (never held, or already released), so a
// repeated release is a no-op.
func (s *Show) Release(reservationID, reason string) []Event {
	q, ok := s.Holds[reservationID]
	if !ok {
		return nil
	}
	return []Event{SeatsReleased{ShowID: s.ID, ReservationID: reservationID, Quantity: q, Reason: reason}}
}

// Apply evolves the show by one event of its stream; other events are ignored.
func (s *Show) Apply(e Event) {
	switch e := e.(type) {
	case ShowScheduled:
		s.ID, s.Name, s.StartsAt, s.Capacity, s.Price, s.Scheduled = e.ShowID, e.Name, e.StartsAt, e.Capacity, e.Price, true
		if s.Holds == nil {
			s.Holds = map[string]int{}
		}
	case SeatsHeld:
		if s.Holds == nil {
			s.Holds = map[string]int{}
		}
		if _, ok := s.Holds[e.ReservationID]; !ok {
			s.Holds[e.ReservationID] = e.Quantity
			s.Taken += e.Quantity
		}
	case SeatsReleased:
		if q, ok := s.Holds[e.ReservationID]; ok {
			delete(s.Holds, e.ReservationID)
			s.Taken -= q
		}
	}
}

// AcceptsOrders returns nil while the show has not started at now, and
// ErrShowStarted from its start on: no reservation is held and no order
// placed for a show that has begun.
func (s Show) AcceptsOrders(now time.Time) error {
	if !now.Before(s.StartsAt) {
		return ErrShowStarted
	}
	return nil
}
