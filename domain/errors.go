package domain

import "errors"

// Kind classifies an Error. The HTTP adapter maps each Kind to one HTTP
// status (RFC 9110 §15), in its one Kind→status table, and nowhere else; the
// zero Kind is Internal. A Kind is stored by name (String) in IntentRejected,
// so a name never changes meaning.
type Kind uint8

// The kinds of domain errors.
const (
	Internal         Kind = iota // a bug or an unclassified failure: 500
	Invalid                      // the request is malformed or violates validation: 400
	NotFound                     // the resource does not exist or is not the caller's: 404
	Conflict                     // the request conflicts with current state: 409
	Rejected                     // a definitive refusal of the request as sent (a reused idempotency key): 422
	Unavailable                  // a transient failure; retrying later may succeed: 503
	Forbidden                    // the actor may not do this: 403
	Gone                         // the resource existed but can no longer be acted on: 410
	Unauthorized                 // no valid credentials (a missing or unknown bearer token): 401
	RateLimited                  // the actor's retry budget is spent; retry after a pause: 429
	PaymentRequired              // the payment was declined or did not complete: 402
	UnsupportedMedia             // the body's media type is not accepted: 415
	TooLarge                     // the body exceeds its size limit: 413
	Timeout                      // the request did not arrive whole in time: 408

	lastKind = Timeout
)

// String returns the kind's lowercase name.
func (k Kind) String() string {
	switch k {
	case Invalid:
		return "invalid"
	case NotFound:
		return "not_found"
	case Conflict:
		return "conflict"
	case Rejected:
		return "rejected"
	case Unavailable:
		return "unavailable"
	case Forbidden:
		return "forbidden"
	case Gone:
		return "gone"
	case Unauthorized:
		return "unauthorized"
	case RateLimited:
		return "rate_limited"
	case PaymentRequired:
		return "payment_required"
	case UnsupportedMedia:
		return "unsupported_media"
	case TooLarge:
		return "too_large"
	case Timeout:
		return "timeout"
	default:
		return "internal"
	}
}

// Error is the one error type of the domain. Code is a stable, kebab-case
// identifier for clients (it becomes the problem's "code" and the last path
// segment of its "type", RFC 9457 §3.1); Msg is a human-readable detail that
// never contains secrets. Fields lists the request fields concerned, where
// that helps a client (for example the differing fields of a reused key).
type Error struct {
	Kind   Kind
	Code   string
	Msg    string
	Fields []string
}

// Error returns Msg, or Code when Msg is empty.
func (e *Error) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	return e.Code
}

// Is matches another *Error with the same Code, so a sentinel matches a copy
// that carries a more specific message (see With).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code
}

// With returns a copy of e with msg as its detail; errors.Is(copy, e) holds.
func (e *Error) With(msg string) *Error {
	c := *e
	c.Msg = msg
	return &c
}

// ParseKind returns the Kind named by String, or Internal.
func ParseKind(s string) Kind {
	for k := Internal; k <= lastKind; k++ {
		if k.String() == s {
			return k
		}
	}
	return Internal
}

// KindOf returns the Kind of the first *Error in err's chain, or Internal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// Sentinel errors. Compare with errors.Is.
var (
	ErrInvalid                   = &Error{Kind: Invalid, Code: "invalid-request", Msg: "the request is invalid"}
	ErrNotFound                  = &Error{Kind: NotFound, Code: "not-found", Msg: "resource not found"}
	ErrShowNotFound              = &Error{Kind: NotFound, Code: "show-not-found", Msg: "show not found"}
	ErrReservationNotFound       = &Error{Kind: NotFound, Code: "reservation-not-found", Msg: "reservation not found"}
	ErrOrderNotFound             = &Error{Kind: NotFound, Code: "order-not-found", Msg: "order not found"}
	ErrShowExists                = &Error{Kind: Conflict, Code: "show-exists", Msg: "show already scheduled"}
	ErrSoldOut                   = &Error{Kind: Conflict, Code: "sold-out", Msg: "not enough seats available"}
	ErrShowStarted               = &Error{Kind: Conflict, Code: "show-started", Msg: "the show has already started"}
	ErrReservationAlreadyOrdered = &Error{Kind: Conflict, Code: "reservation-already-ordered", Msg: "the reservation already has an order"}
	ErrReservationExpired        = &Error{Kind: Gone, Code: "reservation-expired", Msg: "the reservation has expired"}
	ErrReservationReleased       = &Error{Kind: Gone, Code: "reservation-released", Msg: "the reservation was released"}
	ErrPaymentDeclined           = &Error{Kind: PaymentRequired, Code: "payment-declined", Msg: "the payment was declined"}
	ErrPaymentFailed             = &Error{Kind: PaymentRequired, Code: "payment-failed", Msg: "the payment did not complete; the order failed"}
	ErrNotCancellable            = &Error{Kind: Conflict, Code: "order-not-cancellable", Msg: "the order can no longer be cancelled"}
	ErrVersionConflict           = &Error{Kind: Conflict, Code: "version-conflict", Msg: "the stream changed concurrently"}
	ErrContention                = &Error{Kind: Unavailable, Code: "contention", Msg: "too many concurrent requests for this resource; retry later"}
	ErrUnavailable               = &Error{Kind: Unavailable, Code: "unavailable", Msg: "a dependency is unavailable; retry later"}
	ErrForbidden                 = &Error{Kind: Forbidden, Code: "forbidden", Msg: "the actor may not do this"}
	ErrUnauthorized              = &Error{Kind: Unauthorized, Code: "unauthorized", Msg: "a valid bearer token is required"}
	ErrRateLimited               = &Error{Kind: RateLimited, Code: "rate-limited", Msg: "too many requests for this actor; retry later"}
)
