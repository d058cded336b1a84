package domain

import "strings"

// Event type names: the stable name every event is stored with (its
// EventType), the same in every schema version. They are spelled only here;
// code outside this package names an event type by these constants or by
// a value's EventType.
const (
	TypeShowScheduled          = "ShowScheduled"
	TypeSeatsHeld              = "SeatsHeld"
	TypeSeatsReleased          = "SeatsReleased"
	TypeReservationHeld        = "ReservationHeld"
	TypeReservationOrdered     = "ReservationOrdered"
	TypeReservationExpired     = "ReservationExpired"
	TypeReservationReleased    = "ReservationReleased"
	TypeOrderClaimed           = "OrderClaimed"
	TypeExpiryClaimed          = "ExpiryClaimed"
	TypeOrderPlaced            = "OrderPlaced"
	TypePaymentAttemptStarted  = "PaymentAttemptStarted"
	TypePaymentSucceeded       = "PaymentSucceeded"
	TypePaymentFailed          = "PaymentFailed"
	TypePaymentOutcomeUnknown  = "PaymentOutcomeUnknown"
	TypePaymentActionRequired  = "PaymentActionRequired"
	TypeOrderConfirmed         = "OrderConfirmed"
	TypeOrderFailed            = "OrderFailed"
	TypeOrderCancelRequested   = "OrderCancelRequested"
	TypeOrderCancelled         = "OrderCancelled"
	TypeRefundRequested        = "RefundRequested"
	TypeRefundSucceeded        = "RefundSucceeded"
	TypeRefundRefused          = "RefundRefused"
	TypeOrderNeedsReview       = "OrderNeedsReview"
	TypePaymentSecretsShredded = "PaymentSecretsShredded"
	TypeIntentRecorded         = "IntentRecorded"
	TypeIntentResumed          = "IntentResumed"
	TypeIntentRejected         = "IntentRejected"
)

// Stream categories: every stream name is a category (a prefix ending in
// "-") followed by an id (a UUID; a hex SHA-256 for intents). The claim
// category begins with the reservation category's prefix, so a reader that
// matches prefixes tests CategoryClaim before CategoryReservation
// (CategoryOf does).
const (
	CategoryShow        = "show-"
	CategoryReservation = "reservation-"
	CategoryClaim       = "reservation-order-"
	CategoryOrder       = "order-"
	CategoryIntent      = "intent-"
)

// Categories lists the stream categories, the claim category before the
// reservation category whose prefix it extends.
var Categories = []string{CategoryShow, CategoryClaim, CategoryReservation, CategoryOrder, CategoryIntent}

// CategoryOf returns the category of stream name and the id after it, or
// "" and false when name is of no category.
func CategoryOf(name string) (category, id string, ok bool) {
	for _, c := range Categories {
		if id, ok := strings.CutPrefix(name, c); ok {
			return c, id, true
		}
	}
	return "", "", false
}

// ShowStream names a show's stream.
func ShowStream(showID string) string { return CategoryShow + showID }

// ReservationStream names a reservation's stream.
func ReservationStream(id string) string { return CategoryReservation + id }

// ClaimStream names a reservation's uniqueness stream.
func ClaimStream(reservationID string) string { return CategoryClaim + reservationID }

// OrderStream names an order's stream.
func OrderStream(orderID string) string { return CategoryOrder + orderID }

// What ends an order, and what it still owes.

// OrderEndTypes are the event types that give an order a final status
// (Order.Final: confirmed, failed, cancelled, or in review until an
// operator acts): after one, the order's payment is driven no more. A
// refund it owes is still sent (OrderObligations).
var OrderEndTypes = []string{TypeOrderConfirmed, TypeOrderFailed, TypeOrderCancelled, TypeOrderNeedsReview}

// SendEndTypes are the event types after which an order can send no more
// payment requests, so its data key may be deleted: OrderEndTypes and
// OrderCancelRequested (a cancelling order starts no new send).
var SendEndTypes = []string{TypeOrderConfirmed, TypeOrderFailed, TypeOrderCancelled, TypeOrderNeedsReview, TypeOrderCancelRequested}

// EndsOrder reports whether an event of type typ gives its order a final
// status (OrderEndTypes).
func EndsOrder(typ string) bool { return contains(OrderEndTypes, typ) }

// EndsSending reports whether, after an event of type typ, its order can
// send no more payment requests (SendEndTypes).
func EndsSending(typ string) bool { return contains(SendEndTypes, typ) }

// Obligation is work that events of a stream open and later close, each
// naming it by a string member of its data (by JSON name): Opens' events
// open the one named by OpenMember, Closes' events close the one named by
// CloseMember. An event without the member (or with JSON null) names none.
type Obligation struct {
	Opens       []string
	OpenMember  string
	Closes      []string
	CloseMember string
}

// OrderObligations are what an order may still owe once it ended, so the
// payment reconciler visits it until each is closed: a refund requested
// (RefundRequested's charge_id) until it succeeded or was refused
// (RefundSucceeded, RefundRefused); and a payment that required the
// customer's action (PaymentActionRequired's payment_id) until its final
// state is recorded (PaymentSucceeded or PaymentFailed of that charge_id),
// since one that still waits is cancelled.
var OrderObligations = []Obligation{
	{Opens: []string{TypeRefundRequested}, OpenMember: "charge_id",
		Closes: []string{TypeRefundSucceeded, TypeRefundRefused}, CloseMember: "charge_id"},
	{Opens: []string{TypePaymentActionRequired}, OpenMember: "payment_id",
		Closes: []string{TypePaymentSucceeded, TypePaymentFailed}, CloseMember: "charge_id"},
}

func contains(set []string, s string) bool {
	for _, x := range set {
		if x == s {
			return true
		}
	}
	return false
}
