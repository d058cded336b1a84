package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// kindStatus is the one table that maps an error kind to an HTTP status
// (RFC 9110 §15): every answer that is not a success takes its status from
// here, in writeError. Its first rows are the domain's kinds; the last are
// the kinds of the HTTP layer's own refusals, declared below.
var kindStatus = map[domain.Kind]int{
	domain.Internal:    http.StatusInternalServerError,
	domain.Invalid:     http.StatusBadRequest,
	domain.NotFound:    http.StatusNotFound,
	domain.Conflict:    http.StatusConflict,
	domain.Rejected:    http.StatusUnprocessableEntity,
	domain.Unavailable: http.StatusServiceUnavailable,
	domain.Forbidden:   http.StatusForbidden,
	domain.Gone:        http.StatusGone,

	kindUnauthorized:     http.StatusUnauthorized,
	kindRateLimited:      http.StatusTooManyRequests,
	kindPaymentFailed:    http.StatusPaymentRequired,
	kindUnsupportedMedia: http.StatusUnsupportedMediaType,
	kindBodyTooLarge:     http.StatusRequestEntityTooLarge,
	kindRequestTimeout:   http.StatusRequestTimeout,
	kindMethodNotAllowed: http.StatusMethodNotAllowed,
}

// Kinds of the refusals and outcomes that only the HTTP layer produces. They
// extend domain.Kind from 128 up, clear of the domain's own kinds, and never
// leave this package: nothing records them.
const (
	kindUnauthorized     domain.Kind = 128 + iota // no or an unknown bearer token
	kindRateLimited                               // over the actor's retry budget
	kindPaymentFailed                             // the order's payment failed (the order is in the problem)
	kindUnsupportedMedia                          // a body that is not JSON
	kindBodyTooLarge                              // a body beyond its limit
	kindRequestTimeout                            // a body that did not arrive within the read timeout
	kindMethodNotAllowed                          // a path that has no route for the method
)

// Codes produced by the HTTP layer itself.
const (
	codeUnauthorized     = "unauthorized"
	codeRateLimited      = "rate-limited"
	codeUnsupportedMedia = "unsupported-media-type"
	codeBodyTooLarge     = "body-too-large"
	codeKeyInvalid       = "idempotency-key-invalid"
	codePaymentFailed    = "payment-failed"
)

// statusOf returns the HTTP status of err: the status a recorded rejection
// was stored with (so a replay answers what the first request did), else
// kindStatus of err's kind; 500 for an error that is not a *domain.Error.
func statusOf(err error) int {
	var rej *commands.Rejection
	if errors.As(err, &rej) && rej.Status != 0 {
		return rej.Status
	}
	var de *domain.Error
	if errors.As(err, &de) {
		if s, ok := kindStatus[de.Kind]; ok {
			return s
		}
	}
	return http.StatusInternalServerError
}

// orderFailedError is the answer to an order whose payment failed: its
// problem carries the order (order_id and order members) beside the domain
// error it wraps.
type orderFailedError struct {
	err   *domain.Error
	order domain.Order
}

// Error returns the wrapped error's detail.
func (e *orderFailedError) Error() string { return e.err.Error() }

// Unwrap returns the domain error.
func (e *orderFailedError) Unwrap() error { return e.err }

// problem is an RFC 9457 problem details object with this API's stable code
// and extension members.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Code     string   `json:"code"`
	Instance string   `json:"instance,omitempty"`
	Fields   []string `json:"fields,omitempty"`
	OrderID  string   `json:"order_id,omitempty"`
	Order    any      `json:"order,omitempty"`
}

// writeError answers err as application/problem+json. Internal errors are
// logged in full and answered with a generic detail; retryable answers carry
// Retry-After.
func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	p := problem{Status: status, Title: http.StatusText(status), Instance: r.URL.Path}
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The client went away; nobody reads this answer (nginx's 499).
		a.log.Info("client closed the request", "method", r.Method, "path", r.URL.Path)
		w.WriteHeader(499)
		return
	}
	var de *domain.Error
	if errors.As(err, &de) && de.Kind != domain.Internal {
		p.Code, p.Detail, p.Fields = de.Code, de.Error(), de.Fields
	} else {
		p.Code, p.Detail = "internal", "an internal error occurred; it has been logged"
		a.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusServiceUnavailable && de != nil && de.Kind == domain.Unavailable {
		a.log.Warn("dependency unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	var failed *orderFailedError
	if errors.As(err, &failed) {
		p.OrderID, p.Order = failed.order.ID, viewOrder(failed.order)
	}
	var rej *commands.Rejection
	if errors.As(err, &rej) && rej.ResourceID != "" && rej.Err.Code == domain.ErrReservationAlreadyOrdered.Code {
		p.OrderID = rej.ResourceID
	}
	if !idempotencyHeaders(w, err) && status == http.StatusServiceUnavailable {
		setRetryAfter(w, time.Second)
	}
	p.Type = "https://booking.invalid/problems/" + p.Code
	writeProblem(w, p)
}

// writeProblem writes p with its Content-Length, so the answer is complete
// on the wire even when the connection is held open after it (lingerAfterBodyTimeout).
func writeProblem(w http.ResponseWriter, p problem) {
	raw, err := json.Marshal(p)
	if err != nil {
		raw = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"code":"internal"}`)
		p.Status = http.StatusInternalServerError
	}
	raw = append(raw, '\n')
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(raw)
}

// httpError is an HTTP-layer refusal (auth, rate limit, media type).
func httpError(kind domain.Kind, code, msg string, fields ...string) *domain.Error {
	return &domain.Error{Kind: kind, Code: code, Msg: msg, Fields: fields}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
