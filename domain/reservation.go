package domain

import "time"

// Reservation statuses, as shown by the API.
const (
	ReservationStatusHeld     = "held"
	ReservationStatusOrdered  = "ordered"
	ReservationStatusExpired  = "expired"
	ReservationStatusReleased = "released"
)

// Reservation is the state of a reservation stream. The zero Reservation does
// not exist. Not safe for concurrent use.
type Reservation struct {
	ID        string
	ShowID    string
	Actor     string
	Quantity  int
	Amount    Money
	ExpiresAt time.Time
	Status    string
	OrderID   string
}

// Exists reports whether the reservation stream has been opened.
func (r *Reservation) Exists() bool { return r.Status != "" }

// Apply evolves the reservation by one event; other events are ignored.
func (r *Reservation) Apply(e Event) {
	switch e := e.(type) {
	case ReservationHeld:
		*r = Reservation{ID: e.ReservationID, ShowID: e.ShowID, Actor: e.Actor, Quantity: e.Quantity,
			Amount: e.Amount, ExpiresAt: e.ExpiresAt, Status: ReservationStatusHeld}
	case ReservationOrdered:
		r.Status, r.OrderID = ReservationStatusOrdered, e.OrderID
	case ReservationExpired:
		r.Status = ReservationStatusExpired
	case ReservationReleased:
		r.Status = ReservationStatusReleased
	}
}

// HeldFrom derives the reservation stream's first event from the show
// stream's commit point.
func HeldFrom(e SeatsHeld) ReservationHeld {
	return ReservationHeld{ReservationID: e.ReservationID, ShowID: e.ShowID, Actor: e.Actor,
		Quantity: e.Quantity, Amount: e.Amount, ExpiresAt: e.ExpiresAt}
}

// MarkOrdered decides the follow-up of an order claim on the reservation
// stream: no events if it is already marked.
func (r *Reservation) MarkOrdered(orderID string) []Event {
	if r.Status != ReservationStatusHeld {
		return nil
	}
	return []Event{ReservationOrdered{ReservationID: r.ID, OrderID: orderID}}
}

// MarkExpired decides the follow-up of an expiry claim: no events if it is
// already expired.
func (r *Reservation) MarkExpired() []Event {
	if r.Status != ReservationStatusHeld {
		return nil
	}
	return []Event{ReservationExpired{ReservationID: r.ID}}
}

// MarkReleased decides the follow-up of a failed or cancelled order.
// A reservation still marked held (its order's follow-up not done yet) is
// released too, so MarkOrdered can never afterwards mark a failed order's
// reservation as ordered.
func (r *Reservation) MarkReleased(orderID, reason string) []Event {
	if r.Status != ReservationStatusOrdered && r.Status != ReservationStatusHeld {
		return nil
	}
	return []Event{ReservationReleased{ReservationID: r.ID, OrderID: orderID, Reason: reason}}
}

// Claim kinds of a reservation's uniqueness stream.
const (
	ClaimNone       = ""
	ClaimKindOrder  = "order"
	ClaimKindExpiry = "expiry"
)

// Claim is the state of a reservation's uniqueness stream: who decided the
// reservation's fate first. It is permanent.
type Claim struct {
	Kind    string
	OrderID string
	Actor   string
	Intent  string
	Order   OrderClaimed
}

// Apply evolves the claim; only the stream's first event counts.
func (c *Claim) Apply(e Event) {
	if c.Kind != ClaimNone {
		return
	}
	switch e := e.(type) {
	case OrderClaimed:
		c.Kind, c.OrderID, c.Actor, c.Intent, c.Order = ClaimKindOrder, e.OrderID, e.Actor, e.Intent, e
	case ExpiryClaimed:
		c.Kind = ClaimKindExpiry
	}
}

// ClaimOrder is the command to claim a reservation for a new order.
type ClaimOrder struct {
	ReservationID string
	OrderID       string
	Actor         string
	Intent        string
}

// DecideClaim decides an order claim on a reservation's uniqueness stream.
//
// It returns the OrderClaimed event to append at no stream; no events and no
// error if this intent's order (same order id: intent streams are reused after a purge, order ids never) already holds the claim; ErrReservationNotFound if the
// reservation does not exist or is another actor's;
// ErrReservationAlreadyOrdered if another order holds it;
// ErrReservationExpired if an expiry claim holds it. If the hold has expired
// by now and nothing claimed it yet, it returns the ExpiryClaimed event to
// append together with ErrReservationExpired: the caller writes the expiry
// claim itself, then refuses.
func DecideClaim(c Claim, r Reservation, cmd ClaimOrder, now time.Time) ([]Event, error) {
	if !r.Exists() || r.Actor != cmd.Actor {
		return nil, ErrReservationNotFound
	}
	switch c.Kind {
	case ClaimKindOrder:
		if c.OrderID == cmd.OrderID {
			return nil, nil
		}
		return nil, ErrReservationAlreadyOrdered
	case ClaimKindExpiry:
		return nil, ErrReservationExpired
	}
	if !now.Before(r.ExpiresAt) {
		return []Event{ExpiryClaimed{ReservationID: r.ID, ShowID: r.ShowID, Quantity: r.Quantity}}, ErrReservationExpired
	}
	return []Event{OrderClaimed{ReservationID: r.ID, OrderID: cmd.OrderID, ShowID: r.ShowID, Actor: cmd.Actor,
		Intent: cmd.Intent, Quantity: r.Quantity, Amount: r.Amount}}, nil
}

// DecideExpiry decides the expiry job's claim: the ExpiryClaimed event if the
// hold has expired by now and nothing claimed the reservation, else nothing.
func DecideExpiry(c Claim, r Reservation, now time.Time) []Event {
	if c.Kind != ClaimNone || !r.Exists() || now.Before(r.ExpiresAt) {
		return nil
	}
	return []Event{ExpiryClaimed{ReservationID: r.ID, ShowID: r.ShowID, Quantity: r.Quantity}}
}
