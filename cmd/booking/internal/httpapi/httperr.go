package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// kindStatus is the one table that maps an error Kind to an HTTP status
// (RFC 9110 §15); every error answer, recorded rejections included, takes its
// status from it.
var kindStatus = map[domain.Kind]int{
	domain.Internal:         http.StatusInternalServerError,
	domain.Invalid:          http.StatusBadRequest,
	domain.NotFound:         http.StatusNotFound,
	domain.Conflict:         http.StatusConflict,
	domain.Rejected:         http.StatusUnprocessableEntity,
	domain.Unavailable:      http.StatusServiceUnavailable,
	domain.Forbidden:        http.StatusForbidden,
	domain.Gone:             http.StatusGone,
	domain.Unauthorized:     http.StatusUnauthorized,
	domain.RateLimited:      http.StatusTooManyRequests,
	domain.PaymentRequired:  http.StatusPaymentRequired,
	domain.UnsupportedMedia: http.StatusUnsupportedMediaType,
	domain.TooLarge:         http.StatusRequestEntityTooLarge,
	domain.Timeout:          http.StatusRequestTimeout,

	kindMethodNotAllowed: http.StatusMethodNotAllowed,
	kindWebhookBusy:      http.StatusServiceUnavailable,
}

// kindMethodNotAllowed is the kind of the one refusal only the router makes
// (a path without a route for the method, RFC 9110 §15.5.6); it extends
// domain.Kind from 128 up, clear of the domain's kinds, and is never recorded.
const kindMethodNotAllowed domain.Kind = 128

// Codes produced by the HTTP layer itself.
const (
	codeUnauthorized     = "unauthorized"
	codeRateLimited      = "rate-limited"
	codeUnsupportedMedia = "unsupported-media-type"
	codeBodyTooLarge     = "body-too-large"
	codeKeyInvalid       = "idempotency-key-invalid"
)

// statusOf returns the HTTP status of err: its Kind's, from kindStatus. A
// rejection recorded before rejections stored only their kind (a version 1
// IntentRejected) answers the status it recorded, so its repeats answer as
// they always did.
func statusOf(err error) int {
	var rej *commands.Rejection
	if errors.As(err, &rej) && rej.LegacyStatus != 0 {
		return rej.LegacyStatus
	}
	var de *domain.Error
	if errors.As(err, &de) {
		return kindStatus[de.Kind]
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
	// RequestID is the id the service assigned the request (a UUIDv7),
	// the request_id of its log lines and events; ClientRequestID is the
	// client's X-Request-Id when kept, their client_request_id.
	RequestID       string `json:"request_id,omitempty"`
	ClientRequestID string `json:"client_request_id,omitempty"`
}

// writeError answers err as application/problem+json. Internal errors are
// logged in full and answered with a generic detail; retryable answers carry
// Retry-After.
func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	err = budgetSpent(r, err)
	status := statusOf(err)
	p := problem{Status: status, Title: http.StatusText(status), Instance: r.URL.Path}
	if ri := info(r.Context()); ri != nil {
		p.RequestID, p.ClientRequestID = ri.server, ri.client
	}
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The client went away; nobody reads this answer (nginx's 499).
		a.log.InfoContext(r.Context(), "client closed the request", "method", r.Method, "path", r.URL.Path)
		w.WriteHeader(499)
		return
	}
	var de *domain.Error
	if errors.As(err, &de) && de.Kind != domain.Internal {
		p.Code, p.Detail, p.Fields = de.Code, de.Error(), de.Fields
	} else {
		p.Code, p.Detail = "internal", "an internal error occurred; it has been logged"
		a.log.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusServiceUnavailable && de != nil && de.Kind == domain.Unavailable {
		a.log.WarnContext(r.Context(), "dependency unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
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

// errBudgetSpent is the answer to a request whose own work ended while
// its client still waited: its budget (detachedBudget, webhookTimeout) ran
// out, or a shutdown past its grace period abandoned its detached steps
// (commands.Handler.Abandon). Transient, so it is a 503 with Retry-After and
// never an intent's outcome: whatever the request appended stands, and a
// repeat (with the same Idempotency-Key, where the request has one)
// answers its outcome, or 202 while that is pending.
var errBudgetSpent = domain.ErrUnavailable.With("the request ran out of time; " +
	"what it recorded stands: repeat it (with the same Idempotency-Key, where it has one) to get its outcome")

// budgetSpent returns errBudgetSpent (wrapping err) when err is a context's
// end (deadline or cancellation) that is not the client's own (the
// client's is answered 499) and carries no domain error, and err
// otherwise. Without it such a request, for example one that outran
// detachedBudget waiting for a payment after slow earlier steps, would be
// answered 500.
func budgetSpent(r *http.Request, err error) error {
	var de *domain.Error
	if r.Context().Err() != nil || errors.As(err, &de) ||
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", errBudgetSpent, err)
}

// writeProblem writes p with its Content-Length, so the answer is complete
// on the wire even when the connection is held open after it
// (lingerAfterBodyTimeout). Messages keep <, > and & as they are (the
// answer is JSON, never HTML), so `Bearer <token>` reads as written.
func writeProblem(w http.ResponseWriter, p problem) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil { // Encode ends the value with "\n"
		buf.Reset()
		buf.WriteString(`{"type":"about:blank","title":"Internal Server Error","status":500,"code":"internal"}` + "\n")
		p.Status = http.StatusInternalServerError
	}
	raw := buf.Bytes()
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
