package domain_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/domain"
)

func ordPlaced() domain.OrderPlaced {
	return domain.OrderPlaced{OrderID: ordID, ReservationID: ordResID, ShowID: ordShowID, Actor: ordActor, Intent: ordIntent,
		Quantity: 2, Amount: ordAmount, PaymentDeadline: ordDeadline, Private: &domain.OrderPrivate{SealedPaymentToken: []byte("sealed tok_visa")}}
}

// ordStarted is attempt n started at at by owner, with a lease of ordLease.
func ordStarted(n int, owner string, at time.Time) domain.PaymentAttemptStarted {
	return domain.PaymentAttemptStarted{OrderID: ordID, Attempt: n, ProviderKey: ordKey(n), Owner: owner, LeaseUntil: at.Add(ordLease),
		Amount: ordAmount, StartedAt: at, RequestSHA256: "sha-" + ordKey(n), Description: "2 ticket(s)", Deployment: "prod"}
}

// ordAction is attempt n's payment requiring the customer's action.
func ordAction(n int, payment string) domain.PaymentActionRequired {
	return domain.PaymentActionRequired{OrderID: ordID, Attempt: n, PaymentID: payment,
		Private: &domain.ActionPrivate{SealedAction: []byte("sealed action-" + payment)}}
}

func ordKey(n int) string { return "order-" + ordID + "-" + string(rune('0'+n)) }

func ordSucceeded(n int, charge string) domain.PaymentSucceeded {
	return domain.PaymentSucceeded{OrderID: ordID, Attempt: n, ChargeID: charge, Amount: ordAmount}
}

func ordConfirmed() domain.OrderConfirmed {
	return domain.OrderConfirmed{OrderID: ordID, Tickets: []domain.Ticket{{ID: "t-1"}, {ID: "t-2"}}}
}

func ordRefund(charge, reason string) domain.RefundRequested {
	return domain.RefundRequested{OrderID: ordID, ChargeID: charge, Amount: ordAmount, Key: "refund-" + charge, Reason: reason}
}

func orderFrom(events ...domain.Event) domain.Order {
	return replay[domain.Order](events...)
}

func TestOrderStart(t *testing.T) {
	t.Parallel()
	start := func(n int, owner string, at time.Time) domain.StartAttempt {
		return domain.StartAttempt{N: n, ProviderKey: ordKey(n), Owner: owner, LeaseUntil: at.Add(ordLease),
			RequestSHA256: "sha-" + ordKey(n), Description: "2 ticket(s)", Deployment: "prod", Settle: ordSettle}
	}
	expired := ordNow.Add(ordLease)
	tests := []decideCase[domain.StartAttempt]{
		{name: "The first attempt of a pending order starts with its lease.",
			given: []domain.Event{ordPlaced()}, when: start(1, ordOwnerA, ordNow), now: ordNow,
			want: []domain.Event{ordStarted(1, ordOwnerA, ordNow)}},
		{name: "No attempt starts at or after the payment deadline.",
			given: []domain.Event{ordPlaced()}, when: start(1, ordOwnerA, ordDeadline), now: ordDeadline, wantErr: domain.ErrAttemptNotAllowed},
		{name: "A takeover after the lease expired keeps the key, the inputs' hash and the first start; the first start keeps the inputs.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)},
			when:  domain.StartAttempt{N: 1, Owner: ordOwnerB, LeaseUntil: expired.Add(ordLease), Description: "ignored", Deployment: "ignored"}, now: expired,
			want: []domain.Event{domain.PaymentAttemptStarted{OrderID: ordID, Attempt: 1, ProviderKey: ordKey(1), Owner: ordOwnerB,
				LeaseUntil: expired.Add(ordLease), Amount: ordAmount, StartedAt: ordNow, RequestSHA256: "sha-" + ordKey(1)}}},
		{name: "A takeover one nanosecond before the lease's end is refused.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)},
			when:  domain.StartAttempt{N: 1, Owner: ordOwnerB, LeaseUntil: expired.Add(ordLease)}, now: expired.Add(-time.Nanosecond),
			wantErr: domain.ErrAttemptNotAllowed},
		{name: "The owner renews its live lease.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)},
			when:  domain.StartAttempt{N: 1, Owner: ordOwnerA, LeaseUntil: ordNow.Add(time.Minute)}, now: ordNow.Add(10 * time.Second),
			want: []domain.Event{domain.PaymentAttemptStarted{OrderID: ordID, Attempt: 1, ProviderKey: ordKey(1), Owner: ordOwnerA,
				LeaseUntil: ordNow.Add(time.Minute), Amount: ordAmount, StartedAt: ordNow, RequestSHA256: "sha-" + ordKey(1)}}},
		{name: "A lease that would end before now is refused.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)},
			when:  domain.StartAttempt{N: 1, Owner: ordOwnerA, LeaseUntil: ordNow}, now: ordNow.Add(time.Second), wantErr: domain.ErrAttemptNotAllowed},
		{name: "A new attempt waits until the previous lease ended plus the settling margin.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)},
			when:  start(2, ordOwnerB, expired), now: expired.Add(ordSettle - time.Nanosecond), wantErr: domain.ErrAttemptNotAllowed},
		{name: "A new attempt starts once the previous one settled without an outcome.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow),
				domain.PaymentOutcomeUnknown{OrderID: ordID, Attempt: 1, Reason: "timeout"}},
			when: start(2, ordOwnerB, expired.Add(ordSettle)), now: expired.Add(ordSettle),
			want: []domain.Event{ordStarted(2, ordOwnerB, expired.Add(ordSettle))}},
		{name: "No attempt starts while the order is cancelling.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), domain.OrderCancelRequested{OrderID: ordID, Actor: ordActor}},
			when:  start(2, ordOwnerA, expired.Add(time.Minute)), now: expired.Add(time.Minute), wantErr: domain.ErrAttemptNotAllowed},
		{name: "No attempt starts on a confirmed order.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordSucceeded(1, ordCharge1), ordConfirmed()},
			when:  domain.StartAttempt{N: 1, Owner: ordOwnerB, LeaseUntil: expired.Add(ordLease)}, now: expired, wantErr: domain.ErrAttemptNotAllowed},
		{name: "No new attempt follows one whose payment waits for the customer's action.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordAction(1, ordCharge1)},
			when:  start(2, ordOwnerB, expired.Add(ordSettle)), now: expired.Add(ordSettle), wantErr: domain.ErrAttemptNotAllowed},
		{name: "An attempt whose payment waits for the customer's action is not taken over.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordAction(1, ordCharge1)},
			when:  domain.StartAttempt{N: 1, Owner: ordOwnerB, LeaseUntil: expired.Add(ordLease)}, now: expired, wantErr: domain.ErrAttemptNotAllowed},
		{name: "An attempt out of sequence is refused.",
			given: []domain.Event{ordPlaced()}, when: start(2, ordOwnerA, ordNow), now: ordNow, wantErr: domain.ErrAttemptNotAllowed},
	}
	runDecisions(t, tests, checkErrorIs, func(tt decideCase[domain.StartAttempt]) (string, []domain.Event, error) {
		o := orderFrom(tt.given...)
		got, err := o.Start(tt.when, tt.now)
		return fmt.Sprintf("Start(%+v)", tt.when), got, err
	})
}

func TestOrderCanSend(t *testing.T) {
	t.Parallel()
	budget := 12 * time.Second
	tests := []struct {
		name  string
		given []domain.Event
		n     int
		owner string
		now   time.Time
		want  bool
	}{
		{name: "The owner sends while now plus the budget is inside the lease.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)}, n: 1, owner: ordOwnerA, now: ordNow, want: true},
		{name: "The owner does not send when the budget reaches the lease's end.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)}, n: 1, owner: ordOwnerA, now: ordNow.Add(ordLease - budget)},
		{name: "Another executor never sends under someone else's lease.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)}, n: 1, owner: ordOwnerB, now: ordNow},
		{name: "The owner may resend after an unknown outcome.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), domain.PaymentOutcomeUnknown{OrderID: ordID, Attempt: 1}},
			n:     1, owner: ordOwnerA, now: ordNow, want: true},
		{name: "Nothing is sent while cancelling.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), domain.OrderCancelRequested{OrderID: ordID, Actor: ordActor}},
			n:     1, owner: ordOwnerA, now: ordNow},
		{name: "Nothing is sent past the payment deadline.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordDeadline.Add(-time.Second))}, n: 1, owner: ordOwnerA, now: ordDeadline},
		{name: "A payment waiting for the customer's action is never sent again.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordAction(1, ordCharge1)},
			n:     1, owner: ordOwnerA, now: ordNow},
		{name: "A superseded attempt is never sent again.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordStarted(2, ordOwnerA, ordNow.Add(time.Minute))},
			n:     1, owner: ordOwnerA, now: ordNow.Add(time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := orderFrom(tt.given...)
			if got := o.CanSend(tt.n, tt.owner, tt.now, budget); got != tt.want {
				t.Errorf("CanSend(%d, %s, %s) = %v, want %v", tt.n, tt.owner, tt.now, got, tt.want)
			}
		})
	}
}

func TestOrderRecord(t *testing.T) {
	t.Parallel()
	pendingWithAttempt := []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)}
	confirmed := append(pendingWithAttempt[:2:2], ordSucceeded(1, ordCharge1), ordConfirmed())
	success := func(n int, charge string) domain.PaymentResult {
		return domain.PaymentResult{Attempt: n, Outcome: domain.OutcomeSucceeded, ChargeID: charge, Amount: ordAmount}
	}
	decline := func(n int, charge string) domain.PaymentResult {
		return domain.PaymentResult{Attempt: n, Outcome: domain.OutcomeFailed, ChargeID: charge, Code: "card_declined", Reason: "declined"}
	}
	failed := func(n int, charge string) domain.PaymentFailed {
		return domain.PaymentFailed{OrderID: ordID, Attempt: n, ChargeID: charge, Code: "card_declined", Reason: "declined"}
	}
	unknown := domain.PaymentResult{Attempt: 1, Outcome: domain.OutcomeUnknown, Reason: "timeout"}
	action := func(n int, payment string) domain.PaymentResult {
		return domain.PaymentResult{Attempt: n, Outcome: domain.OutcomeRequiresAction, ChargeID: payment, SealedAction: []byte("sealed action-" + payment)}
	}
	tests := []struct {
		name  string
		given []domain.Event
		when  domain.PaymentResult
		want  []domain.Event
	}{
		{name: "A success while pending confirms the order with its tickets.",
			given: pendingWithAttempt, when: success(1, ordCharge1),
			want: []domain.Event{ordSucceeded(1, ordCharge1), ordConfirmed()}},
		{name: "The same success again records nothing.",
			given: confirmed, when: success(1, ordCharge1)},
		{name: "A success while cancelling is refunded and the order cancelled, without tickets.",
			given: append(pendingWithAttempt[:2:2], domain.OrderCancelRequested{OrderID: ordID, Actor: ordActor}), when: success(1, ordCharge1),
			want: []domain.Event{ordSucceeded(1, ordCharge1), ordRefund(ordCharge1, domain.RefundCancelled), domain.OrderCancelled{OrderID: ordID}}},
		{name: "A second charge id after the order was confirmed is a redundant effect.",
			given: confirmed, when: success(1, ordCharge2),
			want: []domain.Event{ordSucceeded(1, ordCharge2), ordRefund(ordCharge2, domain.RefundRedundantEffect)}},
		{name: "A charge after the order failed is a redundant effect.",
			given: append(pendingWithAttempt[:2:2], failed(1, ordCharge1), domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeclined}),
			when:  success(1, ordCharge2),
			want:  []domain.Event{ordSucceeded(1, ordCharge2), ordRefund(ordCharge2, domain.RefundRedundantEffect)}},
		{name: "A charge after the order was cancelled is a redundant effect.",
			given: []domain.Event{ordPlaced(), domain.OrderCancelled{OrderID: ordID}}, when: success(1, ordCharge1),
			want: []domain.Event{ordSucceeded(1, ordCharge1), ordRefund(ordCharge1, domain.RefundRedundantEffect)}},
		{name: "A redundant charge already being refunded records nothing.",
			given: append(confirmed[:4:4], ordSucceeded(1, ordCharge2), ordRefund(ordCharge2, domain.RefundRedundantEffect)), when: success(1, ordCharge2)},
		{name: "A charge of another amount than the order's needs review.",
			given: pendingWithAttempt, when: domain.PaymentResult{Attempt: 1, Outcome: domain.OutcomeSucceeded, ChargeID: ordCharge1, Amount: domain.Money{Amount: 1, Currency: "EUR"}},
			want: []domain.Event{domain.PaymentSucceeded{OrderID: ordID, Attempt: 1, ChargeID: ordCharge1, Amount: domain.Money{Amount: 1, Currency: "EUR"}},
				domain.OrderNeedsReview{OrderID: ordID, Reason: "charge ch_first is 1 EUR, the order is 3000 EUR"}}},
		{name: "A decline of the current attempt fails a pending order.",
			given: pendingWithAttempt, when: decline(1, ordCharge1),
			want: []domain.Event{failed(1, ordCharge1), domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeclined}}},
		{name: "The same decline again records nothing.",
			given: append(pendingWithAttempt[:2:2], failed(1, ordCharge1), domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeclined}),
			when:  decline(1, ordCharge1)},
		{name: "A decline while cancelling ends the order cancelled.",
			given: append(pendingWithAttempt[:2:2], domain.OrderCancelRequested{OrderID: ordID, Actor: ordActor}), when: decline(1, ordCharge1),
			want: []domain.Event{failed(1, ordCharge1), domain.OrderCancelled{OrderID: ordID}}},
		{name: "A decline of a superseded attempt is only a fact; the order stays pending.",
			given: append(pendingWithAttempt[:2:2], ordStarted(2, ordOwnerB, ordNow.Add(time.Minute))), when: decline(1, ordCharge1),
			want: []domain.Event{failed(1, ordCharge1)}},
		{name: "An older failure notice after the confirmation is only a fact; the order stays confirmed.",
			given: append(pendingWithAttempt[:2:2], ordStarted(2, ordOwnerB, ordNow.Add(time.Minute)), ordSucceeded(2, ordCharge2), ordConfirmed()),
			when:  decline(1, ordCharge1),
			want:  []domain.Event{failed(1, ordCharge1)}},
		{name: "A failure reported for the charge that paid a confirmed order needs review.",
			given: confirmed, when: decline(1, ordCharge1),
			want: []domain.Event{domain.OrderNeedsReview{OrderID: ordID, Reason: "the provider reports the paying charge ch_first as failed"}}},
		{name: "A refusal of a new attempt fails the order as impossible to pay.",
			given: append(pendingWithAttempt[:2:2], ordStarted(2, ordOwnerA, ordNow.Add(time.Minute))),
			when:  domain.PaymentResult{Attempt: 2, Outcome: domain.OutcomeFailed, Code: "resource_missing", Reason: "refused", FailReason: domain.FailNoAttempt},
			want: []domain.Event{domain.PaymentFailed{OrderID: ordID, Attempt: 2, Code: "resource_missing", Reason: "refused"},
				domain.OrderFailed{OrderID: ordID, Reason: domain.FailNoAttempt}}},
		{name: "An unknown outcome is recorded once per attempt.",
			given: pendingWithAttempt, when: unknown,
			want: []domain.Event{domain.PaymentOutcomeUnknown{OrderID: ordID, Attempt: 1, Reason: "timeout"}}},
		{name: "A second unknown outcome of the same attempt records nothing.",
			given: append(pendingWithAttempt[:2:2], domain.PaymentOutcomeUnknown{OrderID: ordID, Attempt: 1}), when: unknown},
		{name: "An unknown outcome after the confirmation records nothing.",
			given: confirmed, when: unknown},
		{name: "A fact for an order that does not exist records nothing.",
			when: success(1, ordCharge1)},
		{name: "A payment that requires the customer's action is recorded once, with its sealed secrets; the order stays pending.",
			given: append(pendingWithAttempt[:2:2], domain.PaymentOutcomeUnknown{OrderID: ordID, Attempt: 1}), when: action(1, ordCharge1),
			want: []domain.Event{ordAction(1, ordCharge1)}},
		{name: "The same action again records nothing.",
			given: append(pendingWithAttempt[:2:2], ordAction(1, ordCharge1)), when: action(1, ordCharge1)},
		{name: "An action found after the key was gone is recorded without secrets.",
			given: pendingWithAttempt, when: domain.PaymentResult{Attempt: 1, Outcome: domain.OutcomeRequiresAction, ChargeID: ordCharge1},
			want: []domain.Event{domain.PaymentActionRequired{OrderID: ordID, Attempt: 1, PaymentID: ordCharge1}}},
		{name: "An action found for an order that failed is recorded, so its payment is cancelled.",
			given: append(pendingWithAttempt[:2:2], domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeadline}), when: action(1, ordCharge1),
			want: []domain.Event{ordAction(1, ordCharge1)}},
		{name: "The success of a payment that required action confirms the order.",
			given: append(pendingWithAttempt[:2:2], ordAction(1, ordCharge1)), when: success(1, ordCharge1),
			want: []domain.Event{ordSucceeded(1, ordCharge1), ordConfirmed()}},
		{name: "A payment that required action and was cancelled fails the order.",
			given: append(pendingWithAttempt[:2:2], ordAction(1, ordCharge1)),
			when:  domain.PaymentResult{Attempt: 1, Outcome: domain.OutcomeFailed, ChargeID: ordCharge1, Code: "canceled", Reason: "declined", FailReason: domain.FailPaymentDeadline},
			want: []domain.Event{domain.PaymentFailed{OrderID: ordID, Attempt: 1, ChargeID: ordCharge1, Code: "canceled", Reason: "declined"},
				domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeadline}}},
		{name: "A late success of a payment whose order failed at its deadline is refunded.",
			given: append(pendingWithAttempt[:2:2], ordAction(1, ordCharge1), domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeadline}),
			when:  success(1, ordCharge1),
			want:  []domain.Event{ordSucceeded(1, ordCharge1), ordRefund(ordCharge1, domain.RefundRedundantEffect)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := orderFrom(tt.given...)
			checkEvents(t, fmt.Sprintf("Record(%+v)", tt.when), o.Record(tt.when, ordTickets), tt.want)
		})
	}
}

// TestOrderPaymentsToCancel: a payment waiting for the customer's action
// is cancelled once its order can no longer use it, until its final state
// is recorded.
func TestOrderPaymentsToCancel(t *testing.T) {
	t.Parallel()
	waiting := []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordAction(1, ordCharge1)}
	failedAt := domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeadline}
	tests := []struct {
		name  string
		given []domain.Event
		want  []string
	}{
		{name: "A pending order's payment is the driver's, not cancelled here.", given: waiting},
		{name: "A payment of an order that failed at its deadline is to be cancelled.",
			given: append(waiting[:3:3], failedAt), want: []string{ordCharge1}},
		{name: "Once cancelled (a recorded failure) it is not cancelled again.",
			given: append(waiting[:3:3], failedAt, domain.PaymentFailed{OrderID: ordID, Attempt: 1, ChargeID: ordCharge1, Code: "canceled"})},
		{name: "A late success ends it too (refunded as a redundant effect).",
			given: append(waiting[:3:3], failedAt, ordSucceeded(1, ordCharge1), ordRefund(ordCharge1, domain.RefundRedundantEffect))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := orderFrom(tt.given...)
			if diff := cmp.Diff(tt.want, o.PaymentsToCancel()); diff != "" {
				t.Errorf("PaymentsToCancel() (-want +got):\n%s", diff)
			}
		})
	}
	if got := domain.CancelKey("pi_1"); got != "cancel-pi_1" {
		t.Errorf("CancelKey(pi_1) = %q, want cancel-pi_1", got)
	}
}

func TestOrderRecordRefund(t *testing.T) {
	t.Parallel()
	confirmed := []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordSucceeded(1, ordCharge1), ordConfirmed()}
	refunded := domain.RefundSucceeded{OrderID: ordID, ChargeID: ordCharge1, RefundID: ordRefundID, Amount: ordAmount}
	tests := []decideCase[string]{
		{name: "A requested refund is recorded.",
			given: append(confirmed[:4:4], ordRefund(ordCharge1, domain.RefundCancelled), domain.OrderCancelled{OrderID: ordID}), when: ordCharge1,
			want: []domain.Event{refunded}},
		{name: "A refund already recorded records nothing.",
			given: append(confirmed[:4:4], ordRefund(ordCharge1, domain.RefundCancelled), domain.OrderCancelled{OrderID: ordID}, refunded),
			when:  ordCharge1},
		{name: "A refund of the paying charge that nobody requested needs review.",
			given: confirmed, when: ordCharge1,
			want: []domain.Event{domain.OrderNeedsReview{OrderID: ordID, Reason: "the provider refunded the paying charge ch_first without a request"}}},
		{name: "A refund of a charge the order does not know records nothing.",
			given: confirmed, when: ordCharge2},
	}
	runDecisions(t, tests, checkErrorIs, func(tt decideCase[string]) (string, []domain.Event, error) {
		o := orderFrom(tt.given...)
		return fmt.Sprintf("RecordRefund(%s)", tt.when), o.RecordRefund(tt.when, ordRefundID, ordAmount), nil
	})
}

// TestOrderRecordShortRefund: a refund the provider made for less than was
// requested (an operator's partial refund came first, and the provider
// refused the rest) is recorded with the amount made, and the order, whose
// charge still partly stands, needs review — once.
func TestOrderRecordShortRefund(t *testing.T) {
	t.Parallel()
	o := orderFrom(ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordSucceeded(1, ordCharge1), ordConfirmed(),
		ordRefund(ordCharge1, domain.RefundCancelled), domain.OrderCancelled{OrderID: ordID, VoidedTickets: ordTickets})
	short := domain.Money{Amount: ordAmount.Amount - 1000, Currency: ordAmount.Currency}
	want := []domain.Event{domain.RefundSucceeded{OrderID: ordID, ChargeID: ordCharge1, RefundID: ordRefundID, Amount: short},
		domain.OrderNeedsReview{OrderID: ordID, Reason: fmt.Sprintf("the provider refunded %d of the %d requested of charge %s "+
			"(another refund, such as a partial one made in its dashboard, came first); the rest is still charged",
			short.Amount, ordAmount.Amount, ordCharge1)}}
	got := o.RecordRefund(ordCharge1, ordRefundID, short)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("RecordRefund(%d of %d) (-want +got):\n%s", short.Amount, ordAmount.Amount, diff)
	}
	for _, e := range got {
		o.Apply(e)
	}
	if o.Status != domain.OrderStatusNeedsReview || o.NetCharged() != 1000 || len(o.PendingRefunds()) != 0 {
		t.Errorf("after the short refund: status %s, net %d, %d refunds pending; want needs_review, 1000, 0",
			o.Status, o.NetCharged(), len(o.PendingRefunds()))
	}
	if got := o.RecordRefund(ordCharge1, ordRefundID, short); len(got) != 0 {
		t.Errorf("RecordRefund() again = %v, want nothing", got)
	}
}

func TestOrderRefuseRefund(t *testing.T) {
	t.Parallel()
	confirmed := []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordSucceeded(1, ordCharge1), ordConfirmed()}
	cancelled := append(confirmed[:4:4], ordRefund(ordCharge1, domain.RefundCancelled), domain.OrderCancelled{OrderID: ordID, VoidedTickets: ordTickets})
	refused := func(charge string) domain.RefundRefused {
		return domain.RefundRefused{OrderID: ordID, ChargeID: charge, Code: "resource_missing", Reason: "No such charge."}
	}
	review := func(charge string) domain.OrderNeedsReview {
		return domain.OrderNeedsReview{OrderID: ordID,
			Reason: "the provider does not know charge " + charge + ", whose refund was requested (resource_missing)"}
	}
	redundant := append(confirmed[:4:4], ordSucceeded(1, ordCharge2), ordRefund(ordCharge2, domain.RefundRedundantEffect))
	tests := []decideCase[string]{
		{name: "A cancelled order whose charge the provider does not know needs review.",
			given: cancelled, when: ordCharge1, want: []domain.Event{refused(ordCharge1), review(ordCharge1)}},
		{name: "A confirmed order whose redundant charge the provider does not know needs review.",
			given: redundant, when: ordCharge2, want: []domain.Event{refused(ordCharge2), review(ordCharge2)}},
		{name: "An order in review already records only the refusal.",
			given: append(redundant[:6:6], refused(ordCharge2), review(ordCharge2), ordSucceeded(1, "ch_third"), ordRefund("ch_third", domain.RefundRedundantEffect)),
			when:  "ch_third", want: []domain.Event{refused("ch_third")}},
		{name: "A refusal already recorded records nothing.",
			given: append(cancelled[:6:6], refused(ordCharge1), review(ordCharge1)), when: ordCharge1},
		{name: "A refund that succeeded records nothing.",
			given: append(cancelled[:6:6], domain.RefundSucceeded{OrderID: ordID, ChargeID: ordCharge1, RefundID: ordRefundID, Amount: ordAmount}),
			when:  ordCharge1},
		{name: "A charge without a requested refund records nothing.",
			given: confirmed, when: ordCharge1},
	}
	runDecisions(t, tests, checkErrorIs, func(tt decideCase[string]) (string, []domain.Event, error) {
		o := orderFrom(tt.given...)
		return fmt.Sprintf("RefuseRefund(%s)", tt.when), o.RefuseRefund(tt.when, "resource_missing", "No such charge."), nil
	})
}

// TestOrderRefusedRefundIsNoLongerPending: after RefundRefused the refund is
// not sent again, the order is in review, the charge still counts as not
// refunded; a refund the provider makes later is still recorded.
func TestOrderRefusedRefundIsNoLongerPending(t *testing.T) {
	t.Parallel()
	o := orderFrom(ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordSucceeded(1, ordCharge1), ordConfirmed(),
		ordRefund(ordCharge1, domain.RefundCancelled), domain.OrderCancelled{OrderID: ordID, VoidedTickets: ordTickets})
	if got := len(o.PendingRefunds()); got != 1 {
		t.Fatalf("PendingRefunds() before the refusal = %d refunds, want 1", got)
	}
	for _, e := range o.RefuseRefund(ordCharge1, "resource_missing", "No such charge.") {
		o.Apply(e)
	}
	if got := o.PendingRefunds(); len(got) != 0 {
		t.Errorf("PendingRefunds() after the refusal = %v, want none", got)
	}
	if o.Status != domain.OrderStatusNeedsReview || o.NetCharged() != ordAmount.Amount || o.FirstOutcome != domain.OrderStatusConfirmed {
		t.Errorf("after the refusal: status %s, net %d, first outcome %s; want needs_review, %d, confirmed",
			o.Status, o.NetCharged(), o.FirstOutcome, ordAmount.Amount)
	}
	want := []domain.Event{domain.RefundSucceeded{OrderID: ordID, ChargeID: ordCharge1, RefundID: ordRefundID, Amount: ordAmount}}
	if diff := cmp.Diff(want, o.RecordRefund(ordCharge1, ordRefundID, ordAmount)); diff != "" {
		t.Errorf("RecordRefund() after the refusal (-want +got):\n%s", diff)
	}
}

func TestOrderCancel(t *testing.T) {
	t.Parallel()
	withAttempt := []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow)}
	confirmed := append(withAttempt[:2:2], ordSucceeded(1, ordCharge1), ordConfirmed())
	tests := []decideCase[string]{
		{name: "A confirmed order is refunded, its tickets voided and it is cancelled.",
			given: confirmed, when: ordActor, now: ordNow,
			want: []domain.Event{ordRefund(ordCharge1, domain.RefundCancelled), domain.OrderCancelled{OrderID: ordID, VoidedTickets: ordTickets}}},
		{name: "A pending order without an attempt is cancelled at once.",
			given: []domain.Event{ordPlaced()}, when: ordActor, now: ordNow,
			want: []domain.Event{domain.OrderCancelled{OrderID: ordID}}},
		{name: "A pending order with a payment in flight becomes cancelling.",
			given: withAttempt, when: ordActor, now: ordNow,
			want: []domain.Event{domain.OrderCancelRequested{OrderID: ordID, Actor: ordActor}}},
		{name: "A pending order with an unknown outcome becomes cancelling.",
			given: append(withAttempt[:2:2], domain.PaymentOutcomeUnknown{OrderID: ordID, Attempt: 1}), when: ordActor, now: ordNow,
			want: []domain.Event{domain.OrderCancelRequested{OrderID: ordID, Actor: ordActor}}},
		{name: "A repeat while cancelling records nothing.",
			given: append(withAttempt[:2:2], domain.OrderCancelRequested{OrderID: ordID, Actor: ordActor}), when: ordActor, now: ordNow},
		{name: "A repeat after the cancel records nothing, even after the show started.",
			given: []domain.Event{ordPlaced(), domain.OrderCancelled{OrderID: ordID}}, when: ordActor, now: ordShowAt},
		{name: "A failed order cannot be cancelled.",
			given: []domain.Event{ordPlaced(), domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeclined}}, when: ordActor, now: ordNow,
			wantErr: domain.ErrNotCancellable},
		{name: "An order in review cannot be cancelled.",
			given: []domain.Event{ordPlaced(), domain.OrderNeedsReview{OrderID: ordID, Reason: "x"}}, when: ordActor, now: ordNow,
			wantErr: domain.ErrNotCancellable},
		{name: "A repeat after the cancel records nothing once its refund was refused and the order is in review.",
			given: append(confirmed[:4:4], ordRefund(ordCharge1, domain.RefundCancelled), domain.OrderCancelled{OrderID: ordID, VoidedTickets: ordTickets},
				domain.RefundRefused{OrderID: ordID, ChargeID: ordCharge1, Code: "resource_missing"}, domain.OrderNeedsReview{OrderID: ordID, Reason: "x"}),
			when: ordActor, now: ordNow},
		{name: "Nothing is cancelled once the show has started.",
			given: confirmed, when: ordActor, now: ordShowAt, wantErr: domain.ErrShowStarted},
		{name: "Another actor's order is not found.",
			given: confirmed, when: "user-mallory", now: ordNow, wantErr: domain.ErrOrderNotFound},
	}
	runDecisions(t, tests, checkErrorIs, func(tt decideCase[string]) (string, []domain.Event, error) {
		o := orderFrom(tt.given...)
		got, err := o.Cancel(tt.when, tt.now, ordShowAt)
		return fmt.Sprintf("Cancel(%s)", tt.when), got, err
	})
}

func TestOrderEndsUncharged(t *testing.T) {
	t.Parallel()
	lateStart := ordDeadline.Add(-10 * time.Second) // lease until deadline + 20 s
	settledAt := lateStart.Add(ordLease + ordSettle)
	withAttempt := []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, lateStart)}
	cancelling := append(withAttempt[:2:2], domain.OrderCancelRequested{OrderID: ordID, Actor: ordActor})
	failedDeadline := []domain.Event{domain.OrderFailed{OrderID: ordID, Reason: domain.FailPaymentDeadline}}
	cancelled := []domain.Event{domain.OrderCancelled{OrderID: ordID}}
	tests := []struct {
		name      string
		given     []domain.Event
		now       time.Time
		uncharged bool
		unsent    bool
		wantFail  []domain.Event
		wantEnd   []domain.Event
	}{
		{name: "A pending order without an attempt fails at its deadline.",
			given: []domain.Event{ordPlaced()}, now: ordDeadline, uncharged: true, wantFail: failedDeadline},
		{name: "Nothing fails before the deadline.",
			given: []domain.Event{ordPlaced()}, now: ordDeadline.Add(-time.Nanosecond), uncharged: true},
		{name: "A live lease keeps an order past its deadline pending.",
			given: withAttempt, now: ordDeadline.Add(time.Second), uncharged: true},
		{name: "An ended lease that has not settled keeps the order pending or cancelling.",
			given: withAttempt, now: settledAt.Add(-time.Nanosecond), uncharged: true},
		{name: "A settled, uncharged payment fails past the deadline.",
			given: withAttempt, now: settledAt, uncharged: true, wantFail: failedDeadline},
		{name: "A payment the caller did not find uncharged never ends the order.",
			given: withAttempt, now: settledAt.Add(time.Hour)},
		{name: "A settled, uncharged payment finishes a cancel.",
			given: cancelling, now: settledAt, uncharged: true, wantEnd: cancelled},
		{name: "A cancel waits for the payment to settle.",
			given: cancelling, now: settledAt.Add(-time.Nanosecond), uncharged: true},
		{name: "A cancel of a lease its starter never sent under finishes at once.",
			given: cancelling, now: lateStart, uncharged: true, unsent: true, wantEnd: cancelled},
		{name: "A payment waiting for the customer's action fails at the deadline, its lease live or not.",
			given: append(withAttempt[:2:2], ordAction(1, ordCharge1)), now: ordDeadline, uncharged: true, wantFail: failedDeadline},
		{name: "A confirmed order neither fails nor finishes a cancel.",
			given: append(withAttempt[:2:2], ordSucceeded(1, ordCharge1), ordConfirmed()), now: settledAt, uncharged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := orderFrom(tt.given...)
			if diff := cmp.Diff(tt.wantFail, o.FailPastDeadline(tt.now, ordSettle, tt.uncharged)); diff != "" {
				t.Errorf("FailPastDeadline(%s) events (-want +got):\n%s", tt.now, diff)
			}
			if diff := cmp.Diff(tt.wantEnd, o.FinishCancel(tt.now, ordSettle, tt.uncharged, tt.unsent)); diff != "" {
				t.Errorf("FinishCancel(%s) events (-want +got):\n%s", tt.now, diff)
			}
		})
	}
}

func TestOrderNetCharged(t *testing.T) {
	t.Parallel()
	o := orderFrom(ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordSucceeded(1, ordCharge1), ordConfirmed(),
		ordSucceeded(1, ordCharge2), ordRefund(ordCharge2, domain.RefundRedundantEffect))
	if got := o.NetCharged(); got != 2*ordAmount.Amount {
		t.Errorf("NetCharged() with a redundant charge not yet refunded = %d, want %d", got, 2*ordAmount.Amount)
	}
	o.Apply(domain.RefundSucceeded{OrderID: ordID, ChargeID: ordCharge2, RefundID: ordRefundID, Amount: ordAmount})
	if got := o.NetCharged(); got != ordAmount.Amount {
		t.Errorf("NetCharged() after the redundant refund = %d, want %d", got, ordAmount.Amount)
	}
	if o.ChargeID != ordCharge1 || o.Status != domain.OrderStatusConfirmed {
		t.Errorf("order paid by %s is %s, want paid by %s and confirmed", o.ChargeID, o.Status, ordCharge1)
	}
	if len(o.PendingRefunds()) != 0 {
		t.Errorf("PendingRefunds() = %v, want none", o.PendingRefunds())
	}
}

// TestOrderSecrets: the order keeps the sealed token, the first start's
// inputs (schema version 3) and the sealed secrets of a payment that
// requires action; it still reads the request bytes of version-1 (clear)
// and version-2 (sealed) attempts, which are Legacy; renewals and
// takeovers keep the first start's inputs or bytes.
func TestOrderSecrets(t *testing.T) {
	t.Parallel()
	claim := domain.OrderClaimed{ReservationID: ordResID, OrderID: ordID, ShowID: ordShowID, Actor: ordActor, Intent: ordIntent, Quantity: 2, Amount: ordAmount}
	v1Placed := ordPlaced()
	v1Placed.Private = &domain.OrderPrivate{PaymentToken: "tok_visa_v1"}
	v1Started := ordStarted(1, ordOwnerA, ordNow)
	v1Started.Description, v1Started.Deployment = "", ""
	v1Started.Private = &domain.AttemptPrivate{RequestBody: `{"token":"tok_visa_v1"}`}
	v2Started := v1Started
	v2Started.Private = &domain.AttemptPrivate{SealedRequestBody: []byte("sealed body")}
	takeover := ordStarted(1, ordOwnerB, ordNow.Add(time.Minute))
	takeover.Description, takeover.Deployment = "", ""
	tests := []struct {
		name       string
		given      []domain.Event
		hasToken   bool
		token      string
		sealed     string
		body       string
		sealedBody string
		legacy     bool
		inputs     string // the attempt's description and deployment
		action     string
	}{
		{name: "An order placed with a sealed token carries it sealed.",
			given: []domain.Event{domain.PlacedFrom(claim, ordDeadline, []byte("sealed-1"))}, hasToken: true, sealed: "sealed-1"},
		{name: "An order placed without a token has none, and no private part.",
			given: []domain.Event{domain.PlacedFrom(claim, ordDeadline, nil)}},
		{name: "A version-1 order still has its clear token.",
			given: []domain.Event{v1Placed}, hasToken: true, token: "tok_visa_v1"},
		{name: "A takeover keeps the first start's inputs.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), takeover}, hasToken: true, sealed: "sealed tok_visa",
			inputs: "2 ticket(s)/prod"},
		{name: "A takeover of a version-2 attempt keeps its sealed bytes; the attempt is legacy.",
			given: []domain.Event{ordPlaced(), v2Started, takeover}, hasToken: true, sealed: "sealed tok_visa",
			sealedBody: "sealed body", legacy: true, inputs: "/"},
		{name: "A version-3 takeover of a version-1 attempt keeps the clear bytes; the attempt is legacy.",
			given: []domain.Event{v1Placed, v1Started, takeover}, hasToken: true, token: "tok_visa_v1", body: `{"token":"tok_visa_v1"}`,
			legacy: true, inputs: "/"},
		{name: "A payment that requires action keeps its sealed secrets on the attempt.",
			given: []domain.Event{ordPlaced(), ordStarted(1, ordOwnerA, ordNow), ordAction(1, ordCharge1)}, hasToken: true, sealed: "sealed tok_visa",
			inputs: "2 ticket(s)/prod", action: "sealed action-" + ordCharge1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := orderFrom(tt.given...)
			if o.HasPaymentToken() != tt.hasToken || o.PaymentToken != tt.token || string(o.SealedPaymentToken) != tt.sealed {
				t.Errorf("order token = has %v, clear %q, sealed %q; want %v, %q, %q", o.HasPaymentToken(), o.PaymentToken, o.SealedPaymentToken,
					tt.hasToken, tt.token, tt.sealed)
			}
			a := o.LastAttempt()
			if a == nil {
				return
			}
			if a.RequestBody != tt.body || string(a.SealedRequestBody) != tt.sealedBody || a.Legacy() != tt.legacy {
				t.Errorf("attempt bytes = clear %q, sealed %q, legacy %v; want %q, %q, %v", a.RequestBody, a.SealedRequestBody, a.Legacy(),
					tt.body, tt.sealedBody, tt.legacy)
			}
			if got := a.Description + "/" + a.Deployment; got != tt.inputs || a.Amount != ordAmount {
				t.Errorf("attempt inputs = %q, %v; want %q, %v", got, a.Amount, tt.inputs, ordAmount)
			}
			if string(a.SealedAction) != tt.action {
				t.Errorf("attempt sealed action = %q, want %q", a.SealedAction, tt.action)
			}
		})
	}
	if p := domain.PlacedFrom(claim, ordDeadline, nil); p.Private != nil {
		t.Errorf("PlacedFrom(nil token).Private = %+v, want nil", p.Private)
	}
}
