package domain_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/retrysafe/booking/domain"
)

// givenShow is the ShowScheduled of the fixture show with capacity seats.
func givenShow(capacity int) domain.ShowScheduled {
	return domain.ShowScheduled{ShowID: fixShowID, Name: "Café Concert", StartsAt: showStart, Capacity: capacity, Price: showPrice}
}

// givenHeld is the SeatsHeld of q seats of the fixture show for reservation res.
func givenHeld(res string, q int) domain.SeatsHeld {
	return domain.SeatsHeld{ShowID: fixShowID, ReservationID: res, Actor: fixActor, Intent: fixIntent,
		Quantity: q, Amount: showPrice.Times(q), ExpiresAt: showNow.Add(15 * time.Minute)}
}

// givenReleased is the SeatsReleased of q seats of reservation res.
func givenReleased(res string, q int) domain.SeatsReleased {
	return domain.SeatsReleased{ShowID: fixShowID, ReservationID: res, Quantity: q, Reason: domain.ReleaseExpired}
}

// showFrom returns the show after applying events to the zero Show.
func showFrom(events ...domain.Event) *domain.Show {
	s := replay[domain.Show](events...)
	return &s
}

// eventsEqual compares event slices, treating nil and empty alike.
var eventsEqual = cmpopts.EquateEmpty()

func TestShowSchedule(t *testing.T) {
	t.Parallel()
	valid := domain.ScheduleShow{ShowID: fixShowID, Name: "Café Concert", StartsAt: showStart, Capacity: 120, Price: showPrice}
	with := func(f func(c *domain.ScheduleShow)) domain.ScheduleShow {
		c := valid
		f(&c)
		return c
	}
	accepted := func(c domain.ScheduleShow) []domain.Event {
		return []domain.Event{domain.ShowScheduled{ShowID: c.ShowID, Name: c.Name, StartsAt: c.StartsAt.UTC(), Capacity: c.Capacity, Price: c.Price}}
	}
	var (
		badName = invalid("name", "name must have 1 to 200 characters and not be blank")
		// badNameControl is the refusal of a name with a control character.
		badNameControl = invalid("name", "name must not contain control characters (U+0000–U+001F, U+007F–U+009F)")
		badCapacity    = invalid("capacity", "capacity must be between 1 and 1000000")
		badAmount      = invalid("price.amount", "price.amount must be an integer of minor units from 1 to 450359962737049")
		badCurrency    = invalid("price.currency", "price.currency must be an active ISO 4217 code, in upper case, of a currency that card payments are taken in, such as EUR")
		badStart       = invalid("starts_at", "starts_at must be in the future")
	)
	type tc = decideCase[domain.ScheduleShow]
	tests := []tc{
		{name: "A valid show is scheduled.", when: valid, now: showNow, want: accepted(valid)},
		{name: "A show that is already scheduled cannot be scheduled again.",
			given: []domain.Event{givenShow(10)}, when: valid, now: showNow, wantErr: domain.ErrShowExists},
		{name: "A show that is already scheduled is reported as existing before its command is validated.",
			given: []domain.Event{givenShow(10)}, when: with(func(c *domain.ScheduleShow) { c.Name = "" }), now: showNow, wantErr: domain.ErrShowExists},

		{name: "An empty name is refused.", when: with(func(c *domain.ScheduleShow) { c.Name = "" }), now: showNow, wantErr: badName},
		{name: "A name of one character is accepted.", when: with(func(c *domain.ScheduleShow) { c.Name = "X" }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Name = "X" }))},
		{name: "A name of exactly 200 multi-byte characters is accepted because length counts characters, not bytes.",
			when: with(func(c *domain.ScheduleShow) { c.Name = strings.Repeat("é", 200) }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Name = strings.Repeat("é", 200) }))},
		{name: "A name with U+0000 is refused (PostgreSQL text cannot hold it).", when: with(func(c *domain.ScheduleShow) { c.Name = "Concert\x00" }), now: showNow, wantErr: badNameControl},
		{name: "A name with a newline is refused.", when: with(func(c *domain.ScheduleShow) { c.Name = "Con\ncert" }), now: showNow, wantErr: badNameControl},
		{name: "A name with a C1 control character is refused.", when: with(func(c *domain.ScheduleShow) { c.Name = "Con\u0085cert" }), now: showNow, wantErr: badNameControl},
		{name: "A name in NFD is accepted as it is.", when: with(func(c *domain.ScheduleShow) { c.Name = "Cafe\u0301" }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Name = "Cafe\u0301" }))},
		{name: "A name of 201 characters is refused.", when: with(func(c *domain.ScheduleShow) { c.Name = strings.Repeat("a", 201) }), now: showNow, wantErr: badName},
		{name: "Every invalid field is named in one refusal, in the order of the command's fields.",
			when: domain.ScheduleShow{ShowID: fixShowID, Name: "", StartsAt: showNow.Add(-time.Hour), Capacity: 0, Price: domain.Money{Amount: -1, Currency: "eur"}},
			now:  showNow, wantErr: &domain.Error{Kind: domain.Invalid, Code: "invalid-request",
				Msg:    strings.Join([]string{badName.Msg, badCapacity.Msg, badAmount.Msg, badCurrency.Msg, badStart.Msg}, "; "),
				Fields: []string{"name", "capacity", "price.amount", "price.currency", "starts_at"}}},
		{name: "A price amount both out of range and not a multiple of 10 in a three-decimal currency is named once.",
			when: with(func(c *domain.ScheduleShow) { c.Price = domain.Money{Amount: -1, Currency: "KWD"}; c.Capacity = 0 }),
			now:  showNow, wantErr: &domain.Error{Kind: domain.Invalid, Code: "invalid-request",
				Msg: badCapacity.Msg + "; " + badAmount.Msg, Fields: []string{"capacity", "price.amount"}}},

		{name: "A capacity of zero is refused.", when: with(func(c *domain.ScheduleShow) { c.Capacity = 0 }), now: showNow, wantErr: badCapacity},
		{name: "A negative capacity is refused.", when: with(func(c *domain.ScheduleShow) { c.Capacity = -5 }), now: showNow, wantErr: badCapacity},
		{name: "A capacity of one seat is accepted.", when: with(func(c *domain.ScheduleShow) { c.Capacity = 1 }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Capacity = 1 }))},
		{name: "A capacity of exactly MaxCapacity is accepted.", when: with(func(c *domain.ScheduleShow) { c.Capacity = domain.MaxCapacity }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Capacity = domain.MaxCapacity }))},
		{name: "A capacity one above MaxCapacity is refused.", when: with(func(c *domain.ScheduleShow) { c.Capacity = domain.MaxCapacity + 1 }), now: showNow, wantErr: badCapacity},

		{name: "A free show with a zero price is refused (orders always pay).", when: with(func(c *domain.ScheduleShow) { c.Price.Amount = 0 }), now: showNow, wantErr: badAmount},
		{name: "A negative price is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Amount = -1 }), now: showNow, wantErr: badAmount},
		{name: "The highest price whose largest reservation stays within 2^53-1 is accepted.", when: with(func(c *domain.ScheduleShow) { c.Price.Amount = domain.MaxAmountMinor / domain.MaxSeatsPerHold }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Price.Amount = domain.MaxAmountMinor / domain.MaxSeatsPerHold }))},
		{name: "A price whose largest reservation would pass 2^53-1 is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Amount = domain.MaxAmountMinor/domain.MaxSeatsPerHold + 1 }), now: showNow, wantErr: badAmount},

		{name: "Another upper-case ISO 4217 currency is accepted.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "USD" }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Price.Currency = "USD" }))},
		{name: "A lower-case currency is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "eur" }), now: showNow, wantErr: badCurrency},
		{name: "A mixed-case currency is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "Eur" }), now: showNow, wantErr: badCurrency},
		{name: "An empty currency is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "" }), now: showNow, wantErr: badCurrency},
		{name: "A two-letter currency is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "EU" }), now: showNow, wantErr: badCurrency},
		{name: "A four-letter currency is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "EURO" }), now: showNow, wantErr: badCurrency},
		{name: "A currency with a digit is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "E1R" }), now: showNow, wantErr: badCurrency},
		{name: "A currency with a non-ASCII letter is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "ÉU" }), now: showNow, wantErr: badCurrency},
		{name: "A currency with surrounding space is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = " EU" }), now: showNow, wantErr: badCurrency},
		{name: "XXX (the ISO code for no currency) is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "XXX" }), now: showNow, wantErr: badCurrency},
		{name: "XTS (the ISO code reserved for testing) is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "XTS" }), now: showNow, wantErr: badCurrency},
		{name: "XAU (gold) is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "XAU" }), now: showNow, wantErr: badCurrency},
		{name: "XDR (the IMF's special drawing right, a unit of account) is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "XDR" }), now: showNow, wantErr: badCurrency},
		{name: "HRK (withdrawn when Croatia adopted the euro) is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "HRK" }), now: showNow, wantErr: badCurrency},
		{name: "VEF (withdrawn for VES) is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "VEF" }), now: showNow, wantErr: badCurrency},
		{name: "MRO (withdrawn for MRU) is refused.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "MRO" }), now: showNow, wantErr: badCurrency},
		{name: "VES (Venezuela's active code) is accepted.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "VES" }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Price.Currency = "VES" }))},
		{name: "JPY (a zero-decimal currency) is accepted.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "JPY" }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Price.Currency = "JPY" }))},
		{name: "XOF (an active X code) is accepted.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "XOF" }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Price.Currency = "XOF" }))},
		{name: "SLE (Sierra Leone's redenominated leone) is accepted.", when: with(func(c *domain.ScheduleShow) { c.Price.Currency = "SLE" }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Price.Currency = "SLE" }))},
		{name: "A three-decimal currency's amount ending in 0 is accepted.", when: with(func(c *domain.ScheduleShow) { c.Price = domain.Money{Amount: 4510, Currency: "KWD"} }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.Price = domain.Money{Amount: 4510, Currency: "KWD"} }))},
		{name: "A three-decimal currency's amount not ending in 0 is refused, since card payments in it end in 0.",
			when: with(func(c *domain.ScheduleShow) { c.Price = domain.Money{Amount: 4505, Currency: "KWD"} }), now: showNow,
			wantErr: invalid("price.amount", "price.amount must be a multiple of 10 in KWD: card payments in a three-decimal currency end in 0")},

		{name: "A start in the past is refused.", when: with(func(c *domain.ScheduleShow) { c.StartsAt = showNow.Add(-time.Minute) }), now: showNow, wantErr: badStart},
		{name: "A start exactly at now is refused.", when: with(func(c *domain.ScheduleShow) { c.StartsAt = showNow }), now: showNow, wantErr: badStart},
		{name: "A start one nanosecond after now is accepted.", when: with(func(c *domain.ScheduleShow) { c.StartsAt = showNow.Add(time.Nanosecond) }), now: showNow,
			want: accepted(with(func(c *domain.ScheduleShow) { c.StartsAt = showNow.Add(time.Nanosecond) }))},
		{name: "A start in the past of the wall clock is accepted when it is after the passed-in now.",
			when: with(func(c *domain.ScheduleShow) { c.StartsAt = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) }),
			now:  time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
			want: accepted(with(func(c *domain.ScheduleShow) { c.StartsAt = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) }))},
		{name: "A start in the future of the wall clock is refused when it is before the passed-in now.",
			when: valid, now: showStart.Add(time.Hour), wantErr: badStart},
		{name: "A start is compared as an instant, whatever its time zone.",
			when: with(func(c *domain.ScheduleShow) { c.StartsAt = showNow.In(time.FixedZone("UTC+2", 2*60*60)) }), now: showNow, wantErr: badStart},
	}
	runDecisions(t, tests, checkDomainError, func(tt tc) (string, []domain.Event, error) {
		got, err := showFrom(tt.given...).Schedule(tt.when, tt.now)
		return fmt.Sprintf("Schedule(%+v, %v)", tt.when, tt.now), got, err
	}, eventsEqual)
}

// TestShowScheduleStoresTheStartInUTC checks the location, which cmp (through
// time.Time.Equal) ignores.
func TestShowScheduleStoresTheStartInUTC(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 6, 3, 21, 30, 0, 0, time.FixedZone("CEST", 2*60*60))
	var s domain.Show
	got, err := s.Schedule(domain.ScheduleShow{ShowID: fixShowID, Name: "Late show", StartsAt: start, Capacity: 10, Price: showPrice}, showNow)
	if err != nil {
		t.Fatalf("Schedule(...) error = %v, want nil", err)
	}
	e := got[0].(domain.ShowScheduled)
	if e.StartsAt.Location() != time.UTC || !e.StartsAt.Equal(start) {
		t.Errorf("Schedule(...).StartsAt = %v, want %v", e.StartsAt, start.UTC())
	}
}

func TestShowHold(t *testing.T) {
	t.Parallel()
	hold := func(res string, q int) domain.HoldSeats {
		return domain.HoldSeats{ShowID: fixShowID, ReservationID: res, Actor: fixActor, Intent: fixIntent, Quantity: q, HoldFor: 15 * time.Minute}
	}
	badQuantity := invalid("quantity", "quantity must be between 1 and 20")
	soldOut := func(requested, available int) *domain.Error {
		return &domain.Error{Kind: domain.Conflict, Code: "sold-out", Msg: fmt.Sprintf("%d seat(s) requested, %d available", requested, available)}
	}
	tests := []decideCase[domain.HoldSeats]{
		{name: "Seats are held at the total price until now plus the hold duration.",
			given: []domain.Event{givenShow(30)}, when: hold(fixResA, 3), now: showNow,
			want: []domain.Event{domain.SeatsHeld{ShowID: fixShowID, ReservationID: fixResA, Actor: fixActor, Intent: fixIntent,
				Quantity: 3, Amount: domain.Money{Amount: 7500, Currency: "EUR"}, ExpiresAt: showNow.Add(15 * time.Minute)}}},
		{name: "The show's id is taken from the show, not the command.",
			given: []domain.Event{givenShow(30)}, when: func() domain.HoldSeats { c := hold(fixResA, 1); c.ShowID = "other"; return c }(), now: showNow,
			want: []domain.Event{givenHeld(fixResA, 1)}},
		{name: "The last available seats can be held.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 8)}, when: hold(fixResB, 2), now: showNow,
			want: []domain.Event{givenHeld(fixResB, 2)}},
		{name: "More seats than available are sold out, with the counts in the message.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 8)}, when: hold(fixResB, 3), now: showNow,
			wantErr: soldOut(3, 2)},
		{name: "A show with no seats left is sold out for one seat.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 6), givenHeld(fixResB, 4)}, when: hold(fixResC, 1), now: showNow,
			wantErr: soldOut(1, 0)},
		{name: "Released seats can be held again.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 8), givenReleased(fixResA, 8)}, when: hold(fixResB, 10), now: showNow,
			want: []domain.Event{givenHeld(fixResB, 10)}},
		{name: "A show with fewer seats than the largest hold is sold out for more than its capacity.",
			given: []domain.Event{givenShow(5)}, when: hold(fixResA, 6), now: showNow,
			wantErr: soldOut(6, 5)},

		{name: "A show that was never scheduled is not found.",
			when: hold(fixResA, 2), now: showNow, wantErr: domain.ErrShowNotFound},
		{name: "A show that was never scheduled is not found before the quantity is checked.",
			when: hold(fixResA, 0), now: showNow, wantErr: domain.ErrShowNotFound},

		{name: "A show that has started refuses holds.",
			given: []domain.Event{givenShow(30)}, when: hold(fixResA, 2), now: showStart.Add(time.Minute), wantErr: domain.ErrShowStarted},
		{name: "A show starting exactly now has started.",
			given: []domain.Event{givenShow(30)}, when: hold(fixResA, 2), now: showStart, wantErr: domain.ErrShowStarted},
		{name: "A show starting one nanosecond from now accepts holds.",
			given: []domain.Event{givenShow(30)}, when: hold(fixResA, 2), now: showStart.Add(-time.Nanosecond),
			want: []domain.Event{func() domain.SeatsHeld {
				e := givenHeld(fixResA, 2)
				e.ExpiresAt = showStart.Add(-time.Nanosecond).Add(15 * time.Minute)
				return e
			}()}},
		{name: "A started show is reported before sold out.",
			given: []domain.Event{givenShow(2), givenHeld(fixResA, 2)}, when: hold(fixResB, 1), now: showStart, wantErr: domain.ErrShowStarted},

		{name: "A quantity of zero is refused.", given: []domain.Event{givenShow(30)}, when: hold(fixResA, 0), now: showNow, wantErr: badQuantity},
		{name: "A negative quantity is refused.", given: []domain.Event{givenShow(30)}, when: hold(fixResA, -1), now: showNow, wantErr: badQuantity},
		{name: "A quantity of one is accepted.", given: []domain.Event{givenShow(30)}, when: hold(fixResA, 1), now: showNow,
			want: []domain.Event{givenHeld(fixResA, 1)}},
		{name: "A quantity of exactly MaxSeatsPerHold is accepted.", given: []domain.Event{givenShow(30)}, when: hold(fixResA, domain.MaxSeatsPerHold), now: showNow,
			want: []domain.Event{givenHeld(fixResA, domain.MaxSeatsPerHold)}},
		{name: "A quantity above MaxSeatsPerHold is refused.", given: []domain.Event{givenShow(30)}, when: hold(fixResA, domain.MaxSeatsPerHold+1), now: showNow, wantErr: badQuantity},
		{name: "A bad quantity is refused before sold out or a started show is reported.",
			given: []domain.Event{givenShow(2), givenHeld(fixResA, 2)}, when: hold(fixResB, 21), now: showStart, wantErr: badQuantity},

		{name: "A repeat of a held reservation is a no-op.",
			given: []domain.Event{givenShow(30), givenHeld(fixResA, 2)}, when: hold(fixResA, 2), now: showNow},
		{name: "A repeat of a held reservation is a no-op even with another quantity.",
			given: []domain.Event{givenShow(30), givenHeld(fixResA, 2)}, when: hold(fixResA, 25), now: showNow},
		{name: "A repeat of a held reservation is a no-op even when the show is now sold out.",
			given: []domain.Event{givenShow(4), givenHeld(fixResA, 2), givenHeld(fixResB, 2)}, when: hold(fixResA, 2), now: showNow},
		{name: "A repeat of a held reservation is a no-op even after the show started.",
			given: []domain.Event{givenShow(30), givenHeld(fixResA, 2)}, when: hold(fixResA, 2), now: showStart.Add(time.Hour)},
	}
	runDecisions(t, tests, checkDomainError, func(tt decideCase[domain.HoldSeats]) (string, []domain.Event, error) {
		got, err := showFrom(tt.given...).Hold(tt.when, tt.now)
		return fmt.Sprintf("Hold(%+v, %v)", tt.when, tt.now), got, err
	}, eventsEqual)
}

func TestShowHoldSoldOutIsTheSoldOutSentinel(t *testing.T) {
	t.Parallel()
	s := showFrom(givenShow(1))
	_, err := s.Hold(domain.HoldSeats{ShowID: fixShowID, ReservationID: fixResA, Quantity: 2, HoldFor: time.Minute}, showNow)
	if !errors.Is(err, domain.ErrSoldOut) {
		t.Fatalf("Hold(2 of 1) = %v, want errors.Is ErrSoldOut", err)
	}
	if got, want := err.Error(), "2 seat(s) requested, 1 available"; got != want {
		t.Errorf("Hold(2 of 1) error message = %q, want %q", got, want)
	}
	if got := domain.KindOf(err); got != domain.Conflict {
		t.Errorf("KindOf(Hold(2 of 1) error) = %v, want %v", got, domain.Conflict)
	}
	if domain.ErrSoldOut.Msg != "not enough seats available" {
		t.Errorf("Hold changed the ErrSoldOut sentinel's message to %q", domain.ErrSoldOut.Msg)
	}
}

// TestShowHoldExpiresInUTC checks the location, which cmp ignores.
func TestShowHoldExpiresInUTC(t *testing.T) {
	t.Parallel()
	s := showFrom(givenShow(10))
	now := showNow.In(time.FixedZone("UTC-5", -5*60*60))
	got, err := s.Hold(domain.HoldSeats{ShowID: fixShowID, ReservationID: fixResA, Quantity: 1, HoldFor: 10 * time.Minute}, now)
	if err != nil {
		t.Fatalf("Hold(...) error = %v, want nil", err)
	}
	e := got[0].(domain.SeatsHeld)
	if want := showNow.Add(10 * time.Minute); e.ExpiresAt.Location() != time.UTC || !e.ExpiresAt.Equal(want) {
		t.Errorf("Hold(...).ExpiresAt = %v, want %v", e.ExpiresAt, want)
	}
}

func TestShowRelease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		given  []domain.Event
		res    string
		reason string
		want   []domain.Event
	}{
		{name: "A held reservation's seats are released with its quantity and the reason.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 3)}, res: fixResA, reason: domain.ReleasePaymentFailed,
			want: []domain.Event{domain.SeatsReleased{ShowID: fixShowID, ReservationID: fixResA, Quantity: 3, Reason: domain.ReleasePaymentFailed}}},
		{name: "Only the named reservation is released.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenHeld(fixResB, 2)}, res: fixResB, reason: domain.ReleaseCancelled,
			want: []domain.Event{domain.SeatsReleased{ShowID: fixShowID, ReservationID: fixResB, Quantity: 2, Reason: domain.ReleaseCancelled}}},
		{name: "A repeated release is a no-op.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenReleased(fixResA, 3)}, res: fixResA, reason: domain.ReleaseExpired},
		{name: "A repeated release with another reason is a no-op.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenReleased(fixResA, 3)}, res: fixResA, reason: domain.ReleaseCancelled},
		{name: "A release of a reservation that never held seats is a no-op.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 3)}, res: fixResB, reason: domain.ReleaseExpired},
		{name: "A release on a show that does not exist is a no-op.",
			res: fixResA, reason: domain.ReleaseExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := showFrom(tt.given...)
			checkEvents(t, fmt.Sprintf("Release(%q, %q)", tt.res, tt.reason), s.Release(tt.res, tt.reason), tt.want, eventsEqual)
		})
	}
}

func TestShowApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		given     []domain.Event
		wantHolds map[string]int
		wantTaken int
	}{
		{name: "A scheduled show has no holds.", given: []domain.Event{givenShow(10)}, wantHolds: map[string]int{}},
		{name: "Holds add up.",
			given:     []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenHeld(fixResB, 4)},
			wantHolds: map[string]int{fixResA: 3, fixResB: 4}, wantTaken: 7},
		{name: "A duplicate SeatsHeld of one reservation counts once.",
			given:     []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenHeld(fixResA, 3)},
			wantHolds: map[string]int{fixResA: 3}, wantTaken: 3},
		{name: "A duplicate SeatsHeld with another quantity keeps the first quantity.",
			given:     []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenHeld(fixResA, 5)},
			wantHolds: map[string]int{fixResA: 3}, wantTaken: 3},
		{name: "A release removes the reservation's hold.",
			given:     []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenHeld(fixResB, 4), givenReleased(fixResA, 3)},
			wantHolds: map[string]int{fixResB: 4}, wantTaken: 4},
		{name: "A release gives back the held quantity, whatever quantity it states.",
			given:     []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenReleased(fixResA, 9)},
			wantHolds: map[string]int{}, wantTaken: 0},
		{name: "A duplicate release counts once.",
			given:     []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenHeld(fixResB, 4), givenReleased(fixResA, 3), givenReleased(fixResA, 3)},
			wantHolds: map[string]int{fixResB: 4}, wantTaken: 4},
		{name: "A release of an unknown reservation is ignored.",
			given:     []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenReleased(fixResC, 3)},
			wantHolds: map[string]int{fixResA: 3}, wantTaken: 3},
		{name: "Events of other streams are ignored.",
			given: []domain.Event{givenShow(10), givenHeld(fixResA, 3),
				domain.ReservationHeld{ReservationID: fixResB, Quantity: 4}, domain.OrderClaimed{ReservationID: fixResA, Quantity: 3},
				domain.ExpiryClaimed{ReservationID: fixResA, Quantity: 3}},
			wantHolds: map[string]int{fixResA: 3}, wantTaken: 3},
		{name: "A hold applied before the schedule is counted without a panic.",
			given:     []domain.Event{givenHeld(fixResA, 2), givenShow(10)},
			wantHolds: map[string]int{fixResA: 2}, wantTaken: 2},
		{name: "A hold, release and hold again of one reservation counts the second hold.",
			given:     []domain.Event{givenShow(10), givenHeld(fixResA, 3), givenReleased(fixResA, 3), givenHeld(fixResA, 2)},
			wantHolds: map[string]int{fixResA: 2}, wantTaken: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s domain.Show
			for i, e := range tt.given {
				s.Apply(e)
				// The invariants hold after every event.
				sum := 0
				for _, q := range s.Holds {
					sum += q
				}
				if s.Taken != sum {
					t.Errorf("after event %d (%s): Taken = %d, want the sum of Holds %d", i, e.EventType(), s.Taken, sum)
				}
				if s.Available()+s.Taken != s.Capacity {
					t.Errorf("after event %d (%s): Available() + Taken = %d + %d, want Capacity %d", i, e.EventType(), s.Available(), s.Taken, s.Capacity)
				}
			}
			if diff := cmp.Diff(tt.wantHolds, s.Holds, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Apply(...) Holds mismatch (-want +got):\n%s", diff)
			}
			if s.Taken != tt.wantTaken {
				t.Errorf("Apply(...) Taken = %d, want %d", s.Taken, tt.wantTaken)
			}
		})
	}
}

func TestShowApplyScheduled(t *testing.T) {
	t.Parallel()
	s := showFrom(givenShow(120), givenHeld(fixResA, 20))
	want := domain.Show{ID: fixShowID, Name: "Café Concert", StartsAt: showStart, Capacity: 120, Price: showPrice,
		Scheduled: true, Holds: map[string]int{fixResA: 20}, Taken: 20}
	if diff := cmp.Diff(want, *s); diff != "" {
		t.Errorf("Apply(ShowScheduled, SeatsHeld) mismatch (-want +got):\n%s", diff)
	}
	if got := s.Available(); got != 100 {
		t.Errorf("Available() = %d, want 100", got)
	}
}

// TestShowDecideApplyKeepsCapacity plays a sequence of holds and releases
// through the deciders and checks capacity = available + taken throughout,
// and that nothing is ever oversold.
func TestShowDecideApplyKeepsCapacity(t *testing.T) {
	t.Parallel()
	s := showFrom(givenShow(25))
	steps := []struct {
		hold    string
		q       int
		release string
	}{
		{hold: "r1", q: 10}, {hold: "r2", q: 10}, {hold: "r3", q: 10}, {hold: "r3", q: 5},
		{release: "r1"}, {hold: "r3", q: 10}, {release: "r1"}, {hold: "r4", q: 1}, {release: "r2"}, {hold: "r5", q: 20},
	}
	for i, st := range steps {
		var evs []domain.Event
		if st.hold != "" {
			evs, _ = s.Hold(domain.HoldSeats{ShowID: fixShowID, ReservationID: st.hold, Quantity: st.q, HoldFor: time.Minute}, showNow)
		} else {
			evs = s.Release(st.release, domain.ReleaseCancelled)
		}
		for _, e := range evs {
			s.Apply(e)
		}
		if s.Available() < 0 || s.Available()+s.Taken != s.Capacity {
			t.Fatalf("after step %d: Available() = %d, Taken = %d, Capacity = %d", i, s.Available(), s.Taken, s.Capacity)
		}
	}
	want := map[string]int{"r3": 5, "r4": 1}
	if diff := cmp.Diff(want, s.Holds); diff != "" {
		t.Errorf("Holds after the sequence mismatch (-want +got):\n%s", diff)
	}
	if s.Taken != 6 {
		t.Errorf("Taken after the sequence = %d, want 6", s.Taken)
	}
}
