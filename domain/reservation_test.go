package domain_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/domain"
)

func givenReservation() domain.ReservationHeld {
	return domain.ReservationHeld{ReservationID: fixResA, ShowID: fixShowID, Actor: fixActor, Quantity: 2, Amount: resAmount, ExpiresAt: resExpiresAt}
}

// givenOrderClaim is the order claim of fixResA by order under intent.
func givenOrderClaim(order, intent string) domain.OrderClaimed {
	return domain.OrderClaimed{ReservationID: fixResA, OrderID: order, ShowID: fixShowID, Actor: fixActor, Intent: intent, Quantity: 2, Amount: resAmount}
}

func givenExpiryClaim() domain.ExpiryClaimed {
	return domain.ExpiryClaimed{ReservationID: fixResA, ShowID: fixShowID, Quantity: 2}
}

func reservationFrom(events ...domain.Event) domain.Reservation {
	return replay[domain.Reservation](events...)
}

func claimFrom(events ...domain.Event) domain.Claim {
	return replay[domain.Claim](events...)
}

func TestDecideClaim(t *testing.T) {
	t.Parallel()
	claim := func(actor, order, intent string) domain.ClaimOrder {
		return domain.ClaimOrder{ReservationID: fixResA, OrderID: order, Actor: actor, Intent: intent}
	}
	live := resExpiresAt.Add(-time.Minute)
	tests := []struct {
		name       string
		givenRes   []domain.Event // reservation-{id}
		givenClaim []domain.Event // reservation-order-{id}
		when       domain.ClaimOrder
		now        time.Time
		want       []domain.Event
		wantErr    *domain.Error
	}{
		{name: "An unclaimed live reservation is claimed for the order.",
			givenRes: []domain.Event{givenReservation()}, when: claim(fixActor, fixOrderA, fixIntent), now: live,
			want: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)}},
		{name: "A reservation one nanosecond before its expiry can still be claimed.",
			givenRes: []domain.Event{givenReservation()}, when: claim(fixActor, fixOrderA, fixIntent), now: resExpiresAt.Add(-time.Nanosecond),
			want: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)}},

		{name: "A reservation that does not exist is not found.",
			when: claim(fixActor, fixOrderA, fixIntent), now: live, wantErr: domain.ErrReservationNotFound},
		{name: "A reservation that does not exist is not found even if a claim exists.",
			givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)}, when: claim(fixActor, fixOrderA, fixIntent), now: live,
			wantErr: domain.ErrReservationNotFound},
		{name: "Another actor's reservation is not found.",
			givenRes: []domain.Event{givenReservation()}, when: claim(fixOtherUser, fixOrderA, fixIntent), now: live,
			wantErr: domain.ErrReservationNotFound},
		{name: "Another actor's reservation is not found even when it is already ordered.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)},
			when: claim(fixOtherUser, fixOrderB, fixIntentB), now: live, wantErr: domain.ErrReservationNotFound},
		{name: "Another actor's expired reservation is not found and yields no expiry claim.",
			givenRes: []domain.Event{givenReservation()}, when: claim(fixOtherUser, fixOrderA, fixIntent), now: resExpiresAt.Add(time.Hour),
			wantErr: domain.ErrReservationNotFound},

		{name: "A reservation claimed by the same intent is a repeat with no events and no error.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)},
			when: claim(fixActor, fixOrderA, fixIntent), now: live},
		{name: "A repeat by the same intent succeeds even after the hold's expiry, because the claim came first.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)},
			when: claim(fixActor, fixOrderA, fixIntent), now: resExpiresAt.Add(time.Hour)},
		{name: "A reservation claimed by another intent of the same actor is already ordered.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)},
			when: claim(fixActor, fixOrderB, fixIntentB), now: live, wantErr: domain.ErrReservationAlreadyOrdered},
		{name: "A reservation claimed under the same intent stream by an earlier, purged intent (another order id) is already ordered.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)},
			when: claim(fixActor, fixOrderB, fixIntent), now: live, wantErr: domain.ErrReservationAlreadyOrdered},
		{name: "A reservation claimed by another intent is already ordered after its expiry too.",
			givenRes:   []domain.Event{givenReservation(), domain.ReservationOrdered{ReservationID: fixResA, OrderID: fixOrderA}},
			givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)},
			when:       claim(fixActor, fixOrderB, fixIntentB), now: resExpiresAt.Add(time.Hour), wantErr: domain.ErrReservationAlreadyOrdered},

		{name: "A reservation claimed by expiry is expired.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenExpiryClaim()},
			when: claim(fixActor, fixOrderA, fixIntent), now: resExpiresAt.Add(time.Minute), wantErr: domain.ErrReservationExpired},
		{name: "A reservation claimed by expiry is expired even if this clock says the hold is still live.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenExpiryClaim()},
			when: claim(fixActor, fixOrderA, fixIntent), now: live, wantErr: domain.ErrReservationExpired},
		{name: "A hold past its expiry with no claim yields the expiry claim and refuses.",
			givenRes: []domain.Event{givenReservation()}, when: claim(fixActor, fixOrderA, fixIntent), now: resExpiresAt.Add(time.Second),
			want: []domain.Event{givenExpiryClaim()}, wantErr: domain.ErrReservationExpired},
		{name: "A hold exactly at its expires_at counts as expired.",
			givenRes: []domain.Event{givenReservation()}, when: claim(fixActor, fixOrderA, fixIntent), now: resExpiresAt,
			want: []domain.Event{givenExpiryClaim()}, wantErr: domain.ErrReservationExpired},

		{name: "Only the first claim event counts: an order claim followed by an expiry claim is still the order's.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent), givenExpiryClaim()},
			when: claim(fixActor, fixOrderA, fixIntent), now: resExpiresAt.Add(time.Hour)},
		{name: "Only the first claim event counts: an expiry claim followed by an order claim is still expired.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenExpiryClaim(), givenOrderClaim(fixOrderA, fixIntent)},
			when: claim(fixActor, fixOrderA, fixIntent), now: live, wantErr: domain.ErrReservationExpired},
		{name: "Only the first claim event counts: a second order claim does not replace the first.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent), givenOrderClaim(fixOrderB, fixIntentB)},
			when: claim(fixActor, fixOrderB, fixIntentB), now: live, wantErr: domain.ErrReservationAlreadyOrdered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, r := claimFrom(tt.givenClaim...), reservationFrom(tt.givenRes...)
			got, err := domain.DecideClaim(c, r, tt.when, tt.now)
			checkDecision(t, fmt.Sprintf("DecideClaim(%+v, %v)", tt.when, tt.now), got, err, tt.want, tt.wantErr, eventsEqual)
		})
	}
}

func TestDecideExpiry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		givenRes   []domain.Event
		givenClaim []domain.Event
		now        time.Time
		want       []domain.Event
	}{
		{name: "An unclaimed hold past its expiry yields the expiry claim.",
			givenRes: []domain.Event{givenReservation()}, now: resExpiresAt.Add(time.Minute), want: []domain.Event{givenExpiryClaim()}},
		{name: "An unclaimed hold exactly at its expires_at yields the expiry claim.",
			givenRes: []domain.Event{givenReservation()}, now: resExpiresAt, want: []domain.Event{givenExpiryClaim()}},
		{name: "An unclaimed hold one nanosecond before its expiry yields nothing.",
			givenRes: []domain.Event{givenReservation()}, now: resExpiresAt.Add(-time.Nanosecond)},
		{name: "A hold claimed by an order yields nothing, even past its expiry.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenOrderClaim(fixOrderA, fixIntent)},
			now: resExpiresAt.Add(time.Hour)},
		{name: "A hold already claimed by expiry yields nothing.",
			givenRes: []domain.Event{givenReservation()}, givenClaim: []domain.Event{givenExpiryClaim()}, now: resExpiresAt.Add(time.Hour)},
		{name: "A reservation that does not exist yields nothing.", now: resExpiresAt.Add(time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := domain.DecideExpiry(claimFrom(tt.givenClaim...), reservationFrom(tt.givenRes...), tt.now)
			checkEvents(t, fmt.Sprintf("DecideExpiry(..., %v)", tt.now), got, tt.want, eventsEqual)
		})
	}
}

func TestReservationFollowUps(t *testing.T) {
	t.Parallel()
	ordered := domain.ReservationOrdered{ReservationID: fixResA, OrderID: fixOrderA}
	expired := domain.ReservationExpired{ReservationID: fixResA}
	released := domain.ReservationReleased{ReservationID: fixResA, OrderID: fixOrderA, Reason: domain.ReleasePaymentFailed}
	markOrdered := func(r *domain.Reservation) []domain.Event { return r.MarkOrdered(fixOrderA) }
	markExpired := func(r *domain.Reservation) []domain.Event { return r.MarkExpired() }
	markReleased := func(r *domain.Reservation) []domain.Event {
		return r.MarkReleased(fixOrderA, domain.ReleasePaymentFailed)
	}
	tests := []struct {
		name  string
		given []domain.Event
		when  func(r *domain.Reservation) []domain.Event
		call  string
		want  []domain.Event
	}{
		{name: "A held reservation is marked ordered.", given: []domain.Event{givenReservation()}, when: markOrdered, call: "MarkOrdered",
			want: []domain.Event{ordered}},
		{name: "An ordered reservation marked ordered again is a no-op.", given: []domain.Event{givenReservation(), ordered}, when: markOrdered, call: "MarkOrdered"},
		{name: "An ordered reservation marked ordered for another order is a no-op.", given: []domain.Event{givenReservation(), ordered},
			when: func(r *domain.Reservation) []domain.Event { return r.MarkOrdered(fixOrderB) }, call: "MarkOrdered"},
		{name: "A released reservation is not marked ordered again.", given: []domain.Event{givenReservation(), ordered, released}, when: markOrdered, call: "MarkOrdered"},
		{name: "An expired reservation is not marked ordered.", given: []domain.Event{givenReservation(), expired}, when: markOrdered, call: "MarkOrdered"},
		{name: "A reservation that does not exist is not marked ordered.", when: markOrdered, call: "MarkOrdered"},

		{name: "A held reservation is marked expired.", given: []domain.Event{givenReservation()}, when: markExpired, call: "MarkExpired",
			want: []domain.Event{expired}},
		{name: "An expired reservation marked expired again is a no-op.", given: []domain.Event{givenReservation(), expired}, when: markExpired, call: "MarkExpired"},
		{name: "An ordered reservation is not marked expired.", given: []domain.Event{givenReservation(), ordered}, when: markExpired, call: "MarkExpired"},
		{name: "A released reservation is not marked expired.", given: []domain.Event{givenReservation(), ordered, released}, when: markExpired, call: "MarkExpired"},
		{name: "A reservation that does not exist is not marked expired.", when: markExpired, call: "MarkExpired"},

		{name: "An ordered reservation is marked released with its order and reason.", given: []domain.Event{givenReservation(), ordered}, when: markReleased, call: "MarkReleased",
			want: []domain.Event{released}},
		{name: "A released reservation marked released again is a no-op.", given: []domain.Event{givenReservation(), ordered, released}, when: markReleased, call: "MarkReleased"},
		{name: "A held reservation whose order ended before it was marked ordered is released, so it can never be marked ordered later.", given: []domain.Event{givenReservation()}, when: markReleased, call: "MarkReleased",
			want: []domain.Event{released}},
		{name: "An expired reservation is not marked released.", given: []domain.Event{givenReservation(), expired}, when: markReleased, call: "MarkReleased"},
		{name: "A reservation that does not exist is not marked released.", when: markReleased, call: "MarkReleased"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := reservationFrom(tt.given...)
			got := tt.when(&r)
			checkEvents(t, tt.call+"(...)", got, tt.want, eventsEqual)
			// Applying the decided events makes the follow-up a no-op.
			for _, e := range got {
				r.Apply(e)
			}
			if again := tt.when(&r); len(again) != 0 {
				t.Errorf("%s(...) after applying its events = %v, want no events", tt.call, again)
			}
		})
	}
}

func TestReservationApply(t *testing.T) {
	t.Parallel()
	base := domain.Reservation{ID: fixResA, ShowID: fixShowID, Actor: fixActor, Quantity: 2, Amount: resAmount, ExpiresAt: resExpiresAt}
	with := func(status, order string) domain.Reservation {
		r := base
		r.Status, r.OrderID = status, order
		return r
	}
	tests := []struct {
		name       string
		given      []domain.Event
		want       domain.Reservation
		wantExists bool
	}{
		{name: "No events is a reservation that does not exist."},
		{name: "Events of other streams do not open a reservation.", given: []domain.Event{givenHeld(fixResA, 2), givenOrderClaim(fixOrderA, fixIntent)}},
		{name: "ReservationHeld opens a held reservation.", given: []domain.Event{givenReservation()},
			want: with(domain.ReservationStatusHeld, ""), wantExists: true},
		{name: "ReservationOrdered records the order.", given: []domain.Event{givenReservation(), domain.ReservationOrdered{ReservationID: fixResA, OrderID: fixOrderA}},
			want: with(domain.ReservationStatusOrdered, fixOrderA), wantExists: true},
		{name: "ReservationExpired expires it.", given: []domain.Event{givenReservation(), domain.ReservationExpired{ReservationID: fixResA}},
			want: with(domain.ReservationStatusExpired, ""), wantExists: true},
		{name: "ReservationReleased releases it and keeps its order.", given: []domain.Event{givenReservation(),
			domain.ReservationOrdered{ReservationID: fixResA, OrderID: fixOrderA}, domain.ReservationReleased{ReservationID: fixResA, OrderID: fixOrderA, Reason: domain.ReleaseCancelled}},
			want: with(domain.ReservationStatusReleased, fixOrderA), wantExists: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := reservationFrom(tt.given...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Apply(...) mismatch (-want +got):\n%s", diff)
			}
			if got.Exists() != tt.wantExists {
				t.Errorf("Exists() = %t, want %t", got.Exists(), tt.wantExists)
			}
		})
	}
}

func TestHeldFrom(t *testing.T) {
	t.Parallel()
	got := domain.HeldFrom(givenHeld(fixResA, 2))
	want := domain.ReservationHeld{ReservationID: fixResA, ShowID: fixShowID, Actor: fixActor, Quantity: 2,
		Amount: domain.Money{Amount: 5000, Currency: "EUR"}, ExpiresAt: showNow.Add(15 * time.Minute)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("HeldFrom(...) mismatch (-want +got):\n%s", diff)
	}
}

func TestClaimApply(t *testing.T) {
	t.Parallel()
	orderClaim := givenOrderClaim(fixOrderA, fixIntent)
	byOrder := domain.Claim{Kind: domain.ClaimKindOrder, OrderID: fixOrderA, Actor: fixActor, Intent: fixIntent, Order: orderClaim}
	tests := []struct {
		name  string
		given []domain.Event
		want  domain.Claim
	}{
		{name: "No events is no claim.", want: domain.Claim{Kind: domain.ClaimNone}},
		{name: "An order claim records the order, actor, intent and claim.", given: []domain.Event{orderClaim}, want: byOrder},
		{name: "An expiry claim is an expiry.", given: []domain.Event{givenExpiryClaim()}, want: domain.Claim{Kind: domain.ClaimKindExpiry}},
		{name: "An expiry claim after an order claim is ignored.", given: []domain.Event{orderClaim, givenExpiryClaim()}, want: byOrder},
		{name: "An order claim after an expiry claim is ignored.", given: []domain.Event{givenExpiryClaim(), orderClaim}, want: domain.Claim{Kind: domain.ClaimKindExpiry}},
		{name: "A second order claim is ignored.", given: []domain.Event{orderClaim, givenOrderClaim(fixOrderB, fixIntentB)}, want: byOrder},
		{name: "Events that are not claims are ignored.", given: []domain.Event{givenReservation(), orderClaim}, want: byOrder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, claimFrom(tt.given...)); diff != "" {
				t.Errorf("Apply(...) mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
